#include "costmodel/memory.h"

#include <algorithm>

#include "core/shapes.h"

namespace ptdp::costmodel {

BytesPerParam BytesPerParameter(TrainingPrecision p) {
  if (p == TrainingPrecision::kMixed) return {2, 2, 12};
  return {4, 4, 8};
}

Bytes OptimizerStateBytes(const ParallelConfig& c, TrainingPrecision p, int64_t params) {
  const Bytes all = params * BytesPerParameter(p).optimizer;
  return c.distributed_optimizer ? (all + c.dp - 1) / c.dp : all;
}

int64_t InFlightChunkMicrobatches(const ParallelConfig& c, int pp_rank) {
  const int64_t m = c.Microbatches(), p = c.pp, v = c.vp, r = pp_rank;
  switch (c.schedule) {
    case ScheduleKind::kGPipe:
      return m;
    case ScheduleKind::k1F1B:
      return std::min(m, p - r);
    case ScheduleKind::kInterleaved:
      return std::min(m * v, 2 * (p - r - 1) + (v - 1) * p + 1);
  }
  return m;
}

Bytes ChunkStashBytes(const ModelSpec& m, const ParallelConfig& c, const HardwareProfile& hw,
                      int pp_rank, int chunk) {
  const int e = hw.ActivationBytes();
  const bool dropout = m.dropout > 0;
  const Bytes per_layer = ActivationBytes(LayerStash(m, c, dropout), e);
  Bytes b = per_layer * ChunkLayers(m, c, pp_rank, chunk).size();
  if (HoldsHead(c, pp_rank, chunk)) b += ActivationBytes(HeadActivations(m, c), e);
  return b;
}

Bytes InFlightActivationBytes(const ParallelConfig& c, int pp_rank,
                              const std::vector<Bytes>& chunk_stash) {
  const int64_t units = InFlightChunkMicrobatches(c, pp_rank);
  if (chunk_stash.size() == 1) return units * chunk_stash[0];
  const Bytes plain = *std::min_element(chunk_stash.begin(), chunk_stash.end());
  const Bytes extra = chunk_stash.back() - plain;
  const int64_t head_units = std::max<int64_t>(1, units - int64_t(c.vp - 1) * c.pp);
  return units * plain + std::min(units, head_units) * extra;
}

std::vector<int64_t> StageParameterCounts(const ModelSpec& m, const ParallelConfig& c) {
  std::vector<int64_t> n(c.pp, 0);
  // Every rank strictly between the first and the last holds the same shapes: count one.
  n[0] = StageParameterElements(m, c, 0);
  if (c.pp > 1) n[c.pp - 1] = StageParameterElements(m, c, c.pp - 1);
  if (c.pp > 2) {
    const int64_t mid = StageParameterElements(m, c, 1);
    for (int r = 1; r < c.pp - 1; ++r) n[r] = mid;
  }
  return n;
}

StageMemory StageMemoryOf(const ModelSpec& m, const ParallelConfig& c, const HardwareProfile& hw,
                          int pp_rank, int64_t param_elements) {
  StageMemory s;
  s.pp_rank = pp_rank;
  const BytesPerParam bp = BytesPerParameter(hw.precision);
  s.weights = param_elements * bp.weight;
  s.grads = param_elements * bp.grad;
  s.optimizer = OptimizerStateBytes(c, hw.precision, param_elements);
  std::vector<Bytes> stash;
  for (int k = 0; k < c.vp; ++k) stash.push_back(ChunkStashBytes(m, c, hw, pp_rank, k));
  s.activations = InFlightActivationBytes(c, pp_rank, stash);
  s.activations += ActivationBytes(RecomputeWorkingSet(m, c, m.dropout > 0), hw.ActivationBytes());
  s.workspace = Bytes(hw.workspace_GiB.value * kGiB);
  return s;
}

}  // namespace ptdp::costmodel
