// Fully sharded data parallelism (ZeRO stage 3; ParallelConfig::fsdp): the rules and the one
// statement of what it holds in memory, which the ledger and the cost model ask.
//
// What is modelled is Megatron-Core's Megatron-FSDP with --data-parallel-sharding-strategy
// optim_grads_params (megatron/core/distributed/fsdp/) and PyTorch's FSDP2 as torchtitan wraps a
// model (one unit per transformer layer, one for the embedding, one for the output layer): the
// weights, the gradients and the optimizer state of a stage are sharded over its WeightReplicas
// (d cp ranks); before a unit's forward its weights are all-gathered, and freed after it; before
// its backward they are all-gathered again; after its backward its gradients are reduce-scattered
// into the shard. Both prefetch the next unit's all-gather while one computes, so one unit is in
// use and one arrives: two units' weights and one unit's gradients are whole at a time.
#pragma once

#include <cstdint>

#include "core/model.h"
#include "core/parallel.h"
#include "core/status.h"

namespace ptdp {

// Validate's rules for fsdp (Ok when it is off): the distributed optimizer on (Megatron-FSDP v1
// runs on it: its shard is the optimizer's), the weights shared by more than one rank (d cp > 1),
// a dense model (no expert parallelism: how Megatron-FSDP shards experts is not modelled), and a
// schedule that does not split the backward (a deferred weight gradient would move the
// reduce-scatter, which is not priced).
Status ValidateFsdp(const ParallelConfig& c, const ModelSpec& m);
// Validate's rules for optimizer_instances (Ok when 1): the distributed optimizer on, a dense
// model, and the instances dividing the d cp ranks that hold a weight.
Status ValidateOptimizerInstances(const ParallelConfig& c, const ModelSpec& m);

// The optimizer instances (ParallelConfig::optimizer_instances) whose shard group is the data ranks
// of one node: with ranks in tp-cp-dp order, G / t consecutive ones of the `weight_replicas` (d cp)
// share a node of G GPUs, so weight_replicas / (G / t) instances; 0 when that is not a proper split
// (t does not divide G, one rank a node, or the node holds them all). What the search tries as
// hybrid sharding (HSDP) beside full sharding.
int NodeShardInstances(int tp, int weight_replicas, int gpus_per_node);

// The parameter elements pipeline rank `pp_rank` holds beyond its transformer layers, on one
// tensor rank (the embedding, the output layer, the final norm), given its `stage_elements`
// (StageParameterElements, which callers may cache): what its end units hold.
int64_t FsdpEndElements(const ModelSpec& m, const ParallelConfig& c, int pp_rank,
                        int64_t stage_elements);
// The parameter elements of the largest FSDP unit pipeline rank `pp_rank` holds, on one tensor
// rank: a transformer layer, the embedding or the output layer (where the rank holds them).
int64_t FsdpLargestUnitElements(const ModelSpec& m, const ParallelConfig& c, int pp_rank);

// Units whose weights are whole at once (the one in use and the one prefetched) and units whose
// gradients are whole at once (the one before its reduce-scatter).
inline constexpr int kFsdpWholeWeightUnits = 2;
inline constexpr int kFsdpWholeGradUnits = 1;

}  // namespace ptdp
