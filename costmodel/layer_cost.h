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
// Memory-bound bytes per layer, op by op as Megatron-LM of 2021 runs them in 16-bit training (e =
// bytes per activation element, ComputeBytes of the layout's precision; S = (b a/t) s^2 attention
// scores; LayerNorm, dropout and residual act on the full T h on every tensor rank, since there is
// no sequence parallelism):
//   op                    forward                 backward
//   2 LayerNorms (apex)   2 x 2e T h              2 x 5e T h   (dx: dy, x in, dx out; gamma/beta
//                                                               partial sums read dy, x again)
//   QKV bias add          2e T 3h/t               e T 3h/t     (F.linear on a 3-D input: matmul,
//                                                               then +=; backward: bias grad sum)
//   scale-mask-softmax    2e S                    3e S         (fused; backward reads dy and y)
//   attention dropout     (2e + 1) S              (2e + 1) S   (1-byte mask)
//   context .contiguous() 2e T h/t                0            (permute back is a view)
//   2 bias-dropout-add    2 x (3e + 1) T h        2 x (3e + 1) T h  (dx = dy mask, bias grad sum;
//                                                               the residual gradient passes)
//   bias-GeLU             2e T f/t                4e T f/t     (dy, x in, dx out; bias grad sum)
// 9 kernels forward, 13 backward. The head's cross-entropy (vocabulary-parallel, fp32): see
// HeadCost.
// With measured GeLU rates (a CPU profile) the bias-GeLU's time is its T f/t elements at those
// rates instead of its bytes (GeluPassTime). For a stack that runs the GeLU in the GEMMs'
// epilogues, on a profile that measured them, it is the epilogues' added time instead
// (GeluEpilogueTime), and with a measured bias-gradient rate each Linear's bias gradient costs its
// elements at that rate instead of its bytes (LayerBiasGradElements, BiasGradSeconds).
// Tensor-parallel communication: 2 all-reduces of b s h elements forward (after the projection and
// fc2) and 2 backward (the input gradients of QKV and fc1), on the tensor group's link.
#pragma once

#include <cstdint>

#include "core/hardware.h"
#include "core/model.h"
#include "core/precision.h"
#include "costmodel/cost_table.h"

namespace ptdp::costmodel {

struct PieceCost {
  ComputeBreakdown forward;
  ComputeBreakdown backward;
  // The part of `backward` that is the weight-gradient GEMMs of the piece's Linears (QKV,
  // projection, fc1, fc2; the logits), what a split backward's W runs. Bias gradients, the
  // embedding's scatter-add and the attention products (no weights) stay in the input half.
  ComputeBreakdown weight_grad;
};

// A memory-bound kernel sequence: `bytes` at the profile's achievable bandwidth plus the fixed cost
// of `kernels` launches.
Seconds MemoryBoundTime(const HardwareProfile& hw, double bytes, int kernels);

// Bytes the memory-bound ops of one layer move, forward and backward, op by op as Megatron-LM
// (2021) runs them (see above), and their kernel counts.
struct LayerMemoryBytes {
  double forward = 0, backward = 0;
  int forward_kernels = 0, backward_kernels = 0;
};
// With fused_attention the scale-mask-softmax and attention-dropout passes over S are gone
// (forward 7 kernels, backward 11). With gelu_by_elements (GeluPricedByElements) the bias-GeLU's
// bytes are left out (exactly: the term is 0, the rest summed in the same order); its kernel
// stays counted. With gelu_epilogue (GeluPricedByEpilogue) the GeLU's bytes are left out both
// ways and its forward kernel with them (it runs in fc1's GEMM); the fc1 bias gradient's e T f/t
// stays (its own kernel, runtime/cuda/bias_grad.cu). With bias_grad_by_rate (BiasGradPricedByRate)
// each bias gradient's e bytes per element are left out (the QKV bias's, the two bias-dropout-
// adds' and the bias-GeLU's); the kernels stay counted. With te_layer (SoftwareProfile::te_layer:
// Megatron-Core on Transformer Engine) the QKV bias runs in the GEMMs' epilogues (no bytes, one
// kernel fewer each way), each LayerNorm's backward is one 3e pass instead of 5e, autograd's add
// of the residual gradient to each LayerNorm's input gradient is charged (2 x 3e T h, or T h / t
// with sequence parallelism, 2 kernels backward), and fused attention in TE's bshd format adds
// Q, K, V's transposed copies forward (2e T qkv/t, 3 kernels), the output gradient's copy and
// split's cat backward (2e T h/t + 2e T qkv/t, 2 kernels); AdjustForTransformerEngine in
// layer_cost.cc has the sources.
LayerMemoryBytes LayerMemoryBytesOf(const ModelSpec& m, int tp, int mbs, int act_bytes,
                                    bool sequence_parallel = false, bool fused_attention = false,
                                    bool gelu_by_elements = false, bool gelu_epilogue = false,
                                    bool bias_grad_by_rate = false, bool te_layer = false);

// The one test of whether a layer's activation pass is priced by its elements: a GeLU MLP on a
// profile with both measured GeLU rates (gelu_forward_Gelems_per_s, gelu_backward_Gelems_per_s: a
// CPU's `ptdp profile`, where the tanh, not the bytes, bounds it). SwiGLU has no measured rate and
// keeps its bytes at memory_bound_GBps; so does every profile without the rates (each shipped
// one, a cuda profile).
bool GeluPricedByElements(const ModelSpec& m, const HardwareProfile& hw);
// The GeLU pass of one layer over its T f/t fc1 outputs (T = mbs s tokens) at the measured rates,
// forward and backward, in place of the bias-GeLU bytes of LayerMemoryBytesOf (the bias add and
// its gradient run inside the Linear's GEMM ops on the CPU). REQUIRES GeluPricedByElements.
struct GeluPass {
  Seconds forward = 0, backward = 0;
};
GeluPass GeluPassTime(const ModelSpec& m, const HardwareProfile& hw, int tp, int mbs);

// The one test of whether a layer's GeLU is priced as the GEMM epilogues it runs in: a GeLU MLP,
// a stack that runs it there (`gelu_gemm_epilogue`, SoftwareProfile::gelu_gemm_epilogue) and a
// profile that measured both epilogues (gelu_epilogue_Gelems_per_s, dgelu_epilogue_Gelems_per_s:
// `ptdp profile --backend cuda`). Takes the place of GeluPricedByElements where both hold.
bool GeluPricedByEpilogue(const ModelSpec& m, const HardwareProfile& hw, bool gelu_gemm_epilogue);
// What the GeLU-aux epilogue (forward: LinearForward+GeLU) or the dGeLU epilogue (backward:
// LinearBackwardData+dGeLU) adds to its GEMM over `elements` GeLU elements, at the measured
// rate; 0 where the profile has none.
Seconds GeluEpilogueSeconds(const HardwareProfile& hw, double elements, bool backward);
// The epilogues of one layer over its T f/t fc1 outputs, forward and backward, in place of the
// bias-GeLU bytes of LayerMemoryBytesOf. REQUIRES GeluPricedByEpilogue.
GeluPass GeluEpilogueTime(const ModelSpec& m, const HardwareProfile& hw, int tp, int mbs);
// True where the profile measured the bias gradient's rate (bias_grad_Gelems_per_s).
bool BiasGradPricedByRate(const HardwareProfile& hw);
// One bias gradient (the column sums of a Linear's output gradient) over `elements` gradient
// elements at the measured rate; 0 where the profile has none.
Seconds BiasGradSeconds(const HardwareProfile& hw, double elements);
// Output-gradient elements the bias gradients of one layer sum, those whose bytes
// LayerMemoryBytesOf charges: QKV's T qkv/t (a model with a QKV bias), the projection's and fc2's
// (a GPT: the bias-dropout-adds, on T h, or T h / t with sequence parallelism) and fc1's T f/t (a
// GeLU MLP). With te_layer the QKV bias gradient is the weight-gradient GEMM's epilogue: not here.
double LayerBiasGradElements(const ModelSpec& m, int tp, int mbs, bool sequence_parallel,
                             bool te_layer = false);

// FP8 training (Precision::kFp8), as Transformer Engine runs a layer (docs/cost_model.md, "FP8"):
// the four Linears' GEMMs (forward, input and weight gradients) at the profile's FP8 rate, their
// time the `gemm` table's scaled by LinearGemmScale = 1 / fp8_gemm_speedup where the profile has
// a measured one, else peak_tflops / fp8_peak_tflops (the same fraction of peak as bf16: an
// assumption); 1 for other precisions. Attention and the output
// layer stay in bf16. Memory-bound additions: the cast-transposes into FP8 (read 2 bytes, write
// the copy and its transpose, 1 + 1) of the four inputs and the four weights forward, per
// microbatch, and of the four output gradients backward; one amax-and-scale update launch per
// layer forward.
double LinearGemmScale(const HardwareProfile& hw, Precision precision);
struct Fp8CastBytes {
  double forward = 0, backward = 0;
};
Fp8CastBytes Fp8CastBytesOf(const ModelSpec& m, int tp, int mbs, bool sequence_parallel = false);

// `tp_allreduce_s` is the time of one all-reduce of b s h activation elements on the tensor
// group's link (0 when tp == 1); with sequence parallelism pass the time of a reduce-scatter plus
// an all-gather of b s h, which replace it, and LayerNorm, dropout and residual act on T h / t.
// `gelu_gemm_epilogue`: the stack runs the GeLU in the GEMMs' epilogues (the software profile's
// fact; priced so only where GeluPricedByEpilogue). `te_layer`: the stack runs the layer on
// Transformer Engine (SoftwareProfile::te_layer; LayerMemoryBytesOf says what changes).
PieceCost TransformerLayerCost(const ModelSpec& m, const HardwareProfile& hw, Precision precision,
                               int tp, int mbs, Seconds tp_allreduce_s,
                               bool sequence_parallel = false, bool fused_attention = false,
                               bool gelu_gemm_epilogue = false, bool te_layer = false);
// A fused (FlashAttention-class) causal attention kernel in place of the scores and scores.V
// GEMMs, the softmax and the dropout; its time is charged as GEMM time. FLOPs (FlashAttention-2,
// Dao 2023, section 3): forward Q K^T and P V, 2 x 2 s^2 (h/a) per head; backward recomputes
// S = Q K^T and runs dV, dP, dQ, dK: 5 GEMMs, 2.5x the forward. With the profile's
// attention_tflops: those FLOPs, halved for causality as that figure counts them, at that rate.
// Without it: the GEMM table's times of the unfused batched GEMMs (forward as unfused; backward
// the unfused backward plus one more Q K^T), with no s^2 memory-bound pass either way.
// The attention FLOPs are the same with or without dropout, but a kernel with dropout draws a
// random number per score element and runs slower: the rate is FusedAttentionTflops's.
PieceCost FusedAttentionCost(const ModelSpec& m, const HardwareProfile& hw, int tp, int mbs);

// The QKV projection's GEMMs on one tensor rank for `tokens` (b s) tokens: [T, qkv/t] = [T, h] x
// [h, qkv/t], or multi-latent attention's down and up projections (core/shapes.h MlaProjections,
// the down ones on T/t rows under sequence parallelism); forward, backward (input and weight
// gradients) and the weight-gradient half.
struct QkvGemmTimes {
  Seconds forward = 0, backward = 0, weight = 0;
};
QkvGemmTimes QkvGemms(const ModelSpec& m, const HardwareProfile& hw, int64_t tokens, int tp,
                      bool sequence_parallel);
// Context parallelism (ParallelConfig::cp > 1), Transformer Engine's ring attention
// (AttnFuncWithCPAndKVP2P) added to `layer`, a layer already priced by TransformerLayerCost on
// `shard` (the model with seq_len s / cp: every op but attention is on a rank's s / cp tokens).
// A rank's s / cp queries meet all s keys: cp blocks of the shard's fused attention (the causal
// work is even over the ranks by the two-chunk split), so (cp - 1) more blocks' GEMM time, at the
// rate for length s / cp. The ring's sends on `ring` (the link between neighbouring cp ranks) of
// a chunk's keys and values, kv = 2 b (s / cp) kv_heads dh / t elements: forward cp - 1 sends of
// kv, each beside one block; backward kv beside the first block, kv and its gradient (2 kv) beside
// each of the next cp - 2, and the last gradient alone after the last block. What a send does not
// hide behind its block is added to the layer's communication (tp_comm: tensor and context
// parallelism's, inside the layer); the merges of the partial results (ContextRingMergeBytes) to
// its memory-bound time.
void AddContextRing(const ModelSpec& shard, const HardwareProfile& hw, Precision precision, int tp,
                    int mbs, int cp, const LinkCost& ring, PieceCost* layer);
// The same attention on collectives (SoftwareProfile::context_parallel_collectives; ptdp's
// runtime): the same cp blocks of GEMM time; forward an all-gather of every rank's keys and
// values, (cp - 1) kv received on `ring`, before the blocks; backward, per source rank a
// broadcast of its kv and a reduce of its kv gradient, 2 cp transfers of kv on `ring`; all of it
// exposed (tp_comm) and no merges. The pack and unpack copies of the keys and values are not
// charged.
void AddContextCollectives(const ModelSpec& shard, const HardwareProfile& hw, Precision precision,
                           int tp, int mbs, int cp, const LinkCost& ring, PieceCost* layer);
// The bytes of one ring send forward: a chunk's keys and values on one tensor rank.
double ContextRingSendBytes(const ModelSpec& shard, Precision precision, int tp, int mbs);
// The memory-bound passes that merge the ring's partial results (AddContextRing charges them at
// memory_bound_GBps), from Transformer Engine's context_parallel.py (NVIDIA/TransformerEngine at
// d0067d0d, 2026-08-22): forward, the output is accumulated in fp32 from each step's partial
// output and log-sum-exp (flash_attn_fwd_out_correction_init: read e, write 4; then per later
// step flash_attn_fwd_out_correction or its second-half form: read e, read and write the fp32
// accumulator, over all of the rank's queries for the steps up to its rank and half of them after,
// 3/4 on average) and cast back (read 4, write e), over the b (s/cp) h / t outputs; backward,
// each step's dQ is copied or added into its buffer and each step's dK, dV into the ring's
// gradient buffer (charged as adds: read 2e, write e), dQ over the same 3/4 of the queries after
// the first step. The per-row log-sum-exp merges (a / t floats per token) are left out.
struct ContextRingBytes {
  double forward = 0, backward = 0;
};
ContextRingBytes ContextRingMergeBytes(const ModelSpec& shard, Precision precision, int tp, int mbs,
                                       int cp);
// The one place that picks the fused-attention rate (TFLOP/s, causal count) for a model.
// With an attention_table: the table at the model's sequence length and head dimension
// (costmodel/attention_rate.h: bilinear in log2 s and log2 d, the edge rate outside the grid),
// its dropout rates for a model with dropout > 0 when every point has one; else, for such a
// model, attention_dropout_tflops where the profile has it; else the table's rates without
// dropout. Without a table: attention_dropout_tflops when the model has dropout > 0 and the
// profile has that key, else attention_tflops (0 when the profile has neither: the unfused GEMMs'
// times price the kernel).
double FusedAttentionTflops(const ModelSpec& m, const HardwareProfile& hw);
// The attention core's forward (scores and scores.V GEMMs, softmax, dropout): what selective
// recomputation redoes in each layer's backward (Megatron-LM recomputes the whole core).
ComputeBreakdown AttentionCoreForwardCost(const ModelSpec& m, const HardwareProfile& hw,
                                          Precision precision, int tp, int mbs);
// Word + position embedding lookup, add and dropout; the vocabulary-parallel embedding
// all-reduces its output (b s h) forward. Backward: scatter-add into the word-embedding gradient.
// `tp_reduce_s`: the all-reduce of the output (a reduce-scatter with sequence parallelism).
PieceCost EmbeddingCost(const ModelSpec& m, const HardwareProfile& hw, Precision precision, int tp,
                        int mbs, Seconds tp_reduce_s, bool sequence_parallel = false);
// Final LayerNorm, logits [T, V/t] = [T, h] x [h, V/t] and the vocabulary-parallel cross-entropy
// as Megatron-LM of 2021 computes it over the L = T V/t local logits: logits.float() (e + 4 bytes
// per logit; none in fp32 training), max (4), in-place subtract (8), in-place exp (8), sum (4),
// in-place divide (8), and three all-reduces of T floats. Backward: the saved softmax scaled in
// place by the loss gradient (8), cast back to 16 bits (4 + e), the logits' two GEMMs, the final
// LayerNorm's backward (5e T h) and the all-reduce of the input gradient (b s h).
// With a measured cross_entropy_Glogits_per_s (a CPU profile) the cross-entropy's passes cost L at
// that rate instead of their bytes, half forward and half backward (the casts stay bytes).
// With sequence parallelism the final LayerNorm acts on T h / t, its output is all-gathered
// (`tp_allgather_s`) before the logits, and `tp_allreduce_s` should be the backward's
// reduce-scatter.
// `fused_cross_entropy` (SoftwareProfile::fused_cross_entropy, ptdp's runtime): the logits stay
// fp32 as the GEMM wrote them and are read once forward (4 bytes each) and once backward, the
// gradient written in the compute type (4 + e); no cast either way, with or without the rate.
PieceCost HeadCost(const ModelSpec& m, const HardwareProfile& hw, Precision precision, int tp,
                   int mbs, Seconds tp_allreduce_s, Seconds tp_small_allreduce_s,
                   bool sequence_parallel = false, Seconds tp_allgather_s = 0,
                   bool fused_cross_entropy = false);

}  // namespace ptdp::costmodel
