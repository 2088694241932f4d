// FLOP counts of the paper (Narayanan et al. SC'21, section 5.1, eq. 3), GEMMs only.
//   per layer, forward: 24 B s h^2 + 4 B s^2 h; backward 2x the forward; recomputation 1x more.
//   logits: 2 B s h V forward, 6 B s h V forward + backward (never recomputed).
// With recomputation:    F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))   (eq. 3)
// Without recomputation: F = 72 B s l h^2 (1 + s/(6h) + V/(12 l h))
// "Model FLOPs" (MFU's convention) never count the recomputed forward; "hardware FLOPs" count
// what runs (eq. 3 when recomputation is on).
#pragma once

#include <cstdint>

#include "core/model.h"
#include "core/parallel.h"
#include "core/units.h"

namespace ptdp::costmodel {

// One transformer layer's forward GEMM FLOPs for `sequences` sequences: 24 B s h^2 + 4 B s^2 h
// (with ffn = 4h; in general 8 B s h^2 + 4 B s h f + 4 B s^2 h).
FlopCount LayerForwardFlops(const ModelSpec& m, int64_t sequences);
// Per iteration of `global_batch` sequences with vocabulary `vocab` (the padded one that runs).
FlopCount IterationFlops(const ModelSpec& m, int64_t global_batch, int64_t vocab, bool recompute);
// One layer's attention-core forward GEMM FLOPs (scores and scores.V): 4 B s^2 h, what selective
// recomputation redoes.
FlopCount AttentionCoreForwardFlops(const ModelSpec& m, int64_t sequences);
// Hardware FLOPs of an iteration under `recompute`: IterationFlops without recomputation, plus the
// recomputed forward (full: every layer's; selective: every layer's attention core).
FlopCount HardwareIterationFlops(const ModelSpec& m, int64_t global_batch, int64_t vocab,
                                 Recompute recompute);
// The closed form of eq. (3) (recompute) or its 72 variant, for checking IterationFlops.
FlopCount PaperEq3Flops(const ModelSpec& m, int64_t global_batch, int64_t vocab, bool recompute);

}  // namespace ptdp::costmodel
