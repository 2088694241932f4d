// Collective and point-to-point times on the link a group crosses: alpha-beta with nccl-tests'
// bus-bandwidth convention (nccl-tests doc/PERFORMANCE.md): for n ranks and S bytes,
//   all-reduce      busbw = algbw * 2(n-1)/n
//   all-gather      busbw = algbw * (n-1)/n      (S = the gathered, full size)
//   reduce-scatter  busbw = algbw * (n-1)/n      (S = the full input size)
//   send/recv       busbw = algbw
// so time = latency + S * factor / busbw with the profile's achievable busbw and the latency of
// one small collective on the link (nccl-tests' small-message time).
//
// Which link: a group inside one node uses the intra-node link (per-GPU figures). A group that
// spans nodes is limited by the inter-node network, whose profile figures are per node for a group
// holding every GPU of the node; a group with g of the node's G GPUs runs beside G/g sibling groups
// (Megatron's groups of one kind run at the same time: all tensor ranks reduce their data-parallel
// gradients together) and gets g/G of the node's bandwidth, never more than the intra-node figure.
#pragma once

#include <vector>

#include "core/hardware.h"
#include "core/units.h"
#include "costmodel/cost_table.h"

namespace ptdp::costmodel {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kSendRecv };

// nccl-tests' factor busbw / algbw for n ranks (1 for send/recv; 0 for a group of one).
double BusBandwidthFactor(Collective c, int n);

// Where a group's traffic goes.
struct GroupSpan {
  int ranks = 1;             // group size n
  int nodes = 1;             // distinct nodes spanned
  int members_per_node = 1;  // ranks of the group on each node (groups are regular)
  bool inter_node() const { return nodes > 1; }
};
// From global ranks, with `gpus_per_node` consecutive ranks per node (core/rank_grid.h).
GroupSpan SpanOf(const std::vector<int>& group, int gpus_per_node);

// Achievable bus bandwidth (bytes/s) and latency that one group sees for a collective.
LinkCost CollectiveLink(const HardwareProfile& hw, Collective c, const GroupSpan& span,
                        int gpus_per_node);
// Seconds of one collective of `bytes` over the group (0 for a group of one or no bytes).
Seconds CollectiveTime(const HardwareProfile& hw, Collective c, Bytes bytes, const GroupSpan& span,
                       int gpus_per_node);

}  // namespace ptdp::costmodel
