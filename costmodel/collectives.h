// Collective and point-to-point times on the links a group crosses, with nccl-tests' bus-bandwidth
// convention (nccl-tests doc/PERFORMANCE.md): for n ranks and S bytes,
//   all-reduce      busbw = algbw * 2(n-1)/n
//   all-gather      busbw = algbw * (n-1)/n      (S = the gathered, full size)
//   reduce-scatter  busbw = algbw * (n-1)/n      (S = the full input size)
//   send/recv       busbw = algbw
// so a phase takes latency + S * factor / busbw, with the profile's achievable busbw: its curve for
// the collective when it has one (busbw against S, interpolated in log S; the latency is then in
// the curve), else its constant and the link's latency.
//
// Which links (docs/cost_model.md "Collectives"). A group inside one node runs on the intra-node
// link (per-GPU figures). A group with g members on each of N > 1 nodes runs as the profile's
// inter_node `algorithm` says:
//  - ring (the default; NCCL's choice for large messages in the paper's 2021 software): one ring
//    over all n ranks, NVLink hops inside a node and, where the ring leaves a node, one NIC per
//    channel: g channels cross on the g members' NICs, each carrying factor(n) S / g;
//  - hierarchical (NCCL's tree-style algorithms of later versions): an intra-node reduce-scatter
//    over the node's g members, an inter-node collective of each S/g shard among the N members that
//    hold it, an intra-node all-gather (all-reduce: the three; reduce-scatter: the first two;
//    all-gather: the last two).
// Either way the NVLink and NIC parts are pipelined chunk by chunk, so a collective takes its
// latencies plus its slower part. Each member's traffic crosses its own NIC (one NIC per GPU, as
// on DGX nodes) at 1/G of the node's inter-node figure (which is per node, for a group holding all
// G GPUs of each node): the G/g sibling groups of a node that run at once (the data-parallel
// reductions of all t x p ranks of a node) share the node's NICs without being told about each
// other, and a pipeline send of the same GPU crosses the same NIC (the simulator shares it,
// simulator/collective_stream.h).
#pragma once

#include <vector>

#include "core/collective.h"
#include "core/hardware.h"
#include "core/units.h"
#include "costmodel/cost_table.h"

namespace ptdp::costmodel {

using ::ptdp::BusBandwidthFactor;  // core/collective.h: the one definition
using ::ptdp::Collective;          // core/collective.h, with its profile name CollectiveName

// Where a group's traffic goes.
struct GroupSpan {
  int ranks = 1;             // group size n
  int nodes = 1;             // distinct nodes spanned
  int members_per_node = 1;  // ranks of the group on each node (groups are regular)
  bool inter_node() const { return nodes > 1; }
};
// From global ranks, with `gpus_per_node` consecutive ranks per node (core/rank_grid.h).
GroupSpan SpanOf(const std::vector<int>& group, int gpus_per_node);

// Achievable busbw (bytes/s) of `link` for collective c of `bytes` over `ranks`: the profile's
// curve for c (the one measured with the group size nearest `ranks` in log scale, a curve without
// a size after those with one) interpolated linearly in log(bytes), its end points holding beyond
// it (below the first size the first point's time holds: a smaller message is not faster); else
// the constant. `has_curve` (optional) says which.
double BusBandwidth(const LinkProfile& link, Collective c, double bytes, int ranks,
                    bool* has_curve = nullptr);

// Point-to-point link between two GPUs (the pipeline's), per GPU: intra-node or one NIC.
// `bytes`: the message size a curve is read at.
LinkCost SendRecvLink(const HardwareProfile& hw, bool inter_node, Bytes bytes);

// How one collective of `bytes` over the group runs (above); a zero cost for a group of one or no
// bytes.
CollectiveCost PlanCollective(const HardwareProfile& hw, Collective c, Bytes bytes,
                              const GroupSpan& span, int gpus_per_node);
// Seconds of one collective of `bytes` over the group: PlanCollective(...).Time().
Seconds CollectiveTime(const HardwareProfile& hw, Collective c, Bytes bytes, const GroupSpan& span,
                       int gpus_per_node);

}  // namespace ptdp::costmodel
