// Memory per GPU of each pipeline stage (docs/cost_model.md, "Memory"), counted from the lists in
// core/shapes.h that the runtime's allocator counts too.
//   weights + gradients + optimizer: parameter elements of the stage (StageParameters) times
//     mixed: 2 (16-bit weight) + 2 (16-bit gradient) + 12 (fp32 master, Adam m and v) = 16 bytes
//     fp32:  4 (weight) + 4 (gradient) + 8 (Adam m and v) = 16 bytes
//   activations: per microbatch in flight, each layer's stash (LayerActivations, or LayerCheckpoint
//     with full recomputation), plus HeadActivations on the last virtual stage; with recomputation
//     one layer's full activations are live again while its backward runs (+1 layer, once);
//     in flight on pipeline rank r (units of one chunk's stash):
//       GPipe m; 1F1B min(m, p - r); interleaved min(m v, 2 (p - r - 1) + (v - 1) p + 1)
//     (Megatron-LM's warm-up count + 1; for r = 0 this is Korthikanti et al.'s p (1 + (p-1)/(p v))
//     microbatches of the stage's layers).
//   workspace: the profile's stated per-GPU workspace.
#pragma once

#include <cstdint>
#include <vector>

#include "core/hardware.h"
#include "core/model.h"
#include "core/parallel.h"
#include "core/units.h"

namespace ptdp::costmodel {

struct StageMemory {
  int pp_rank = 0;
  Bytes weights = 0;
  Bytes grads = 0;
  Bytes optimizer = 0;
  Bytes activations = 0;
  Bytes workspace = 0;
  Bytes Total() const { return weights + grads + optimizer + activations + workspace; }
};

struct BytesPerParam {
  int weight = 2, grad = 2, optimizer = 12;
};
BytesPerParam BytesPerParameter(TrainingPrecision p);

// Optimizer state one GPU holds for `params` parameter elements: BytesPerParameter's optimizer
// bytes, divided over the data-parallel group with the distributed optimizer.
Bytes OptimizerStateBytes(const ParallelConfig& c, TrainingPrecision p, int64_t params);

// Chunk-microbatches in flight on `pp_rank` at the peak (see above).
int64_t InFlightChunkMicrobatches(const ParallelConfig& c, int pp_rank);

// Activation bytes in flight on `pp_rank` given each chunk's stash per microbatch (index = chunk).
// The head's extra stash (last chunk of the last rank) counts only for the microbatches in flight
// on that chunk: all of them for GPipe/1F1B, max(1, units - (v-1) p) interleaved (the warm-up
// runs the earlier chunks first).
Bytes InFlightActivationBytes(const ParallelConfig& c, int pp_rank,
                              const std::vector<Bytes>& chunk_stash);

// Bytes one microbatch keeps on chunk `chunk` of `pp_rank` between its forward and backward.
Bytes ChunkStashBytes(const ModelSpec& m, const ParallelConfig& c, const HardwareProfile& hw,
                      int pp_rank, int chunk);

// Parameter elements held by one GPU of each pipeline rank (core/shapes.h StageParameters).
std::vector<int64_t> StageParameterCounts(const ModelSpec& m, const ParallelConfig& c);

// Memory of `pp_rank`; `param_elements` is StageParameterCounts(m, c)[pp_rank].
StageMemory StageMemoryOf(const ModelSpec& m, const ParallelConfig& c, const HardwareProfile& hw,
                          int pp_rank, int64_t param_elements);

}  // namespace ptdp::costmodel
