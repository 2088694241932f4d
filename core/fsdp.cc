#include "core/fsdp.h"

#include <algorithm>
#include <string>

#include "core/shapes.h"

namespace ptdp {

Status ValidateFsdp(const ParallelConfig& c, const ModelSpec& m) {
  if (!c.fsdp) return Status::Ok();
  const std::string what = "fsdp: ";
  if (!c.distributed_optimizer) {
    return Status::Invalid(
        what +
        "needs distributed_optimizer (the weights and gradients are sharded "
        "as the optimizer state is, Megatron-FSDP on the distributed optimizer)");
  }
  if (c.WeightReplicas() < 2) {
    return Status::Invalid(what +
                           "needs dp * cp > 1 (with one rank per weight there is nothing to "
                           "shard)");
  }
  if (m.IsMoe()) {
    return Status::Invalid(what + "is not modelled with a mixture of experts (model " + m.name +
                           ")");
  }
  if (SplitsBackward(c.schedule)) {
    return Status::Invalid(what + "is not modelled with schedule '" + ScheduleName(c.schedule) +
                           "', which defers the weight gradients past the reduce-scatter");
  }
  return Status::Ok();
}

Status ValidateOptimizerInstances(const ParallelConfig& c, const ModelSpec& m) {
  if (c.optimizer_instances == 1) return Status::Ok();
  const std::string what = "optimizer_instances: " + std::to_string(c.optimizer_instances) + " ";
  if (!c.distributed_optimizer) {
    return Status::Invalid(what + "needs distributed_optimizer (instances of its shards)");
  }
  if (m.IsMoe()) {
    return Status::Invalid(what + "is not modelled with a mixture of experts (model " + m.name +
                           ")");
  }
  if (c.WeightReplicas() % c.optimizer_instances != 0) {
    return Status::Invalid(what + "does not divide the dp * cp = " +
                           std::to_string(c.WeightReplicas()) + " ranks holding each weight");
  }
  return Status::Ok();
}

int NodeShardInstances(int tp, int weight_replicas, int gpus_per_node) {
  if (tp <= 0 || gpus_per_node % tp != 0) return 0;
  const int per_node = gpus_per_node / tp;
  if (per_node < 2 || per_node >= weight_replicas || weight_replicas % per_node != 0) return 0;
  return weight_replicas / per_node;
}

int64_t FsdpEndElements(const ModelSpec& m, const ParallelConfig& c, int pp_rank,
                        int64_t stage_elements) {
  const int64_t layer = LayerParameterCounts(m, c).elements;
  return std::max<int64_t>(0, stage_elements - int64_t(RankLayerCount(m, c, pp_rank)) * layer);
}

int64_t FsdpLargestUnitElements(const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  const int64_t layer = LayerParameterCounts(m, c).elements;
  // The embedding, the output layer (when untied, or on a rank of its own: the tied copy), the
  // final norm: split in two where the rank holds both ends, each its own unit (the final norm is
  // a few thousand elements either way).
  const int64_t extra = FsdpEndElements(m, c, pp_rank, StageParameterElements(m, c, pp_rank));
  bool embedding = false, head = false;
  for (int k = 0; k < c.vp; ++k) {
    embedding = embedding || HoldsEmbedding(c, pp_rank, k);
    head = head || HoldsHead(c, pp_rank, k);
  }
  const int64_t end = embedding && head && !m.tied_embeddings ? (extra + 1) / 2 : extra;
  return std::max(layer, end);
}

}  // namespace ptdp
