#include "simulator/collective_stream.h"

#include <algorithm>

namespace ptdp::sim {

CollectiveStreams::CollectiveStreams(int ranks, int nic_egress, int nic_ingress, Kinds kinds)
    : st_(ranks), nic_egress_(nic_egress), nic_ingress_(nic_ingress), kinds_(kinds) {}

void CollectiveStreams::Reset(int ranks, int nic_egress, int nic_ingress) {
  st_.resize(size_t(ranks));
  for (Stream& s : st_) {
    s.jobs.clear(), s.next = 0, s.wake_at = -1, s.running = false, s.parts_left = 0;
    s.alone = false, s.free_at = 0, s.flows.clear();
  }
  nic_egress_ = nic_egress;
  nic_ingress_ = nic_ingress;
}

void CollectiveStreams::Push(int r, const costmodel::CollectiveCost& c, double fraction,
                             Nanoseconds ready) {
  Job j;
  j.ready = ready;
  j.latency = ToNanoseconds(c.latency * fraction);
  j.intra = ToNanoseconds(c.intra * fraction);
  j.nic_bytes = c.nic_bytes * fraction;
  j.nic_Bps = c.nic_Bps;
  st_[r].jobs.push_back(j);
}

void CollectiveStreams::Enqueue(EventQueue& q, Network& net, int r,
                                const std::vector<costmodel::CollectiveCost>& list, double fraction,
                                Nanoseconds ready) {
  for (const costmodel::CollectiveCost& c : list) Push(r, c, fraction, ready);
  Pump(q, net, r);
}

void CollectiveStreams::EnqueueDelay(EventQueue& q, Network& net, int r, Nanoseconds ns,
                                     Nanoseconds ready) {
  Job j;
  j.ready = ready;
  j.intra = ns;
  st_[r].jobs.push_back(j);
  Pump(q, net, r);
}

void CollectiveStreams::EnqueueReduction(EventQueue& q, Network& net, const costmodel::CostTable& c,
                                         int r, double fraction, Nanoseconds ready) {
  if (r < static_cast<int>(c.dp_collectives.size()) && !c.dp_collectives[r].empty()) {
    // The reduction's entries (no list built per bucket): the front one, and with several
    // optimizer instances the all-reduce across them after it.
    const auto& list = c.dp_collectives[r];
    const size_t n = std::min(list.size(), size_t(std::max(1, c.ReductionEntries(r))));
    for (size_t i = 0; i < n; ++i) Push(r, list[i], fraction, ready);
    Pump(q, net, r);
    return;
  }
  const Nanoseconds total = ReduceNs(c, r);
  if (total > 0) EnqueueDelay(q, net, r, ToNanoseconds(double(total) * 1e-9 * fraction), ready);
}

void CollectiveStreams::EnqueueGather(EventQueue& q, Network& net, const costmodel::CostTable& c,
                                      int r, Nanoseconds ready) {
  const size_t reductions = size_t(std::max(1, c.ReductionEntries(r)));
  if (r < static_cast<int>(c.dp_collectives.size()) && c.dp_collectives[r].size() > reductions) {
    const auto& list = c.dp_collectives[r];
    for (size_t i = reductions; i < list.size(); ++i) Push(r, list[i], 1.0, ready);
    Pump(q, net, r);
    return;
  }
  if (r < static_cast<int>(c.dp_collectives.size()) && !c.dp_collectives[r].empty()) return;
  if (GatherNs(c, r) > 0) EnqueueDelay(q, net, r, GatherNs(c, r), ready);
}

void CollectiveStreams::EnqueueChunkReduction(EventQueue& q, Network& net,
                                              const costmodel::CostTable& c, int r, int vp,
                                              Nanoseconds start, Nanoseconds dur) {
  const int k = std::max(1, c.dp_buckets);
  for (int b = 0; b < k; ++b) {
    // dur / k first: dur * (b + 1) could leave int64 for a long backward.
    const Nanoseconds ready = start + dur / k * (b + 1) + dur % k * (b + 1) / k;
    EnqueueReduction(q, net, c, r, 1.0 / (double(vp) * k), ready);
  }
}

void CollectiveStreams::RunAloneExcept(int r, int32_t net_first, int32_t net_last,
                                       Nanoseconds net_from, Veto veto, const void* veto_ctx) {
  Stream& s = st_[r];
  s.alone = true;
  s.net_first = net_first, s.net_last = net_last, s.net_from = net_from;
  s.veto = veto, s.veto_ctx = veto_ctx;
}

bool CollectiveStreams::Rejoin(EventQueue& q, Network& net, int r, Nanoseconds start,
                               Nanoseconds end) {
  Stream& s = st_[r];
  if (!s.alone) return false;
  // The flows are in the stream's order, one after another: their ends are sorted too.
  size_t i = s.flows.size();
  while (i > 0 && s.flows[i - 1].start > end) --i;
  // Of the flows that start by `end`, the ones that end at or after `start` (or run still, end
  // -1: the last one) meet it.
  size_t first = i;
  while (first > 0 && (s.flows[first - 1].end >= start || s.flows[first - 1].end < 0)) --first;
  if (first == i) return false;
  while (first < i && s.flows[first].network) ++first;
  if (first == i) return true;  // it meets flows on the Network only
  const int32_t job = s.flows[first].job;
  const Nanoseconds free_at = job > 0 ? s.jobs[size_t(job - 1)].done : 0;
  if (s.running || std::max(s.jobs[size_t(job)].ready, free_at) < q.now()) return true;
  for (size_t k = first; k < s.flows.size(); ++k) {
    if (s.flows[k].network) return true;  // not reached: alone jobs follow the last network one
  }
  s.flows.resize(first);
  jobs_alone_ -= int64_t(s.next) - job;
  s.next = size_t(job);
  s.free_at = free_at;
  s.net_first = std::min(s.net_first, job), s.net_last = std::max(s.net_last, job);
  Pump(q, net, r);
  return true;
}

bool CollectiveStreams::RunNextAlone(int r) {
  Stream& s = st_[r];
  Job& j = s.jobs[s.next];
  const int32_t index = int32_t(s.next);
  const Nanoseconds start = std::max(j.ready, s.free_at);
  const Nanoseconds flow_start = start + j.latency;
  const bool flows = j.nic_bytes > 0 && j.nic_Bps > 0;
  // Network::StartFlow and Update for a flow alone on its ports: rate = bandwidth.
  const Nanoseconds flow_end =
      flows ? flow_start + Nanoseconds(FlowNanoseconds(j.nic_bytes, j.nic_Bps * 1e-9 / 1)) : 0;
  if (flows && ((index >= s.net_first && index <= s.net_last) || flow_start >= s.net_from ||
                (s.veto && s.veto(s.veto_ctx, r, flow_start, flow_end)))) {
    j.ready = start;  // Pump starts it then, as it would when the job before ends
    return false;
  }
  Nanoseconds end = flow_start + j.intra;
  if (flows) {
    s.flows.push_back({flow_start, flow_end, index, false});
    end = std::max(end, flow_end);
  }
  j.done = end;
  s.free_at = end;
  ++s.next;
  ++jobs_alone_;
  return true;
}

void CollectiveStreams::Pump(EventQueue& q, Network& net, int r) {
  (void)net;
  Stream& s = st_[r];
  if (s.alone) {
    while (!s.running && s.next < s.jobs.size() && RunNextAlone(r)) {
    }
  }
  if (s.running || s.next == s.jobs.size()) return;
  if (s.jobs[s.next].ready > q.now()) {
    // A wake that finds a job running does nothing; one is enough per ready time.
    if (s.wake_at != s.jobs[s.next].ready) {
      s.wake_at = s.jobs[s.next].ready;
      q.Schedule(s.wake_at, Priority::kTransfer, kinds_.wake, r);
    }
    return;
  }
  s.current = s.jobs[s.next++];
  s.running = true;
  q.Schedule(q.now() + s.current.latency, Priority::kTransfer, kinds_.latency, r);
}

void CollectiveStreams::PartDone(EventQueue& q, Network& net, int r) {
  Stream& s = st_[r];
  if (--s.parts_left > 0) return;
  s.running = false;
  s.free_at = q.now();
  s.jobs[s.next - 1].done = q.now();
  Pump(q, net, r);
}

int CollectiveStreams::OnEvent(EventQueue& q, Network& net, const Event& e) {
  const int r = static_cast<int>(e.a);
  Stream& s = st_[r];
  if (e.kind == kinds_.wake) {
    if (s.wake_at == q.now()) s.wake_at = -1;
    Pump(q, net, r);
  } else if (e.kind == kinds_.latency) {
    const bool flows = s.current.nic_bytes > 0 && s.current.nic_Bps > 0;
    s.parts_left = flows ? 2 : 1;
    if (flows) {
      net.StartFlow(q, nic_egress_ + r, nic_ingress_ + r, s.current.nic_Bps, s.current.nic_bytes,
                    FlowTag(r));
      if (s.alone) s.flows.push_back({q.now(), -1, int32_t(s.next) - 1, true});
    }
    q.Schedule(q.now() + s.current.intra, Priority::kTransfer, kinds_.intra, r);
  } else if (e.kind == kinds_.intra) {
    PartDone(q, net, r);
  }
  return r;
}

int CollectiveStreams::OnFlowDone(EventQueue& q, Network& net, int64_t tag) {
  const int r = RankOfTag(tag);
  if (st_[r].alone) st_[r].flows.back().end = q.now();
  PartDone(q, net, r);
  return r;
}

}  // namespace ptdp::sim
