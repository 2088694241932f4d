// Our CUDA kernels: the GPU twins of kernels/reference/ops.h, for bf16 mixed precision. Every
// function enqueues work on `stream` and returns at once (no host synchronisation); launch errors
// are checked with PTDP_CUDA_CHECK (an invariant). All pointers are device pointers.
//
// Element types: T is float or __nv_bfloat16 (storage); arithmetic is fp32 throughout.
// Statistics (LayerNorm mean/rstd, cross-entropy max/sum, attention log-sum-exp) are fp32, and
// parameter gradients are fp32 "main grads" that the kernels ACCUMULATE into (+=), as in
// kernels/reference. Input gradients are overwritten. Layouts are those of kernels/reference.
//
// Thread safety: none needed (no state); concurrent calls on different streams are fine as long
// as their buffers do not overlap.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/multi_tensor.h"
#include "kernels/reference/qkv_layout.h"
#include "kernels/reference/rope.h"

namespace ptdp::cuda_kernels {

using bf16 = __nv_bfloat16;
using fp16 = __half;

// ---- LayerNorm (eps 1e-5), one warp per row --------------------------------------------------
// out[N][C] = (x - mean) * rstd * (weight + weight_offset) + bias; mean[N], rstd[N] saved for
// the backward. weight_offset 1: LayerNorm1P (kernels/reference/ops.h), added in fp32.
template <typename T>
void LayerNormForward(T* out, float* mean, float* rstd, const T* x, const T* weight, const T* bias,
                      int64_t n, int64_t c, cudaStream_t stream, float weight_offset = 0.0f);
// dx overwritten; dweight[C], dbias[C] accumulated (fp32).
template <typename T>
void LayerNormBackward(T* dx, float* dweight, float* dbias, const T* dout, const T* x,
                       const T* weight, const float* mean, const float* rstd, int64_t n, int64_t c,
                       cudaStream_t stream, float weight_offset = 0.0f);

// ---- Llama-style layers (kernels/cuda/llama.cu; twins of kernels/reference/llama_ops.cc) ------
// RMSNorm (eps: ModelSpec::norm_eps), one warp per row: out = x rstd weight, rstd[N] saved; the
// backward overwrites dx and accumulates dweight[C] (fp32).
template <typename T>
void RmsNormForward(T* out, float* rstd, const T* x, const T* weight, int64_t n, int64_t c,
                    float eps, cudaStream_t stream);
template <typename T>
void RmsNormBackward(T* dx, float* dweight, const T* dout, const T* x, const T* weight,
                     const float* rstd, int64_t n, int64_t c, cudaStream_t stream);
// SwiGLU: in [count][2] (gate, up) -> out[count] = silu(gate) up; din [count][2] overwritten.
template <typename T>
void SwigluForward(T* out, const T* in, int64_t count, cudaStream_t stream);
template <typename T>
void SwigluBackward(T* din, const T* in, const T* dout, int64_t count, cudaStream_t stream);
// Squared ReLU (model.squared_relu): out = relu(in)^2, din = 2 relu(in) dout (overwritten), fp32.
template <typename T>
void SquaredReluForward(T* out, const T* in, int64_t count, cudaStream_t stream);
template <typename T>
void SquaredReluBackward(T* din, const T* in, const T* dout, int64_t count, cudaStream_t stream);
// The rotary embedding of the queries and keys of qkv [b][s/cp][QkvLayout width] in place
// (kernels/reference/ops.h RotaryEmbedding; the frequencies and angles in fp32, as Megatron-Core
// and Hugging Face compute them: kernels/reference/rope.h RopeInvFreq<float>).
struct RotaryDims {
  int64_t b = 1, s = 1, h = 1, d = 1, group = 1;  // s: the whole sequence; h: local query heads
  int cp = 1, rank = 0;
  kernels::RopeFreqs rope;
};
template <typename T>
void RotaryEmbedding(T* qkv, const RotaryDims& r, bool inverse, cudaStream_t stream);
// Qwen3's QK norm of qkv [rows][row.Width()] in place (kernels/reference/ops.h QkNormForward):
// saved [rows][kv][group + 1][d] keeps the rows before it, rstd (fp32) their 1/rms. The backward
// turns dqkv's query and key gradients into those before the norm in place and accumulates dq_w
// and dk_w (fp32).
template <typename T>
void QkNormForward(T* qkv, T* saved, float* rstd, const T* q_w, const T* k_w, int64_t rows,
                   const kernels::QkvLayout& row, float eps, cudaStream_t stream);
template <typename T>
void QkNormBackward(T* dqkv, float* dq_w, float* dk_w, const T* saved, const float* rstd,
                    const T* q_w, const T* k_w, int64_t rows, const kernels::QkvLayout& row,
                    cudaStream_t stream);
// Grouped-query attention on the multi-head kernels: mha [rows][heads][3][d] with each query
// head's key and value copied from its group's (row: the grouped layout), and the grouped
// gradient [rows][row.Width()] from the multi-head one, a group's key and value gradients summed
// over its heads.
template <typename T>
void ExpandGroupedQkv(T* mha, const T* grouped, int64_t rows, const kernels::QkvLayout& row,
                      cudaStream_t stream);
template <typename T>
void SumGroupedDqkv(T* grouped, const T* mha, int64_t rows, const kernels::QkvLayout& row,
                    cudaStream_t stream);

// ---- Fused bias + GeLU (tanh approximation) -------------------------------------------------
// out[N][C] = gelu(x + bias) (bias[C] broadcast over rows; nullable). out may alias x.
template <typename T>
void BiasGeluForward(T* out, const T* x, const T* bias, int64_t n, int64_t c, cudaStream_t stream);
// dx = gelu'(x + bias) * dout (overwritten; may alias dout); dbias[C] += sum over rows of dx
// (when dbias != nullptr).
template <typename T>
void BiasGeluBackward(T* dx, float* dbias, const T* x, const T* bias, const T* dout, int64_t n,
                      int64_t c, cudaStream_t stream);

// ---- Fused bias + dropout + residual --------------------------------------------------------
// Dropout drawn from the counter generator: element (r, col) of this call is global element
// first_index + r * c + col of the tensor keyed by `key`, kept iff its uniform draw >= p, as in
// reference FillDropoutMask (so the reference twin is Add(residual, Mul(x + bias, mask))).
struct DropoutSpec {
  uint64_t key = 0;
  uint64_t first_index = 0;
  float p = 0.0f;  // 0: no dropout (no draws)
};
// out[N][C] = residual + dropout(x + bias); bias nullable; out may alias residual.
template <typename T>
void BiasDropoutResidualForward(T* out, const T* x, const T* bias, const T* residual, int64_t n,
                                int64_t c, DropoutSpec dropout, cudaStream_t stream);
// The residual's gradient is dout itself (the caller adds it); dx = dout * mask (overwritten),
// dbias[C] += sum over rows of dx when dbias != nullptr.
template <typename T>
void BiasDropoutResidualBackward(T* dx, float* dbias, const T* dout, int64_t n, int64_t c,
                                 DropoutSpec dropout, cudaStream_t stream);

// ---- Fused causal attention (FlashAttention-2 style online softmax) -------------------------
// qkv [b*s][h][3][d] -> out [b*s][h*d], scale 1/sqrt(d), never materialising the s x s matrix.
// lse[b][h][s] (fp32) saves each row's log-sum-exp of the scaled scores for the backward.
// Head dims supported: 16, 32, 64, 128, and 192 (multi-latent attention; AttentionSupportsHeadDim).
// Dropout on the probabilities draws reference FillAttentionDropoutMask's numbers: element
// (bi, hh, i, j) has global index (((batch_begin + bi) * h_total + head_begin + hh) * s + i) * s +
// j.
struct AttentionDropout {
  uint64_t key = 0;
  int64_t batch_begin = 0;  // global index of the first sequence of this micro-batch
  int64_t head_begin = 0;   // first local head's global index
  int64_t h_total = 0;      // heads over all tensor ranks (0: same as the local h)
  float p = 0.0f;           // 0: no dropout
};
bool AttentionSupportsHeadDim(int64_t d);
// `window` W > 0: query i attends keys i - W .. i alone (model.window_size; the reference's).
template <typename T>
void AttentionForward(T* out, float* lse, const T* qkv, int64_t b, int64_t s, int64_t h, int64_t d,
                      AttentionDropout dropout, cudaStream_t stream, int64_t window = 0);
// Workspace floats for AttentionBackward: dq accumulators and the per-row dot(dout, out).
int64_t AttentionBackwardWorkspaceFloats(int64_t b, int64_t s, int64_t h, int64_t d);
// dqkv overwritten. `workspace` holds AttentionBackwardWorkspaceFloats(...) floats.
template <typename T>
void AttentionBackward(T* dqkv, float* workspace, const T* dout, const T* qkv, const T* out,
                       const float* lse, int64_t b, int64_t s, int64_t h, int64_t d,
                       AttentionDropout dropout, cudaStream_t stream, int64_t window = 0);

// ---- Context-parallel attention (layout.cp; the reference twins in kernels/reference/ops.h) ---
// A rank's S = s / cp queries at their global positions (kernels/reference/context_chunks.h)
// against the keys and values of its group; the same dropout draws as AttentionForward's over
// the whole sequence. Packs are [rows][h][2][d]; lse [b][h][S].
struct ContextDims {
  int64_t b = 1, s = 1, h = 1, d = 1;  // microbatch, whole sequence, local heads, head dim
  int cp = 1, rank = 0;
};
// kv = the keys and values of qkv [rows][h][3][d]; Unpack writes dkv into dqkv's key and value
// slots (its query slots untouched).
template <typename T>
void ContextKvPack(T* kv, const T* qkv, int64_t rows, int64_t h, int64_t d, cudaStream_t stream);
template <typename T>
void ContextKvUnpack(T* dqkv, const T* dkv, int64_t rows, int64_t h, int64_t d,
                     cudaStream_t stream);
// out [b][S][h][d] and lse from the local qkv and kv_all [cp][b][S][h][2][d].
template <typename T>
void ContextAttentionForward(T* out, float* lse, const T* qkv, const T* kv_all, ContextDims c,
                             AttentionDropout dropout, cudaStream_t stream);
int64_t ContextAttentionBackwardWorkspaceFloats(const ContextDims& c);
// Through rank src's keys and values kv_src: dQ ADDED to dqkv's query slots, dkv_src overwritten
// with this rank's share of their gradient. `workspace`: ContextAttentionBackwardWorkspaceFloats.
template <typename T>
void ContextAttentionBackward(T* dqkv, T* dkv_src, float* workspace, const T* dout, const T* out,
                              const T* qkv, const T* kv_src, const float* lse, ContextDims c,
                              int src, AttentionDropout dropout, cudaStream_t stream);

// Grouped-query attention under context parallelism (kernels/cuda/llama.cu): packs of the CPU's
// grouped layout [rows][kv][2][d] (row: the grouped qkv row), and the attention on the multi-head
// kernels above through copies in `workspace` (GroupedContextWorkspace elements of T): qkv and
// the packs copied to multi-head rows; backward, dQ added to dqkv's query slots and each group's
// key and value gradients summed into dkv_src [rows][kv][2][d] (overwritten).
template <typename T>
void GroupedContextKvPack(T* kv, const T* qkv, int64_t rows, const kernels::QkvLayout& row,
                          cudaStream_t stream);
template <typename T>
void GroupedContextKvUnpack(T* dqkv, const T* dkv, int64_t rows, const kernels::QkvLayout& row,
                            cudaStream_t stream);
int64_t GroupedContextWorkspace(const ContextDims& c, bool backward);
template <typename T>
void GroupedContextAttentionForward(T* out, float* lse, const T* qkv, const T* kv_all,
                                    ContextDims c, int64_t group, AttentionDropout dropout,
                                    T* workspace, cudaStream_t stream);
template <typename T>
void GroupedContextAttentionBackward(T* dqkv, T* dkv_src, float* attention_workspace, T* workspace,
                                     const T* dout, const T* out, const T* qkv, const T* kv_src,
                                     const float* lse, ContextDims c, int64_t group, int src,
                                     AttentionDropout dropout, cudaStream_t stream);

// ---- Vocabulary-parallel embedding -----------------------------------------------------------
// out[b*s][C] = wte rows of tokens in [vocab_begin, vocab_end) (others 0) + wpe[position] when
// wpe != nullptr. Backward accumulates fp32 dwte (atomics: repeated tokens) and dwpe (nullable).
template <typename T>
void EmbeddingForward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t b,
                      int64_t s, int64_t c, int64_t vocab_begin, int64_t vocab_end,
                      cudaStream_t stream);
template <typename T>
void EmbeddingBackward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int64_t b,
                       int64_t s, int64_t c, int64_t vocab_begin, int64_t vocab_end,
                       cudaStream_t stream);

// ---- Vocabulary-parallel cross-entropy (the protocol of reference/ops.h) ---------------------
// One read of the logits: row_max = the local max over real columns (-inf when none), row_sum =
// sum exp(logit - row_max) (0 when none), target_logit (0 outside the shard); 16-byte loads when
// logits is 16-byte aligned and v_local a multiple of 16 / sizeof(T) (cross_entropy_stats.h).
template <typename T>
void CrossEntropyLocalStats(float* row_max, float* row_sum, float* target_logit, const T* logits,
                            const int32_t* targets, int64_t n, int64_t v_local, int64_t vocab_begin,
                            int64_t vocab_real, cudaStream_t stream);
// row_sum *= exp(local_max - global_max), a 0 sum left 0 (more than one shard, after the max
// all-reduce).
void CrossEntropyRescaleSums(float* row_sum, const float* local_max, const float* global_max,
                             int64_t n, cudaStream_t stream);
void CrossEntropyLoss(float* loss, const float* row_max, const float* row_sum,
                      const float* target_logit, int64_t n, cudaStream_t stream);
// dlogits = (softmax - onehot) * dloss[n], 0 on padding columns and on the rows whose target is
// negative (out of the loss: runtime/backend/ops.h), each element computed in fp32 and
// rounded once to TOut (fp32 logits with bf16 dlogits: no fp32 gradient pass in between). dlogits
// may alias logits when TOut is T.
template <typename T, typename TOut = T>
void CrossEntropyBackward(TOut* dlogits, const T* logits, const float* row_max,
                          const float* row_sum, const int32_t* targets, const float* dloss,
                          int64_t n, int64_t v_local, int64_t vocab_begin, int64_t vocab_real,
                          cudaStream_t stream);

// ---- Optimizer over a flat fp32 parameter buffer ---------------------------------------------
// AdamW as reference AdamWUpdate on g = grad * grad_scale (grad_scale folds in 1/loss_scale and
// the clipping coefficient). When param_copy != nullptr it receives the updated parameters in
// its 16-bit type (the bf16/fp16 compute copy). CopyT is bf16 or fp16.
template <typename CopyT>
void AdamWUpdate(float* param, CopyT* param_copy, const float* grad, float* m, float* v,
                 int64_t count, double lr, double beta1, double beta2, double eps,
                 double weight_decay, int64_t step, float grad_scale, cudaStream_t stream);
// *sum += sum of x^2 (double accumulator on the device; zero it first).
template <typename T>
void SumSquaresAccumulate(double* sum, const T* x, int64_t count, cudaStream_t stream);

// ---- Multi-tensor optimizer: one launch over many tensors (multi_tensor.h) -------------------
// The device tables: one segment per tensor and the work items of PlanWorkItems over their counts
// with chunk_size (kChunkElements in training; tests take small chunks), both in device memory
// (the caller uploads and keeps them).
struct AdamWSegment {
  float* param = nullptr;
  void* copy = nullptr;  // the 16-bit compute copy (CopyT of the launch), or nullptr
  const float* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  int64_t count = 0;
  float weight_decay = 0;  // this tensor's, rounded to float as AdamWUpdate rounds it
  int32_t vector = 0;      // 1: VectorAligned (16-byte accesses)
};
struct SquaresSegment {
  const float* x = nullptr;
  int64_t count = 0;
  int32_t vector = 0;
};
// AdamWUpdate on every segment (its own weight decay), one launch: per element the same float
// arithmetic as AdamWUpdate, so the parameters, m, v and copies are bit-identical to a loop of
// AdamWUpdate calls. CopyT (bf16 or fp16) is every segment's copy type.
template <typename CopyT>
void AdamWMultiUpdate(const AdamWSegment* segments, const WorkItem* items, int64_t item_count,
                      int64_t chunk_size, double lr, double beta1, double beta2, double eps,
                      int64_t step, float grad_scale, cudaStream_t stream);
// *sum += the sum of x^2 over every segment, deterministic (no atomics; the same tables give the
// same bits): each thread adds exact fp64 squares of its elements in fp64, each block's sum (a
// fixed tree in fp64) goes to partials[block], and one block adds the partials in a fixed order.
// partials holds SumSquaresMultiBlocks(item_count) doubles of device memory.
int SumSquaresMultiBlocks(int64_t item_count);
void SumSquaresMulti(double* sum, double* partials, const SquaresSegment* segments,
                     const WorkItem* items, int64_t item_count, int64_t chunk_size,
                     cudaStream_t stream);
// *found |= 1 when any x is inf or nan (dynamic loss scaling); *found untouched otherwise.
template <typename T>
void FlagNonFinite(int* found, const T* x, int64_t count, cudaStream_t stream);

// ---- Mixture of experts (kernels/cuda/moe.cu; twins of kernels/reference/moe.h) --------------
// The router's logits, probabilities, gradients and counts are fp32 (the trainer's wide type on
// this backend), its indices int32. The router's kernels compute in double as the reference
// does, a thread per token row.
inline constexpr int64_t kMaxRouterGroups = 64;  // group-limited routing: a bit mask per row
struct MoeRouterShape {
  int64_t experts = 0, k = 0, groups = 0, group_topk = 0;
  bool pre_softmax = false;
  bool sigmoid = false;         // DeepSeek-V3's scores (kernels/reference/moe.h MoeRouterRule)
  double scale = 1.0;           // the top k's scaling factor
  const float* bias = nullptr;  // [E] on the device: the expert bias of the choice, or none
};
// index [n][k], probs [n][k] from logits [n][E] (kernels/reference/moe.h MoeRouterTopK).
void MoeRouterTopK(float* probs, int32_t* index, const float* logits, int64_t n,
                   const MoeRouterShape& m, cudaStream_t stream);
// dlogits [n][E] overwritten.
void MoeRouterTopKBackward(float* dlogits, const float* dprobs, const float* probs,
                           const int32_t* index, const float* logits, int64_t n,
                           const MoeRouterShape& m, cudaStream_t stream);
// dlogits += scale d(sum lse^2); *sum_sq = sum over the rows of lse^2 (row_sq: n doubles of
// scratch; the rows' values are added in a fixed order).
void MoeZLossBackward(float* dlogits, float* sum_sq, double* row_sq, const float* logits,
                      double scale, int64_t n, int64_t experts, cudaStream_t stream);
// The auxiliary loss's grouping of rows and its scores (kernels/reference/moe.h MoeAuxRule).
struct MoeAuxShape {
  int64_t group_rows = 0, first_row = 0;
  bool sigmoid = false;
};
// dlogits += the auxiliary loss's gradient (counts [groups][E], each row its group's).
void MoeAuxLossBackward(float* dlogits, const float* logits, const float* counts, double scale,
                        int64_t n, int64_t experts, const MoeAuxShape& g, cudaStream_t stream);
// out [groups][E] = per group the sum over its rows of their scores (the softmax over all E, or
// the sigmoids over their sum); scratch of MoeProbSumsScratchBytes.
int64_t MoeProbSumsScratchBytes(int64_t n);
void MoeRouterProbSums(float* out, void* scratch, const float* logits, int64_t n, int64_t experts,
                       int64_t groups, const MoeAuxShape& g, cudaStream_t stream);
// out[i] = x[rows[i]] for i < n (rows of `width`).
template <typename T>
void MoePermuteRows(T* out, const T* x, const int32_t* rows, int64_t n, int64_t width,
                    cudaStream_t stream);
// out[rows[i]] += y[i] for i < n, each of the out_rows rows adding its copies in ascending i (in
// fp32, rounded once); scratch of MoeUnpermuteScratchBytes (a counting sort of the copies).
int64_t MoeUnpermuteScratchBytes(int64_t n, int64_t out_rows);
template <typename T>
void MoeUnpermuteAddRows(T* out, const T* y, const int32_t* rows, int64_t n, int64_t out_rows,
                         int64_t width, void* scratch, cudaStream_t stream);
// out[i] = in[i] weight[slot[i]] (out may be in); out[slot[i]] = <a[i], b[i]> (fp32 sums).
template <typename T>
void MoeScaleRows(T* out, const T* in, const float* weight, const int32_t* slot, int64_t n,
                  int64_t width, cudaStream_t stream);
template <typename T>
void MoeRowDots(float* out, const T* a, const T* b, const int32_t* slot, int64_t n, int64_t width,
                cudaStream_t stream);
// The shared expert's gate: gate = sigmoid(logit) (fp32), dlogit = dgate gate (1 - gate).
template <typename T>
void MoeGateSigmoid(float* gate, const T* logit, int64_t n, cudaStream_t stream);
template <typename T>
void MoeGateSigmoidBackward(T* dlogit, const float* gate, const float* dgate, int64_t n,
                            cudaStream_t stream);

// ---- Elementwise -----------------------------------------------------------------------------
// out = in converted (round to nearest even): float <-> bf16, float <-> fp16.
template <typename To, typename From>
void Cast(To* out, const From* in, int64_t count, cudaStream_t stream);
// dbias[C] += sum over rows of dout[N][C] (the bias gradient of a GEMM whose bias is not fused
// into a following kernel, e.g. QKV's).
template <typename T>
void BiasGradAccumulate(float* dbias, const T* dout, int64_t n, int64_t c, cudaStream_t stream);
// out = a + b; out += x; x *= factor.
template <typename T>
void Add(T* out, const T* a, const T* b, int64_t count, cudaStream_t stream);
template <typename T>
void Accumulate(T* out, const T* x, int64_t count, cudaStream_t stream);
template <typename T>
void Scale(T* x, float factor, int64_t count, cudaStream_t stream);

}  // namespace ptdp::cuda_kernels
