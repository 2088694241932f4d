#include "costmodel/collectives.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/rank_grid.h"

namespace ptdp::costmodel {

GroupSpan SpanOf(const std::vector<int>& group, int gpus_per_node) {
  GroupSpan s;
  s.ranks = int(group.size());
  s.nodes = RankGrid::NodesSpanned(group, gpus_per_node);
  s.members_per_node = std::max(1, s.ranks / std::max(1, s.nodes));
  return s;
}

namespace {

const Sourced& ConstantBusBw(const LinkProfile& l, Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return l.all_reduce_busbw_GBps;
    case Collective::kAllGather:
      return l.all_gather_busbw_GBps;
    case Collective::kReduceScatter:
      return l.reduce_scatter_busbw_GBps;
    case Collective::kSendRecv:
      return l.send_recv_GBps;
  }
  return l.send_recv_GBps;
}

// The curve for c measured with the group size nearest `ranks` (log scale); one without a size
// only when none has one. Null when the link has no curve for c.
const BusbwCurve* CurveFor(const LinkProfile& l, Collective c, int ranks) {
  const BusbwCurve* best = nullptr;
  double best_distance = std::numeric_limits<double>::infinity();
  for (const BusbwCurve& curve : l.busbw_curves) {
    if (curve.collective != CollectiveName(c)) continue;
    const double distance =
        curve.ranks > 0 ? std::abs(std::log(double(curve.ranks)) - std::log(std::max(1, ranks)))
                        : std::numeric_limits<double>::max();
    if (best == nullptr || distance < best_distance) {
      best = &curve;
      best_distance = distance;
    }
  }
  return best;
}

// GB/s of a curve at `bytes`, linear in log(bytes) between points.
double CurveGBps(const BusbwCurve& curve, double bytes) {
  const std::vector<double>& x = curve.bytes;
  const std::vector<double>& y = curve.busbw_GBps;
  // Below the first size the first point's time holds, so busbw falls with the size.
  if (bytes <= x.front()) return y.front() * bytes / x.front();
  if (bytes >= x.back()) return y.back();
  const size_t i = size_t(std::upper_bound(x.begin(), x.end(), bytes) - x.begin()) - 1;
  const double f = (std::log(bytes) - std::log(x[i])) / (std::log(x[i + 1]) - std::log(x[i]));
  return y[i] + f * (y[i + 1] - y[i]);
}

// One phase of a collective on one link class: its latency and its transfer time, the busbw
// scaled by `share` (1/G: one member's NIC of a per-node figure).
struct Phase {
  Seconds latency = 0;
  Seconds transfer = 0;
};
Phase PhaseOn(const LinkProfile& l, Collective c, double bytes, int ranks) {
  Phase p;
  if (ranks <= 1 || bytes <= 0) return p;
  bool curve = false;
  const double bw = BusBandwidth(l, c, bytes, ranks, &curve);
  p.latency = curve ? 0.0 : l.latency_us.value * kUs;
  p.transfer = bytes * BusBandwidthFactor(c, ranks) / bw;
  return p;
}

}  // namespace

double BusBandwidth(const LinkProfile& link, Collective c, double bytes, int ranks,
                    bool* has_curve) {
  const BusbwCurve* curve = CurveFor(link, c, ranks);
  if (has_curve != nullptr) *has_curve = curve != nullptr;
  const double GBps = curve != nullptr ? CurveGBps(*curve, bytes) : ConstantBusBw(link, c).value;
  return GBpsToBytesPerSecond(GBps);
}

LinkCost SendRecvLink(const HardwareProfile& hw, bool inter_node, Bytes bytes) {
  const double size = std::max<double>(1.0, double(bytes));
  bool intra_curve = false, inter_curve = false;
  const double intra = BusBandwidth(hw.intra_node, Collective::kSendRecv, size, 2, &intra_curve);
  LinkCost l;
  if (!inter_node) {
    l.bandwidth_Bps = intra;
    l.latency = intra_curve ? 0.0 : hw.intra_node.latency_us.value * kUs;
    return l;
  }
  // Point-to-point figures are per GPU (one NIC), never faster than the GPU's own NVLink.
  l.bandwidth_Bps =
      std::min(intra, BusBandwidth(hw.inter_node, Collective::kSendRecv, size, 2, &inter_curve));
  l.latency = inter_curve ? 0.0 : hw.inter_node.latency_us.value * kUs;
  l.inter_node = true;
  return l;
}

namespace {

// A flat ring over all n ranks (NCCL's ring, the paper's 2021 software for large messages): every
// rank sends factor(n) S over the ring, through NVLink inside a node and, where the ring leaves the
// node, through one NIC per channel: with g members per node, g channels cross on g NICs, each
// carrying factor(n) S / g. The two run at once; the slower bounds the ring.
CollectiveCost RingPlan(const HardwareProfile& hw, Collective c, double size, const GroupSpan& span,
                        int G) {
  CollectiveCost cc;
  const int g = span.members_per_node, n = span.ranks;
  const Phase nvlink = PhaseOn(hw.intra_node, c, size, n);
  cc.intra = nvlink.transfer;
  bool curve = false;
  // The per-node figure is for a group with all G GPUs of each node: a message G/g times larger.
  const double node_Bps = BusBandwidth(hw.inter_node, c, size * G / g, n * G / g, &curve);
  cc.nic_bytes = size * BusBandwidthFactor(c, n) / g;
  cc.nic_Bps = node_Bps / G;
  cc.latency = curve ? 0.0 : hw.inter_node.latency_us.value * kUs;
  return cc;
}

// Hierarchical (NCCL's tree-style algorithms for multi-node groups): an intra-node
// reduce-scatter over the node's g members, each member's S/g shard reduced (all-reduce,
// reduce-scatter) or gathered (all-gather) among the N nodes through the member's own NIC, and an
// intra-node all-gather; the phases pipelined chunk by chunk.
CollectiveCost HierarchicalPlan(const HardwareProfile& hw, Collective c, double size,
                                const GroupSpan& span, int G) {
  CollectiveCost cc;
  const int g = span.members_per_node, nodes = span.nodes;
  for (Collective k : {Collective::kReduceScatter, Collective::kAllGather}) {
    if (c != Collective::kAllReduce && c != k) continue;
    const Phase p = PhaseOn(hw.intra_node, k, size, g);
    cc.latency += p.latency;
    cc.intra += p.transfer;
  }
  const double shard = size / g;
  bool curve = false;
  const double node_Bps = BusBandwidth(hw.inter_node, c, shard * G, nodes * G, &curve);
  cc.nic_bytes = shard * BusBandwidthFactor(c, nodes);
  cc.nic_Bps = node_Bps / G;
  if (!curve) cc.latency += hw.inter_node.latency_us.value * kUs;
  return cc;
}

}  // namespace

CollectiveCost PlanCollective(const HardwareProfile& hw, Collective c, Bytes bytes,
                              const GroupSpan& span, int gpus_per_node) {
  CollectiveCost cc;
  if (span.ranks <= 1 || bytes <= 0) return cc;
  const double size = double(bytes);
  if (!span.inter_node()) {
    const Phase p = PhaseOn(hw.intra_node, c, size, span.ranks);
    cc.latency = p.latency;
    cc.intra = p.transfer;
    return cc;
  }
  if (c == Collective::kSendRecv) {
    const LinkCost l = SendRecvLink(hw, true, bytes);
    cc.latency = l.latency;
    cc.nic_bytes = size;
    cc.nic_Bps = l.bandwidth_Bps;
    return cc;
  }
  const int G = std::max(gpus_per_node, span.members_per_node);
  return hw.inter_node.algorithm == kHierarchical ? HierarchicalPlan(hw, c, size, span, G)
                                                  : RingPlan(hw, c, size, span, G);
}

Seconds CollectiveTime(const HardwareProfile& hw, Collective c, Bytes bytes, const GroupSpan& span,
                       int gpus_per_node) {
  return PlanCollective(hw, c, bytes, span, gpus_per_node).Time();
}

}  // namespace ptdp::costmodel
