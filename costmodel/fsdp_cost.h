// The time of fully sharded data parallelism (ParallelConfig::fsdp; core/fsdp.h has what it
// holds): per microbatch, each chunk all-gathers its units' weights before its forward and again
// before its backward, and reduce-scatters their gradients after its backward. Each unit's
// collective runs beside the previous unit's compute (FSDP's prefetch), so of a chunk's
// collectives the first unit's is exposed and the rest only where they outlast the compute
// (BucketedExposedTime, the units as the buckets); the hidden part slows the compute beside it by
// the software profile's overlap_compute_slowdown, as every overlap does. What is left goes into
// the chunk's forward and backward as their dp_comm, so the closed form and the simulator, which
// both replay the chunk times, pay it alike. The collectives are not NIC flows of the simulator:
// they do not share a node's NICs with the pipeline's sends.
#pragma once

#include <cstdint>
#include <vector>

#include "core/cluster.h"
#include "core/model.h"
#include "core/parallel.h"
#include "costmodel/collectives.h"
#include "costmodel/cost_table.h"

namespace ptdp::costmodel {

// The groups of a sharded data-parallel reduction (ParallelConfig::optimizer_instances): the shard
// group, the first OptimizerShardRanks() members of the data group (consecutive data ranks, as
// Megatron-Core's intra-instance group), and the replica group, one member of each instance.
struct ShardedGroups {
  GroupSpan shard;
  GroupSpan replica;  // one rank when there is one instance
};
ShardedGroups ShardedGroupSpans(const std::vector<int>& data_group, const ParallelConfig& c,
                                int gpus_per_node);

// The distributed optimizer's collectives after the flush for `dense` elements, in order: the
// gradients reduce-scattered within the shard group, each shard all-reduced across the instances
// (when there are several), the updated weights all-gathered within the shard group. With fsdp
// only the all-reduce across instances is left (the rest ran per microbatch). Appends to `dp`.
struct ShardedFlush {
  Seconds gather = 0;  // the all-gather's time
  int reductions = 0;  // entries appended before it (CostTable::dp_reduction_entries)
};
ShardedFlush AddShardedFlushCollectives(const HardwareProfile& hw, const ParallelConfig& c,
                                        int64_t dense, const ShardedGroups& groups,
                                        int gpus_per_node, std::vector<CollectiveCost>* dp);

// The per-microbatch collectives of one chunk: all-gathers of `elements` weights and a reduce-
// scatter of their gradients over the data group, in `units` FSDP units.
struct FsdpChunkComm {
  int64_t elements = 0;
  int units = 0;
  Seconds gather = 0;          // one all-gather of the chunk's weights
  Seconds reduce_scatter = 0;  // one reduce-scatter of its gradients
};
FsdpChunkComm PlanFsdpChunkComm(const HardwareProfile& hw, const ParallelConfig& c,
                                int64_t elements, int units, const GroupSpan& dp_span,
                                int gpus_per_node);

// Adds each chunk's exposed FSDP time to t->chunks' forward and backward dp_comm (nothing when
// c.fsdp is off). `param_elements`: StageParameterCounts, per pipeline rank; `shard_span` the
// group the weights are sharded over (ShardedGroups::shard).
void AddFsdpCollectives(const ModelSpec& m, const ClusterSpec& cluster, const ParallelConfig& c,
                        const std::vector<int64_t>& param_elements, const GroupSpan& shard_span,
                        CostTable* t);

}  // namespace ptdp::costmodel
