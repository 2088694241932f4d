// The fast exact replay (contract and argument in simulator/pipeline_replay.h).
#include "simulator/pipeline_replay.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "schedule/schedule.h"
#include "simulator/collective_stream.h"
#include "simulator/engine.h"
#include "simulator/network.h"
#include "simulator/pipeline_replay_state.h"
#include "simulator/refine.h"

namespace ptdp::sim {

using namespace replay_internal;

namespace {

// True when no two intervals of a stream touch; a stream is one rank's activation or gradient
// sends, one link's latency after monotone issue times, so sorted by start when disjoint.
bool Disjoint(const std::vector<Interval>& v) {
  for (size_t k = 1; k < v.size(); ++k) {
    if (v[k].start <= v[k - 1].end) return false;
  }
  return true;
}

// True when no interval of `a` touches one of `b` (both Disjoint, hence sorted).
bool Disjoint(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].end < b[j].start) {
      ++i;
    } else if (b[j].end < a[i].start) {
      ++j;
    } else {
      return false;
    }
  }
  return true;
}

// True when rank r's data-parallel collectives send bytes through its NICs.
bool NicFlows(const costmodel::CostTable& t, int r) {
  if (r >= int(t.dp_collectives.size())) return false;
  for (const costmodel::CollectiveCost& c : t.dp_collectives[size_t(r)]) {
    if (c.nic_bytes > 0) return true;
  }
  return false;
}

// True when some rank's data-parallel collectives send bytes through its NICs.
bool ReductionCrossesNics(const costmodel::CostTable& t) {
  for (int r = 0; r < int(t.dp_collectives.size()); ++r) {
    if (NicFlows(t, r)) return true;
  }
  return false;
}

}  // namespace

PipelineReplayer::PipelineReplayer() : scratch_(std::make_unique<Scratch>()) {}
PipelineReplayer::~PipelineReplayer() = default;

int64_t PipelineReplayer::buckets_alone() const {
  return scratch_->round_collectives.jobs_alone();
}

Result<costmodel::PipelineTime> PipelineReplayer::Time(const ModelSpec& m,
                                                       const ClusterSpec& cluster,
                                                       const ParallelConfig& c,
                                                       const costmodel::CostTable& t) {
  ++replays_;
  auto fallback = [&] {
    ++fallbacks_;
    return SimulatedPipelineTime(m, cluster, c, t);
  };
  PTDP_RETURN_IF_ERROR(c.Validate(m));
  const schedule::Lowering lowering = schedule::LoweringOf(m, c);
  if (!shape_ || !shape_->Matches(c, lowering.recompute)) {
    auto compute = schedule::GenerateSchedule(c.schedule, c.pp, c.Microbatches(), c.vp);
    if (!compute.ok() ||
        2 * compute->microbatches * c.pp * c.vp > std::numeric_limits<int32_t>::max() ||
        (c.moe_a2a_overlap && !schedule::PairForA2aOverlap(&*compute).ok())) {
      return fallback();
    }
    auto shape = std::make_unique<Shape>();
    if (shape_) shape->ranks = std::move(shape_->ranks);
    shape->kind = c.schedule;
    shape->pp = c.pp;
    shape->vp = c.vp;
    shape->microbatches = c.Microbatches();
    shape->recompute = lowering.recompute;
    shape->paired = c.moe_a2a_overlap;
    shape->keys = 2 * compute->microbatches * c.pp * c.vp;
    if (!Compile(*compute, lowering.recompute, c.moe_a2a_overlap, &shape->ranks,
                 &shape->instructions)) {
      shape_.reset();  // its lists were refilled: the next layout compiles its shape afresh
      return fallback();
    }
    shape_ = std::move(shape);
    StartFromTailCut();
  }
  costmodel::PipelineTime out;
  if (!Replay(t, lowering.message_bytes, &out)) return fallback();
  return out;
}

// The costs in integer ns, as the Interpreter converts them; false when one is outside its range
// (the Interpreter's error is then Simulate's to give) or a link that carries bytes has none.
bool PipelineReplayer::Convert(const costmodel::CostTable& t, Bytes bytes) {
  const Shape& sh = *shape_;
  Scratch& s = *scratch_;
  const int n = sh.pp * sh.vp;
  if (t.pp != sh.pp || t.vp != sh.vp || int(t.chunks.size()) != n ||
      int(t.p2p_link.size()) < sh.pp) {
    return false;
  }
  const double max_ns = double(int64_t(1) << 62) / double(sh.instructions + 2 * n + 8);
  bool in_range = true;
  auto ns = [&](Seconds x) {
    in_range = in_range && x >= 0 && x * 1e9 <= max_ns;
    return in_range ? ToNanoseconds(x) : 0;
  };
  s.dur.resize(size_t(4 * n)), s.rc.resize(n);
  for (int i = 0; i < n; ++i) {
    const Nanoseconds forward = ns(t.chunks[i].forward.Total());
    const Nanoseconds backward = ns(t.chunks[i].backward.Total());
    const Nanoseconds weight = ns(t.chunks[i].weight_grad.Total());
    s.rc[i] = ns(t.chunks[i].recompute.Total());
    if (weight > backward) return false;
    // Indexed by StepOp: a backward's input half is the backward less its weight half.
    s.dur[size_t(int(StepOp::kForward) * n + i)] = forward;
    s.dur[size_t(int(StepOp::kBackward) * n + i)] = backward;
    s.dur[size_t(int(StepOp::kBackwardInput) * n + i)] = backward - weight;
    s.dur[size_t(int(StepOp::kBackwardWeight) * n + i)] = weight;
  }
  if (sh.paired) PricePairs(t);
  for (const auto* v :
       {&t.dp_allreduce, &t.dp_param_gather, &t.embedding_allreduce, &t.optimizer}) {
    for (Seconds x : *v) ns(x);
  }
  // The collectives the Interpreter checks before it runs (its errors are Simulate's to give).
  if (!t.dp_collectives.empty() && int(t.dp_collectives.size()) != sh.pp) return false;
  for (const auto& rank : t.dp_collectives) {
    for (const costmodel::CollectiveCost& c : rank) {
      if (c.nic_bytes > 0 && !(c.nic_Bps > 0)) return false;
      for (Seconds x : {c.latency, c.intra, c.NicTime()}) ns(x);
    }
  }
  ns(t.p2p_allgather);
  s.latency.resize(t.p2p_link.size());
  s.flow.resize(t.p2p_link.size());
  for (size_t l = 0; l < t.p2p_link.size(); ++l) {
    const double bw = t.p2p_link[l].bandwidth_Bps;
    s.latency[l] = ns(t.p2p_link[l].latency);
    s.flow[l] = -1;
    if (bytes <= 0 || bw == std::numeric_limits<double>::infinity()) continue;
    if (!(bw > 0)) return false;  // only an error if a send crosses it: Simulate decides
    ns(double(bytes) / bw);
    if (!in_range) return false;
    // Network::StartFlow and Update for a flow alone on its ports: rate = bandwidth.
    s.flow[l] = Nanoseconds(FlowNanoseconds(double(bytes), bw * 1e-9 / 1));
  }
  return in_range;
}

// Walk state for a new replay.
void PipelineReplayer::Reset() {
  const Shape& sh = *shape_;
  Scratch& s = *scratch_;
  const int pp = sh.pp;
  s.arrive.assign(size_t(sh.keys), -1);
  s.pc.assign(pp, 0);
  s.now.assign(pp, 0);
  s.compute.assign(pp, 0);
  s.flush.assign(pp, 0);
  s.buckets_from.assign(pp, kNever);
  s.act_flows.resize(pp);
  s.grad_flows.resize(pp);
  s.bucket_flows.resize(pp);
  for (int r = 0; r < pp; ++r) {
    s.act_flows[r].clear(), s.grad_flows[r].clear(), s.bucket_flows[r].clear();
  }
  s.ready.clear();
  for (int r = pp - 1; r >= 0; --r) s.ready.push_back(r);
}

void PipelineReplayer::WalkReady(Nanoseconds gather) {
  Scratch& s = *scratch_;
  while (!s.ready.empty()) {
    const int r = s.ready.back();
    s.ready.pop_back();
    Walk(r, gather);
  }
}

// As SimulatedPipelineTime reads SimResult: the flush, and the busiest rank's idle before it.
// False when a rank is stuck (Simulate names the instruction).
bool PipelineReplayer::Outcome(costmodel::PipelineTime* out) const {
  const Scratch& s = *scratch_;
  Nanoseconds pipeline = 0, busiest = 0;
  for (int r = 0; r < shape_->pp; ++r) {
    if (s.pc[r] != shape_->ranks[r].size()) return false;
    pipeline = std::max(pipeline, s.flush[r]);
    busiest = std::max(busiest, s.compute[r]);
  }
  *out = PipelineTimeOf(pipeline, busiest);
  return true;
}

// Marks the ports outside `suspect` on which two flows touch: egress r carries rank r's
// activations and gradients, ingress r + 1 rank r's activations and rank r + 2's gradients. True
// when it marked one.
bool PipelineReplayer::MarkShared() {
  Scratch& s = *scratch_;
  const int pp = shape_->pp;
  bool marked = false;
  auto mark = [&](int port, bool shared) {
    if (shared && !s.suspect[size_t(port)]) s.suspect[size_t(port)] = 1, marked = true;
  };
  // The ports below are the ones of a pipeline whose activations all go r -> r + 1. In a V
  // (ZB-V) chunk 1's go r -> r - 1 and each port carries other flows: every port is suspect, so
  // all flows go through the network model, as the Interpreter runs them.
  if (VShaped(shape_->kind)) {
    for (int port = 0; port < 2 * pp; ++port) mark(port, true);
    return marked;
  }
  for (int r = 0; r < pp; ++r) {
    const auto& acts = s.act_flows[r];
    const auto& grads = s.grad_flows[r];
    const auto& grads_in = s.grad_flows[(r + 2) % pp];
    const bool acts_apart = Disjoint(acts);
    mark(r, !acts_apart || !Disjoint(grads) || !Disjoint(acts, grads));
    mark(pp + (r + 1) % pp, !acts_apart || !Disjoint(grads_in) || !Disjoint(acts, grads_in));
  }
  return marked;
}

// Walks every rank as far as its receives allow with each flow alone on its ports, then checks
// that it was; when two shared a port, replays again with the network model (ReplayShared).
bool PipelineReplayer::Replay(const costmodel::CostTable& t, Bytes bytes,
                              costmodel::PipelineTime* out) {
  if (!Convert(t, bytes)) return false;
  const Nanoseconds gather = bytes > 0 ? ToNanoseconds(t.p2p_allgather) : 0;
  Scratch& s = *scratch_;
  if (t.overlap_grad_reduce && ReductionCrossesNics(t)) {
    // The reduction's buckets run as flows on the ranks' NICs beside the last backwards: those
    // ranks' ports are suspect from the start, and ReplayShared runs the collective streams.
    s.suspect.assign(size_t(2 * shape_->pp), 0);
    s.from.assign(size_t(2 * shape_->pp), kNever);
    ++shared_;
    return ReplayWithBuckets(t, bytes, gather, out);
  }
  s.from.assign(size_t(2 * shape_->pp), kNever);
  s.cut_act.clear(), s.cut_grad.clear();
  if (shape_->suspect.empty()) {
    Reset();
    WalkReady(gather);
    if (!Outcome(out)) return false;
    s.suspect.assign(size_t(2 * shape_->pp), 0);
    if (!MarkShared()) return true;
  } else {
    s.suspect = shape_->suspect;
  }
  ++shared_;
  return ReplayShared(t, bytes, gather, out);
}

// The walk again, with the flows that touch a suspect port started at their times on the
// simulator's Network (network.h), in an EventQueue that holds only their starts and ends, and the
// others alone on their ports as before. The walk runs every rank until it blocks, so a rank woken
// by an arrival at time A only starts flows at A or later, and the queue's order is the
// Interpreter's (flows that start or end at one instant share ports alike in either order). When a
// flow left alone touched another one after all, its ports become suspect and the replay runs
// again; after kRounds, every port is.
bool PipelineReplayer::ReplayShared(const costmodel::CostTable& t, Bytes bytes, Nanoseconds gather,
                                    costmodel::PipelineTime* out) {
  constexpr int kRounds = 4;
  Scratch& s = *scratch_;
  const size_t keys = size_t(shape_->keys);
  s.sender.resize(keys), s.receiver.resize(keys), s.link.resize(keys), s.slot.resize(keys);
  s.grad.resize(keys);
  for (int round = 1;; ++round) {
    ++rounds_;
    if (!ReplayRound(t, bytes, gather)) return false;
    if (!MarkShared()) {
      if (round <= kRounds) shape_->suspect = s.suspect;  // not every port by force
      return Outcome(out);
    }
    if (round == kRounds) std::fill(s.suspect.begin(), s.suspect.end(), 1);
  }
}

// ReplayShared for a table whose overlapped reduction crosses the NICs: the collective streams run
// on the network model, the pipeline's flows alone until a check shows one touched another flow
// on one of its ports (MarkTouching), from which time on that port's flows join the network model.
// After kRounds every flow does, as in the Interpreter.
bool PipelineReplayer::ReplayWithBuckets(const costmodel::CostTable& t, Bytes bytes,
                                         Nanoseconds gather, costmodel::PipelineTime* out) {
  constexpr int kRounds = 6;
  Scratch& s = *scratch_;
  const size_t keys = size_t(shape_->keys);
  s.sender.resize(keys), s.receiver.resize(keys), s.link.resize(keys), s.slot.resize(keys);
  s.grad.resize(keys);
  s.cut_act = shape_->cut_act, s.cut_grad = shape_->cut_grad;
  const int pp = shape_->pp;
  if (shape_->net_jobs_first.empty()) {  // no layout of this shape yet: every bucket joins
    s.net_jobs_first.assign(size_t(pp), 0);
    s.net_jobs_last.assign(size_t(pp), std::numeric_limits<int32_t>::max());
  } else {
    s.net_jobs_first = shape_->net_jobs_first, s.net_jobs_last = shape_->net_jobs_last;
  }
  s.bucket_from.assign(size_t(pp), kNever);
  s.pipe_shared = shape_->pipe_shared;
  s.pipe_shared.resize(size_t(2 * pp), 0);
  for (int port = 0; port < 2 * pp; ++port) {
    if (s.pipe_shared[size_t(port)]) s.from[size_t(port)] = 0, ++pipe_shared_starts_;
  }
  for (int round = 1;; ++round) {
    ++rounds_;
    if (!ReplayRound(t, bytes, gather)) return false;
    if (!MarkTouching()) break;
    if (round == kRounds) {
      std::fill(s.from.begin(), s.from.end(), Nanoseconds(0));
      std::fill(s.bucket_from.begin(), s.bucket_from.end(), Nanoseconds(0));
    }
  }
  // The buckets that met a pipeline flow, and the slots from which each port's flows ran on the
  // network model, for the shape's next layout.
  shape_->net_jobs_first = s.need_first, shape_->net_jobs_last = s.need_last;
  shape_->pipe_shared = s.pipe_shared;  // the ports this layout started with, and the new ones
  shape_->cut_act.assign(size_t(2 * pp), 0);
  shape_->cut_grad.assign(size_t(2 * pp), 0);
  auto first_joined = [](const std::vector<Interval>& v) {
    int32_t i = 0;
    while (i < int32_t(v.size()) && !v[size_t(i)].network) ++i;
    return i;
  };
  for (int port = 0; port < 2 * pp; ++port) {
    const int r = port % pp;
    const bool egress = port < pp;
    shape_->cut_act[size_t(port)] =
        first_joined(s.act_flows[size_t(egress ? r : (r + pp - 1) % pp)]);
    shape_->cut_grad[size_t(port)] = first_joined(s.grad_flows[size_t(egress ? r : (r + 1) % pp)]);
  }
  s.cut_act.clear(), s.cut_grad.clear();
  KeepTailCut();
  return Outcome(out);
}

// One round of ReplayShared; false when a rank is stuck.
bool PipelineReplayer::ReplayRound(const costmodel::CostTable& t, Bytes bytes, Nanoseconds gather) {
  Scratch& s = *scratch_;
  const int pp = shape_->pp;
  EventQueue& queue = s.round_queue;
  queue.Reset();
  // The Interpreter's ports: NVLink egress r and ingress pp + r, the NICs 2 pp above them.
  Network& network = s.round_network;
  network.Reset(4 * pp);
  CollectiveStreams& collectives = s.round_collectives;
  collectives.Reset(pp, 2 * pp, 3 * pp);
  s.queue = &queue;
  s.network = &network;
  const bool overlapped = t.overlap_grad_reduce && ReductionCrossesNics(t);
  s.collectives = overlapped ? &collectives : nullptr;
  for (int r = 0; overlapped && r < pp; ++r) {
    collectives.RunAloneExcept(r, s.net_jobs_first[size_t(r)], s.net_jobs_last[size_t(r)],
                               s.bucket_from[size_t(r)], &MeetsMessages, this);
  }
  s.table = &t;
  Reset();
  WalkReady(gather);
  while (!queue.Empty()) {
    const Event e = queue.Pop();
    if (e.kind == kCollWake || e.kind == kCollLatency || e.kind == kCollIntra) {
      collectives.OnEvent(queue, network, e);
    } else if (e.kind == kFlowStart) {
      const size_t key = size_t(e.a);
      const costmodel::LinkCost& link = t.p2p_link[size_t(s.link[key])];
      const int base = link.inter_node ? 2 * pp : 0;
      network.StartFlow(queue, base + s.sender[key], base + pp + s.receiver[key],
                        link.bandwidth_Bps, double(bytes), e.a);
    } else if (network.OnFlowEvent(queue, e.a, e.b)) {
      if (network.Tag(int(e.a)) < 0) {  // a bucket's flow: its stream runs the next one
        collectives.OnFlowDone(queue, network, network.Tag(int(e.a)));
        continue;
      }
      const size_t key = size_t(network.Tag(int(e.a)));
      (s.grad[key] ? s.grad_flows : s.act_flows)[size_t(s.sender[key])][size_t(s.slot[key])].end =
          queue.now();
      Deliver(int64_t(key), queue.now() + gather);
      WalkReady(gather);
    }
  }
  events_ += queue.processed();
  for (int r = 0; overlapped && r < pp; ++r) {
    std::vector<Interval>& buckets = s.bucket_flows[size_t(r)];
    for (const CollectiveStreams::FlowSpan& f : collectives.Flows(r)) {
      buckets.push_back({f.start, f.end, f.network, f.job});
    }
  }
  s.queue = nullptr;
  s.network = nullptr;
  s.collectives = nullptr;
  s.table = nullptr;
  for (int r = 0; r < pp; ++r) {
    if (s.pc[r] != shape_->ranks[r].size()) return false;
  }
  return true;
}

[[gnu::always_inline]] inline void PipelineReplayer::Deliver(int64_t key, Nanoseconds arrival) {
  Scratch& s = *scratch_;
  const Nanoseconds waiting = s.arrive[size_t(key)];
  s.arrive[size_t(key)] = arrival;
  if (waiting <= -2) {
    const int r = int(-2 - waiting);
    s.ready.push_back(r);
    // The rank resumes at this receive soon; its step was last read long ago (64 ranks take turns).
    __builtin_prefetch(&shape_->ranks[size_t(r)][s.pc[size_t(r)]]);
  }
}

// True when a send from rank r to `peer`, the `slot`th of its stream, comes at or after the cut
// of one of its ports (ReplayWithBuckets' start, from the shape's last such layout).
bool PipelineReplayer::FromSlot(bool grad, int r, int peer, int32_t slot) const {
  const Scratch& s = *scratch_;
  if (s.cut_act.empty()) return false;
  const auto& cut = grad ? s.cut_grad : s.cut_act;
  return slot >= cut[size_t(r)] || slot >= cut[size_t(shape_->pp + peer)];
}

// The combined 1F1B's steps, priced once per layout (their times depend on the costs only): each
// pair's saving (CostTable::PairSaving, ToNanoseconds as the Interpreter converts it) split as the
// Interpreter splits it, the forward's share in proportion to its time, the rest off the backward
// after it (Compile checked it is the next step), which also carries its recomputation.
void PipelineReplayer::PricePairs(const costmodel::CostTable& t) {
  const Shape& sh = *shape_;
  Scratch& s = *scratch_;
  const int n = sh.pp * sh.vp;
  s.pair_dur.resize(sh.ranks.size());
  for (size_t r = 0; r < sh.ranks.size(); ++r) {
    const std::vector<Step>& steps = sh.ranks[r];
    s.pair_dur[r].resize(steps.size());
    for (size_t i = 0; i + 1 < steps.size(); ++i) {
      if (!steps[i].paired) continue;
      const Step &f = steps[i], &b = steps[i + 1];
      const Nanoseconds dur = s.dur[size_t(int(StepOp::kForward) * n + f.cc)];
      const Nanoseconds back =
          s.dur[size_t(int(StepOp::kBackward) * n + b.cc)] + (b.recompute ? s.rc[b.cc] : 0);
      const Nanoseconds saving =
          ToNanoseconds(t.PairSaving(t.chunks[size_t(f.cc)], t.chunks[size_t(b.cc)]));
      const double backward = double(back);
      const Nanoseconds mine =
          dur + backward > 0 ? Nanoseconds(double(saving) * dur / (dur + backward)) : 0;
      s.pair_dur[r][i] = dur - mine;
      s.pair_dur[r][i + 1] = back - (saving - mine);
    }
  }
}

// Rank r's instructions from where it stopped, until a receive whose message is not sent yet.
void PipelineReplayer::Walk(int r, Nanoseconds gather) {
  Scratch& s = *scratch_;
  const int pp = shape_->pp;
  const std::vector<Step>& steps = shape_->ranks[r];
  const int n = pp * shape_->vp;
  size_t pc = s.pc[r];
  Nanoseconds now = s.now[r], compute = s.compute[r], flush = s.flush[r];
  for (; pc < steps.size(); ++pc) {
    const Step& st = steps[pc];
    // Messages first, then compute: a branch each, not a jump table (the walk runs every step).
    if (st.op == StepOp::kRecv) {
      const Nanoseconds arrival = s.arrive[st.key];
      if (arrival < 0) {
        s.arrive[st.key] = -2 - r;
        s.pc[r] = pc, s.now[r] = now, s.compute[r] = compute, s.flush[r] = flush;
        return;
      }
      now = std::max(now, arrival);
      continue;
    }
    if (st.op == StepOp::kSend) {
      const Nanoseconds start = now + s.latency[st.cc];
      const Nanoseconds flow = s.flow[st.cc];
      auto& stream = (st.grad ? s.grad_flows : s.act_flows)[r];
      if (flow < 0) {  // a free link: no flow, the Interpreter's arrival
        Deliver(st.key, start + gather);
      } else if (s.queue &&
                 ((s.collectives &&
                   (s.collectives->MayMeet(r, start) || s.collectives->MayMeet(st.peer, start)) &&
                   MeetsBuckets(r, st.peer, start, start + flow)) ||
                  s.suspect[size_t(r)] || s.suspect[size_t(pp + st.peer)] ||
                  start >= s.from[size_t(r)] || start >= s.from[size_t(pp + st.peer)] ||
                  FromSlot(st.grad, r, st.peer, int32_t(stream.size())) ||
                  MeetsQueuedBuckets(r, st.peer, start + flow))) {
        s.sender[st.key] = r, s.receiver[st.key] = st.peer, s.link[st.key] = st.cc;
        s.grad[st.key] = st.grad, s.slot[st.key] = int32_t(stream.size());
        stream.push_back({start, start, true});  // its end when the network says
        s.queue->Schedule(start, Priority::kTransfer, kFlowStart, st.key);
      } else {
        stream.push_back({start, start + flow});
        Deliver(st.key, start + flow + gather);
      }
      continue;
    }
    Nanoseconds dur = s.dur[size_t(int(st.op) * n + st.cc)];
    if (st.adjust) {  // recomputation, or a pair's share (PricePairs; one test where neither is)
      dur = (st.paired || st.pair_backward) ? s.pair_dur[size_t(r)][pc] : dur + s.rc[st.cc];
    }
    if (st.reduces && s.collectives) {
      s.buckets_from[size_t(r)] = std::min(s.buckets_from[size_t(r)], now);
      s.collectives->EnqueueChunkReduction(*s.queue, *s.network, *s.table, r, shape_->vp, now, dur);
    }
    now += dur;
    compute += dur;
    if (st.op != StepOp::kForward) flush = std::max(flush, now);
  }
  // Reduce-grads, where the list ends: the weights' all-gather, unless it is overlapped with the
  // next iteration, queues behind the buckets and may still share the NIC with the rank's last
  // sends.
  if (s.collectives && !s.table->overlap_param_gather) {
    s.buckets_from[size_t(r)] = std::min(s.buckets_from[size_t(r)], now);
    s.collectives->EnqueueGather(*s.queue, *s.network, *s.table, r, now);
  }
  s.pc[r] = pc, s.now[r] = now, s.compute[r] = compute, s.flush[r] = flush;
}

std::function<Result<costmodel::PipelineTime>(const ModelSpec&, const ClusterSpec&,
                                              const ParallelConfig&, const costmodel::CostTable&)>
MakeReplayRefiner() {
  auto replayer = std::make_shared<PipelineReplayer>();
  return [replayer](const ModelSpec& m, const ClusterSpec& cluster, const ParallelConfig& c,
                    const costmodel::CostTable& t) { return replayer->Time(m, cluster, c, t); };
}

}  // namespace ptdp::sim
