// Reference kernels: the portable C++ specification of every op the GPT runtime runs, and the CPU
// backend's kernels. Templated on the element type (float for training, double for the
// finite-difference tests). They know nothing of ranks, communication or schedules: the runtime's
// tensor-parallel layers call them on local shards and do the collectives themselves.
//
// Layout conventions (row-major):
//   activations  x[N][C] with N = b * s rows (row n = batch n / s, position n % s)
//   weights      W[OC][C] (nn.Linear's layout: out = x W^T + bias)
//   qkv          [N][H_local][3][D]: for each local head, its q, k and v (D = head dim). The global
//                QKV weight's rows are ordered (head, {q,k,v}, d), so a contiguous row shard over
//                tensor ranks is a set of whole heads (Megatron-LM's layout). With grouped-query
//                attention (`group` query heads per key/value head) [N][H_local / group][group +
//                2][D]: kernels/reference/qkv_layout.h.
// Backward functions ACCUMULATE (+=) into parameter gradients and OVERWRITE input gradients
// unless their comment says otherwise.
#pragma once

#include <cstdint>

#include "kernels/reference/qkv_layout.h"
#include "kernels/reference/rope.h"

namespace ptdp::kernels {

// LayerNorm's epsilon (added to the variance).
inline constexpr double kLayerNormEps = 1e-5;

// out[N][OC] = x[N][C] W[OC][C]^T (+ bias[OC] when bias != nullptr). Eigen GEMM.
template <typename T>
void MatmulForward(T* out, const T* x, const T* w, const T* bias, int64_t n, int64_t c, int64_t oc);
// dx[N][C] = dout W (overwrites; or accumulates when accumulate_dx), dw += dout^T x,
// dbias += sum_n dout (when dbias != nullptr). dx may be nullptr (not needed).
template <typename T>
void MatmulBackward(T* dx, T* dw, T* dbias, const T* dout, const T* x, const T* w, int64_t n,
                    int64_t c, int64_t oc, bool accumulate_dx = false);

// LayerNorm over the last dim (eps 1e-5): out = (x - mean) * rstd * (weight + weight_offset) +
// bias; saves mean[N] and rstd[N] for the backward. weight_offset is 1 for LayerNorm1P
// (model.layernorm_1p: the stored weight is its offset from 1, Megatron-LM's
// --apply-layernorm-1p, Transformer Engine's zero_centered_gamma), added in double; dweight is
// the same either way.
template <typename T>
void LayerNormForward(T* out, T* mean, T* rstd, const T* x, const T* weight, const T* bias,
                      int64_t n, int64_t c, double weight_offset = 0);
template <typename T>
void LayerNormBackward(T* dx, T* dweight, T* dbias, const T* dout, const T* x, const T* weight,
                       const T* mean, const T* rstd, int64_t n, int64_t c,
                       double weight_offset = 0);

// RMSNorm over the last dim (Llama's; ModelSpec::norm_eps): out = x * rstd * weight with rstd =
// 1 / sqrt(mean(x^2) + eps), saved per row [N] for the backward (no mean, no bias).
template <typename T>
void RmsNormForward(T* out, T* rstd, const T* x, const T* weight, int64_t n, int64_t c,
                    double eps = kLayerNormEps);
template <typename T>
void RmsNormBackward(T* dx, T* dweight, const T* dout, const T* x, const T* weight, const T* rstd,
                     int64_t n, int64_t c);

// SwiGLU (Shazeer 2020; Llama's MLP): in [count][2] holds each inner feature's gate and up
// projections side by side (the fc1 weight's rows interleave them, so a contiguous row shard over
// the tensor group holds whole features); out[i] = silu(gate_i) * up_i, silu(z) = z / (1 + e^-z).
template <typename T>
void SwigluForward(T* out, const T* in, int64_t count);
template <typename T>
void SwigluBackward(T* din, const T* in, const T* dout, int64_t count);

// Squared ReLU (So et al. 2021, Primer; Nemotron-4's MLP; model.squared_relu): out = relu(in)^2,
// din = 2 relu(in) dout (overwritten).
template <typename T>
void SquaredReluForward(T* out, const T* in, int64_t count);
template <typename T>
void SquaredReluBackward(T* din, const T* in, const T* dout, int64_t count);

// Rotary position embedding (Su et al. 2021; Llama's, the halves form: element e < d/2 pairs with
// e + d/2) of the queries and keys of qkv [b][S][QkvLayout width] in place; values untouched.
// Local position t of a sequence sits at global position ContextChunks{s, cp, rank}.Position(t)
// (t itself for cp 1) and turns by the angles position * RopeInvFreq(e) (base^(-2e/d), or Llama
// 3.1's or YaRN's scaled frequencies: kernels/reference/rope.h), scaled by its attention_factor.
// `inverse` applies the transpose, the backward: the rotation turned back, scaled alike.
struct RotaryDims {
  int64_t b = 1, s = 1, h = 1, d = 1, group = 1;  // s: the whole sequence; h: local query heads
  int cp = 1, rank = 0;
  RopeFreqs rope;
};
template <typename T>
void RotaryEmbedding(T* qkv, const RotaryDims& r, bool inverse);

// QK norm (Qwen3's q_norm and k_norm; Megatron-Core's qk_layernorm): an RMSNorm over each query
// head's and each key head's d features of qkv [rows][QkvLayout width], in place, with one
// d-wide weight for the queries and one for the keys, shared by every head; values untouched.
// qk_in [rows][kv][group + 1][d] keeps the rows before the norm (each group's queries, then its
// key) and rstd [rows][kv][group + 1] their 1/rms, for the backward, which turns the gradients
// of the normed rows in dqkv into those of the rows before it in place and accumulates dq_w and
// dk_w.
template <typename T>
void QkNormForward(T* qkv, T* qk_in, T* rstd, const T* q_w, const T* k_w, int64_t rows,
                   const QkvLayout& row, double eps);
template <typename T>
void QkNormBackward(T* dqkv, T* dq_w, T* dk_w, const T* qk_in, const T* rstd, const T* q_w,
                    const T* k_w, int64_t rows, const QkvLayout& row);

// GeLU, tanh approximation (GPT-2 / Megatron-LM's bias_gelu): elementwise over count values.
template <typename T>
void GeluForward(T* out, const T* x, int64_t count);
template <typename T>
void GeluBackward(T* dx, const T* x, const T* dout, int64_t count);

// Causal self-attention for h_local heads of dim d, batch b, sequence s, from qkv [b*s][h][3][d]
// (or its grouped form, `group` query heads per key/value head) to out [b*s][h*d]; scale
// 1/sqrt(d). Saves the attention probabilities att[b][h][s][s] (after
// softmax, before dropout) for the backward. `dropout_mask` (nullable) [b][h][s][s] holds 0 or
// 1/(1-p) per element, applied to the probabilities before they weight v. With window W > 0
// (model.window_size; Megatron-Core's --window-size W,0) query i attends keys i - W .. i alone; its
// other probabilities are 0, so the backward needs no window of its own.
template <typename T>
void AttentionForward(T* out, T* att, const T* qkv, const T* dropout_mask, int64_t b, int64_t s,
                      int64_t h, int64_t d, int64_t group = 1, int64_t window = 0);
// dqkv overwritten (a group's key and value gradients summed over its heads); needs the saved
// att and the same mask.
template <typename T>
void AttentionBackward(T* dqkv, const T* dout, const T* qkv, const T* att, const T* dropout_mask,
                       int64_t b, int64_t s, int64_t h, int64_t d, int64_t group = 1);
// What a fused attention keeps instead of att: lse[b][h][s], the log of the softmax's row sum,
// log(sum_{j <= i} exp(q_i . k_j / sqrt(d))) (computed as row max + log sum, in double).
template <typename T>
void AttentionLogSumExp(T* lse, const T* qkv, int64_t b, int64_t s, int64_t h, int64_t d,
                        int64_t group = 1, int64_t window = 0);
// A fused backward's recomputation of att from qkv and lse: att_ij = exp(q_i . k_j / sqrt(d) -
// lse_i) for j <= i, 0 above the diagonal (the probabilities AttentionForward saved, within
// rounding).
template <typename T>
void AttentionProbsFromLse(T* att, const T* qkv, const T* lse, int64_t b, int64_t s, int64_t h,
                           int64_t d, int64_t group = 1, int64_t window = 0);

// Context parallelism (kernels/reference/context_chunks.h): a rank's S = s / cp queries, at
// their global positions, against the keys and values of every rank of its group. Dropout of the
// probabilities (p > 0) is drawn at the whole sequence's index (((batch_begin + bi) heads_total
// + head_begin + hh) s + i) s + j, so it is the mask FillAttentionDropoutMask gives for cp = 1.
struct ContextAttentionDims {
  int64_t b = 1, s = 1, h = 1, d = 1;  // microbatch, whole sequence, local heads, head dim
  int cp = 1, rank = 0;
  double p = 0.0;
  uint64_t key = 0;
  int64_t heads_total = 1, head_begin = 0, batch_begin = 0;
  int64_t group = 1;  // query heads per key/value head (qkv_layout.h)
};
// kv [rows][h / group][2][d] = the keys and values of qkv [rows][QkvLayout width];
// ContextKvUnpack writes dkv into the key and value slots of dqkv (its query slots untouched).
template <typename T>
void ContextKvPack(T* kv, const T* qkv, int64_t rows, int64_t h, int64_t d, int64_t group = 1);
template <typename T>
void ContextKvUnpack(T* dqkv, const T* dkv, int64_t rows, int64_t h, int64_t d, int64_t group = 1);
// out [b][S][h][d] and lse [b][h][S] (as AttentionLogSumExp's) of the local queries of qkv
// [b][S][QkvLayout width] against kv_all [cp][b][S][h / group][2][d], every rank's ContextKvPack
// in rank order.
template <typename T>
void ContextAttentionForward(T* out, T* lse, const T* qkv, const T* kv_all,
                             const ContextAttentionDims& a);
// Through the keys and values of rank `src` (kv_src, its ContextKvPack): the local queries'
// gradient is ADDED to the query slots of dqkv, and dkv_src [b][S][h][2][d] is overwritten with
// the local queries' share of src's key and value gradients. dout and out [b][S][h][d], lse the
// forward's. Summing dkv_src over the group's ranks gives src its keys' and values' gradient.
template <typename T>
void ContextAttentionBackward(T* dqkv, T* dkv_src, const T* dout, const T* out, const T* qkv,
                              const T* kv_src, const T* lse, const ContextAttentionDims& a,
                              int src);

// Embedding: out[b*s][C] = wte rows of tokens (only those in [vocab_begin, vocab_end) of this
// vocabulary shard, others contribute 0: the tensor group sums the shards) + wpe[position] when
// wpe != nullptr (added by exactly one holder).
template <typename T>
void EmbeddingForward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t b,
                      int64_t s, int64_t c, int64_t vocab_begin, int64_t vocab_end);
// dwte += for tokens in the shard; dwpe += (when dwpe != nullptr).
template <typename T>
void EmbeddingBackward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t b, int64_t s,
                       int64_t c, int64_t vocab_begin, int64_t vocab_end);

// Vocabulary-parallel cross-entropy on logits [N][V_local] of the shard [vocab_begin, vocab_end),
// reading the logits twice (once forward, once backward). Columns whose global id >= vocab_real
// (padding) are excluded from the softmax (as -inf).
//  1. CrossEntropyLocalStats, one pass over the logits: row_max[N] = the local max over real
//     columns (-inf when none), row_sum[N] = sum exp(logit - local max) (0 when none),
//     target_logit[N] = the target's logit when the target is in this shard, else 0.
//     All-reduce max of row_max over the tensor group.
//  2. With more than one shard, CrossEntropyRescaleSums moves each row sum to the global max:
//     row_sum *= exp(local max - global max) (an empty shard's 0 stays 0). All-reduce sum of
//     row_sum and target_logit. (With one shard the local max is the global one: nothing to do.)
//  3. loss[n] = log(row_sum) + row_max - target_logit (CrossEntropyLoss); CrossEntropyBackward
//     writes dlogits = (softmax - onehot) * dloss[n], with 0 for padding columns.
// The CPU computes the max, then the sum relative to it (two loops over a row in one call).
template <typename T>
void CrossEntropyLocalStats(T* row_max, T* row_sum, T* target_logit, const T* logits,
                            const int32_t* targets, int64_t n, int64_t v_local, int64_t vocab_begin,
                            int64_t vocab_real);
template <typename T>
void CrossEntropyRescaleSums(T* row_sum, const T* local_max, const T* global_max, int64_t n);
template <typename T>
void CrossEntropyBackward(T* dlogits, const T* logits, const T* row_max, const T* row_sum,
                          const int32_t* targets, const T* dloss, int64_t n, int64_t v_local,
                          int64_t vocab_begin, int64_t vocab_real);

// out = a + b, elementwise; and dropout: out = x * mask (mask holds 0 or 1/(1-p)).
template <typename T>
void Add(T* out, const T* a, const T* b, int64_t count);
template <typename T>
void Mul(T* out, const T* x, const T* mask, int64_t count);

// out += x; and x *= factor (elementwise).
template <typename T>
void Accumulate(T* out, const T* x, int64_t count);
template <typename T>
void Scale(T* x, double factor, int64_t count);

// Step 3 of the cross-entropy: loss[n] = log(row_sum) + row_max - target_logit (after the
// all-reduces).
template <typename T>
void CrossEntropyLoss(T* loss, const T* row_max, const T* row_sum, const T* target_logit,
                      int64_t n);

// Counter-based random numbers (no state: the value depends only on (key, index)), so every
// layout draws the same numbers for the same global element.
uint64_t HashKey(const char* name);                       // stable 64-bit hash of a name
double UniformFromCounter(uint64_t key, uint64_t index);  // in (0, 1)
double NormalFromCounter(uint64_t key, uint64_t index);   // standard normal
// Dropout mask value for global element `index` of the tensor keyed by `key`: 0 with probability
// p, else 1/(1-p).
template <typename T>
T DropoutMaskValue(uint64_t key, uint64_t index, double p);
// mask[i] = DropoutMaskValue(key, first_index + i, p) for i < count.
template <typename T>
void FillDropoutMask(T* mask, uint64_t key, uint64_t first_index, int64_t count, double p);
// Attention-probability dropout mask [b][h_local][s][s] for local heads [head_begin, head_begin +
// h_local) of h_total heads and sequences [batch_begin, batch_begin + b) of the global batch:
// element (bi, hh, i, j) is DropoutMaskValue(key, index, p) with the global index
// (((batch_begin + bi) * h_total + head_begin + hh) * s + i) * s + j, so every tensor-parallel
// split (and the fused CUDA attention, which draws the same numbers) drops the same probabilities.
template <typename T>
void FillAttentionDropoutMask(T* mask, uint64_t key, int64_t b, int64_t s, int64_t h_local,
                              int64_t head_begin, int64_t h_total, double p,
                              int64_t batch_begin = 0);
// out[i] = mean + stddev * NormalFromCounter(key, first_index + i) for i < count.
template <typename T>
void FillNormal(T* out, uint64_t key, uint64_t first_index, int64_t count, double mean,
                double stddev);

// Adam with decoupled weight decay (AdamW), fp32 state; step counts from 1.
template <typename T>
void AdamWUpdate(T* param, const T* grad, T* m, T* v, int64_t count, double lr, double beta1,
                 double beta2, double eps, double weight_decay, int64_t step);
// Sum of squares (for the global gradient norm), accumulated in double.
template <typename T>
double SumSquares(const T* x, int64_t count);

}  // namespace ptdp::kernels
