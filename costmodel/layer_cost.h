// Time of one microbatch through the pieces of a GPT on one tensor rank: a transformer layer, the
// embedding (first virtual stage) and the head (last virtual stage), forward and backward, split
// into GEMM, memory-bound and tensor-parallel communication time (docs/cost_model.md, "Compute").
//
// GEMMs a layer runs under tensor parallelism t with T = b s tokens (Megatron-LM's column- then
// row-parallel split, no sequence parallelism):
//   QKV        [T, 3h/t] = [T, h] x [h, 3h/t]
//   scores     b a/t x [s, s] = [s, h/a] x [h/a, s]
//   scores.V   b a/t x [s, h/a] = [s, s] x [s, h/a]
//   projection [T, h] = [T, h/t] x [h/t, h]
//   MLP fc1    [T, f/t] = [T, h] x [h, f/t]
//   MLP fc2    [T, h] = [T, f/t] x [f/t, h]
// and backward runs each one's input- and weight-gradient GEMMs (costmodel/gemm.h).
// Memory-bound bytes per layer forward (e = bytes per activation element; LayerNorm, dropout and
// residual act on the full T h on every tensor rank, since there is no sequence parallelism):
//   2 LayerNorms          2 x 2 e T h                      (read input, write output)
//   2 bias+dropout+add    2 x (3e + 1) T h                 (two reads, a write, a 1-byte mask)
//   bias+GeLU             2 e T f/t
//   softmax               2 e (b a/t) s^2                  (fused scale-mask-softmax)
//   attention dropout     (2e + 1) (b a/t) s^2
// The backward of an elementwise op moves about twice its forward bytes (reads the output
// gradient and the saved input, writes the input gradient): we charge 2x.
// Tensor-parallel communication: 2 all-reduces of b s h elements forward (after the projection and
// fc2) and 2 backward (the input gradients of QKV and fc1), on the tensor group's link.
#pragma once

#include <cstdint>

#include "core/hardware.h"
#include "core/model.h"
#include "costmodel/cost_table.h"

namespace ptdp::costmodel {

struct PieceCost {
  ComputeBreakdown forward;
  ComputeBreakdown backward;
};

// A memory-bound kernel sequence: `bytes` at the profile's achievable bandwidth plus the fixed cost
// of `kernels` launches.
Seconds MemoryBoundTime(const HardwareProfile& hw, double bytes, int kernels);

// Bytes the memory-bound ops of one layer's forward move (see above).
double LayerForwardMemoryBytes(const ModelSpec& m, int tp, int mbs, int act_bytes);

// `tp_allreduce_s` is the time of one all-reduce of b s h activation elements on the tensor
// group's link (0 when tp == 1).
PieceCost TransformerLayerCost(const ModelSpec& m, const HardwareProfile& hw, int tp, int mbs,
                               Seconds tp_allreduce_s);
// Word + position embedding lookup, add and dropout; the vocabulary-parallel embedding
// all-reduces its output (b s h) forward. Backward: scatter-add into the word-embedding gradient.
PieceCost EmbeddingCost(const ModelSpec& m, const HardwareProfile& hw, int tp, int mbs,
                        Seconds tp_allreduce_s);
// Final LayerNorm, logits [T, V/t] = [T, h] x [h, V/t] and the vocabulary-parallel cross-entropy
// (fp32 softmax over the local slice and three all-reduces of T floats); backward: the logits'
// gradient, its two GEMMs and the all-reduce of the input gradient (b s h).
PieceCost HeadCost(const ModelSpec& m, const HardwareProfile& hw, int tp, int mbs,
                   Seconds tp_allreduce_s, Seconds tp_small_allreduce_s);

}  // namespace ptdp::costmodel
