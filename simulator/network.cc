#include "simulator/network.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/checked.h"

namespace ptdp::sim {

Network::Network(int num_ports, uint32_t done_kind) : ports_(num_ports), done_kind_(done_kind) {}

void Network::Reset(int num_ports) {
  flows_.clear();
  free_.clear();
  ports_.resize(size_t(num_ports));
  for (std::vector<int>& port : ports_) port.clear();
}

void Network::Update(EventQueue& q, int id) {
  Flow& f = flows_[id];
  const Nanoseconds now = q.now();
  const int share = std::max(ActiveFlows(f.egress), ActiveFlows(f.ingress));
  const double rate = f.bandwidth_Bpns / std::max(1, share);
  // A flow whose rate stays (the other port decides its share) keeps its end event: a new one at
  // the same rate would only add a stale event, and re-round the end from the bytes left. A new
  // flow has rate 0 and is always scheduled.
  if (rate == f.rate) return;
  f.remaining = std::max(0.0, f.remaining - f.rate * static_cast<double>(now - f.last_ns));
  f.last_ns = now;
  f.rate = rate;
  ++f.version;
  // The end enters the integer clock through core/checked.h's conversion, like every simulator
  // time: the simulator bounds each message's time on its link alone before it runs (a shared port
  // slows a flow by at most the flow count, which keeps the end far inside int64), so a failure
  // here is a caller that skipped those bounds (an internal error naming the flow), never an
  // undefined cast of an infinite or huge double.
  const double ns = FlowNanoseconds(f.remaining, f.rate);
  Nanoseconds dur = 0, end = 0;
  PTDP_CHECK_MSG(DoubleToInt64(ns, &dur) && CheckedAdd(now, dur, &end),
                 "network: flow " + std::to_string(id) + " of " + FormatDouble(f.remaining) +
                     " bytes at " + FormatDouble(f.rate) + " bytes/ns ends " + FormatDouble(ns) +
                     " ns after " + std::to_string(now) + ", beyond the simulator's clock");
  q.Schedule(end, Priority::kTransfer, done_kind_, id, static_cast<int32_t>(f.version));
}

void Network::Rerate(EventQueue& q, int port) {
  for (int id : ports_[port]) Update(q, id);
}

int Network::StartFlow(EventQueue& q, int egress, int ingress, double bandwidth_Bps, double bytes,
                       int64_t tag) {
  PTDP_CHECK(bytes > 0 && bandwidth_Bps > 0);
  int id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<int>(flows_.size());
    flows_.emplace_back();
  }
  Flow& f = flows_[id];
  f.egress = egress;
  f.ingress = ingress;
  f.bandwidth_Bpns = bandwidth_Bps * 1e-9;
  f.remaining = bytes;
  f.rate = 0;
  f.last_ns = q.now();
  f.start_ns = q.now();
  f.tag = tag;
  f.active = true;
  ports_[egress].push_back(id);
  if (ingress != egress) ports_[ingress].push_back(id);
  Rerate(q, egress);
  if (ingress != egress) Rerate(q, ingress);
  return id;
}

bool Network::OnFlowEvent(EventQueue& q, int64_t flow, int32_t version) {
  Flow& f = flows_[flow];
  if (!f.active || static_cast<int32_t>(f.version) != version) return false;
  f.active = false;
  auto drop = [&](int port) {
    auto& v = ports_[port];
    v.erase(std::find(v.begin(), v.end(), static_cast<int>(flow)));
  };
  drop(f.egress);
  if (f.ingress != f.egress) drop(f.ingress);
  free_.push_back(static_cast<int>(flow));
  Rerate(q, f.egress);
  if (f.ingress != f.egress) Rerate(q, f.ingress);
  return true;
}

Nanoseconds SimulateRingAllReduce(int n, double bytes, double bandwidth_Bps,
                                  Nanoseconds latency_ns) {
  PTDP_CHECK(n >= 1);
  if (n == 1 || bytes <= 0) return 0;
  enum : uint32_t { kFlowDone = 0, kLatencyDone = 1 };
  EventQueue q;
  // Ports 0..n-1: egress of rank i; n..2n-1: ingress of rank i.
  Network net(2 * n, kFlowDone);
  const int steps = 2 * (n - 1);
  const double chunk = bytes / n;
  std::vector<int> step(n, 0);  // steps rank i has sent
  // a = sender, b = step.
  for (int i = 0; i < n; ++i) q.Schedule(latency_ns, Priority::kTransfer, kLatencyDone, i, 0);
  Nanoseconds end = 0;
  while (!q.Empty()) {
    Event e = q.Pop();
    if (e.kind == kLatencyDone) {
      const int i = static_cast<int>(e.a);
      net.StartFlow(q, i, n + (i + 1) % n, bandwidth_Bps, chunk, i);
    } else if (net.OnFlowEvent(q, e.a, e.b)) {
      // Rank i's chunk reached i + 1, which may now send its next step.
      const int to = (static_cast<int>(net.Tag(static_cast<int>(e.a))) + 1) % n;
      end = q.now();
      if (++step[to] < steps)
        q.Schedule(q.now() + latency_ns, Priority::kTransfer, kLatencyDone, to, step[to]);
    }
  }
  return end;
}

}  // namespace ptdp::sim
