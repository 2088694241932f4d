#include "costmodel/collectives.h"

#include <algorithm>
#include <set>

#include "core/rank_grid.h"

namespace ptdp::costmodel {

double BusBandwidthFactor(Collective c, int n) {
  if (n <= 1) return 0.0;
  switch (c) {
    case Collective::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return double(n - 1) / n;
    case Collective::kSendRecv:
      return 1.0;
  }
  return 0.0;
}

GroupSpan SpanOf(const std::vector<int>& group, int gpus_per_node) {
  GroupSpan s;
  s.ranks = int(group.size());
  s.nodes = RankGrid::NodesSpanned(group, gpus_per_node);
  s.members_per_node = std::max(1, s.ranks / std::max(1, s.nodes));
  return s;
}

namespace {

const Sourced& BusBw(const LinkProfile& l, Collective c) {
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

}  // namespace

LinkCost CollectiveLink(const HardwareProfile& hw, Collective c, const GroupSpan& span,
                        int gpus_per_node) {
  LinkCost l;
  const double intra = GBpsToBytesPerSecond(BusBw(hw.intra_node, c).value);
  if (!span.inter_node()) {
    l.bandwidth_Bps = intra;
    l.latency = hw.intra_node.latency_us.value * kUs;
    return l;
  }
  double inter = GBpsToBytesPerSecond(BusBw(hw.inter_node, c).value);
  // Point-to-point figures are per GPU already; collective figures are per node and shared.
  if (c != Collective::kSendRecv) inter *= double(span.members_per_node) / double(gpus_per_node);
  l.bandwidth_Bps = std::min(inter, intra);
  l.latency = hw.inter_node.latency_us.value * kUs;
  l.inter_node = true;
  return l;
}

Seconds CollectiveTime(const HardwareProfile& hw, Collective c, Bytes bytes, const GroupSpan& span,
                       int gpus_per_node) {
  if (span.ranks <= 1 || bytes <= 0) return 0.0;
  const LinkCost l = CollectiveLink(hw, c, span, gpus_per_node);
  return l.latency + double(bytes) * BusBandwidthFactor(c, span.ranks) / l.bandwidth_Bps;
}

}  // namespace ptdp::costmodel
