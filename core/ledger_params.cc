// The ledger's parameter side (core/ledger.h): the bytes per parameter of each precision, the
// optimizer's shards, fp8's weight copies, the router biases, and a rank's parameter memory. The
// activations' and the workspace's are ledger.cc's.
#include <algorithm>

#include "core/experts.h"
#include "core/fsdp.h"
#include "core/ledger.h"

namespace ptdp {

bool Fp32MainGrads(const ParallelConfig& c) {
  if (c.grad_reduce_bf16) return false;
  return c.precision != Precision::kFp16 || c.grad_accumulation_fusion;
}

ParamBytes BytesPerParameter(const ParallelConfig& c) {
  if (c.precision == Precision::kFp32) return {4, 4, 8};
  return {2, Fp32MainGrads(c) ? 4 : 2, c.optimizer_state_bf16 ? 6 : 12};
}

Fp8LayerWeights Fp8LayerWeightsOf(const ModelSpec& m, const ParallelConfig& c) {
  Fp8LayerWeights w;
  if (c.precision != Precision::kFp8) return w;
  w.own = LayerParameterCounts(m, c).linear_weight_elements;
  if (m.HasDenseLayers()) {
    w.dense = LayerParameterCounts(DenseLayerModel(m), c).linear_weight_elements;
  }
  return w;
}

Bytes Fp8WeightCopyBytes(const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  return Fp8WeightCopyBytes(m, c, pp_rank, Fp8LayerWeightsOf(m, c));
}

Bytes Fp8WeightCopyBytes(const ModelSpec& m, const ParallelConfig& c, int pp_rank,
                         const Fp8LayerWeights& per_layer) {
  if (c.precision != Precision::kFp8) return 0;
  // Its layers of each kind (the prediction depths' among them) and the depths' eh_proj [h / t,
  // 2h] on the head's rank. One E4M3 copy for the forward and the input gradient, one transposed
  // for the weight gradient's operand on Hopper (Transformer Engine keeps both): 2 bytes per
  // element.
  const RankLayerKinds kinds = RankLayersByKind(m, c, pp_rank);
  const bool mtp = pp_rank == HeadRank(c) && m.mtp_layers > 0;
  const int64_t eh_proj = mtp ? int64_t(m.mtp_layers) * 2 * m.hidden * (m.hidden / c.tp) : 0;
  return (kinds.own * per_layer.own + kinds.dense * per_layer.dense + eh_proj) * 2;
}

int64_t OptimizerShardElements(int64_t elements, int shards) {
  return (elements + shards - 1) / shards;
}

OptimizerShards OptimizerShardsOf(const ParallelConfig& c, int64_t params, int64_t expert_params) {
  OptimizerShards s;
  if (!c.distributed_optimizer) {
    s.owned = s.padded = params;
    return s;
  }
  // The dense parameters' shard over the d cp ranks holding them (or one optimizer instance's),
  // the experts' over theirs.
  const int64_t dense = params - expert_params;
  const int dense_shards = c.OptimizerShardRanks(), expert_shards = c.ExpertWeightReplicas();
  const int64_t dense_owned = OptimizerShardElements(dense, dense_shards);
  const int64_t expert_owned = OptimizerShardElements(expert_params, expert_shards);
  s.owned = dense_owned + expert_owned;
  s.padded = dense_owned * dense_shards + expert_owned * expert_shards;
  return s;
}

Bytes OptimizerBytes(const ParallelConfig& c, int64_t params, int64_t expert_params) {
  return OptimizerShardsOf(c, params, expert_params).owned * BytesPerParameter(c).optimizer;
}

MemoryLedger ParameterMemory(const ParallelConfig& c, int64_t params, int64_t expert_params) {
  const ParamBytes bp = BytesPerParameter(c);
  const OptimizerShards s = OptimizerShardsOf(c, params, expert_params);
  MemoryLedger l;
  // Fully sharded, the weights and gradients are the optimizer's shard; the whole units in use
  // are ParameterMemory's below (they need the model).
  const int64_t held = c.fsdp ? s.owned : s.padded;
  l.weights = held * bp.weight;
  l.grads = held * bp.grad;
  l.optimizer = s.owned * bp.optimizer;
  return l;
}

Bytes RouterBiasBytes(const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  if (!m.moe_router_expert_bias) return 0;
  int64_t layers = 0;
  for (int chunk = 0; chunk < c.vp; ++chunk) {
    const LayerRange r = ChunkLayers(m, c, pp_rank, chunk);
    layers += (r.end - r.begin) - MixtureDenseLayersIn(m, r.begin, r.end);
  }
  // The prediction depths' layers, of the last layer's kind, on the head's stage.
  if (pp_rank == HeadRank(c) && m.IsMoeLayer(m.layers - 1)) layers += m.mtp_layers;
  return layers * m.moe_experts * Bytes(sizeof(float));
}

MemoryLedger WholeCopyMemory(const ModelSpec& m, const ParallelConfig& c, int pp_rank,
                             const Fp8LayerWeights& fp8_per_layer) {
  MemoryLedger l;
  if (!c.fsdp) {
    l.weights = Fp8WeightCopyBytes(m, c, pp_rank, fp8_per_layer) + RouterBiasBytes(m, c, pp_rank);
    return l;
  }
  // FSDP: the units whose weights and gradients are whole at once (core/fsdp.h), and in FP8 the
  // FP8 copies of the whole layers' Linears only.
  const ParamBytes bp = BytesPerParameter(c);
  const int64_t unit = FsdpLargestUnitElements(m, c, pp_rank);
  l.weights = kFsdpWholeWeightUnits * (unit * bp.weight + fp8_per_layer.own * 2) +
              RouterBiasBytes(m, c, pp_rank);
  l.grads = kFsdpWholeGradUnits * unit * bp.grad;
  return l;
}

MemoryLedger ParameterMemory(const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  MemoryLedger l =
      ParameterMemory(c, StageParameterElements(m, c, pp_rank), StageExpertElements(m, c, pp_rank));
  const MemoryLedger whole = WholeCopyMemory(m, c, pp_rank, Fp8LayerWeightsOf(m, c));
  l.weights += whole.weights;
  l.grads += whole.grads;
  return l;
}

}  // namespace ptdp
