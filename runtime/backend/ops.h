// Ops: the compute seam. Every operation of a training step on device memory goes through this
// interface, at the granularity fast kernels work at (kernels/cuda/ops.h): the GPT layers
// (runtime/model) and the trainer never touch a tensor element on the host. Implementations:
// CpuOps (kernels/reference, Eigen GEMMs; runtime/backend/cpu_ops.*), a CUDA one next
// (kernels/cuda + cuBLASLt), and the guard decorator of the tests.
//
// Tensors are untyped device pointers with a DType. Activations and weights the layers read are
// in the compute dtype (fp32, bf16 or fp16; fp64 on the CPU for finite-difference tests only);
// parameter gradients, LayerNorm and softmax statistics, the logits of the cross-entropy and the
// optimizer state are "wide" (fp32, or fp64 in those tests); dropout masks are u8 (1 = kept),
// tokens i32. Rounding points (docs/runtime.md "Precision"): every op reads its 16-bit inputs,
// computes in fp32 and rounds each output once to the output's dtype.
//
// Ops are stream-ordered: a call may return before the device finishes; results reach the host
// only through Device::Copy (which waits). Errors are returned, never thrown.
// Thread-safety: one thread at a time, like the Device that owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "core/status.h"
#include "core/units.h"

namespace ptdp::runtime {

// A view of a device array: pointer, element type and count.
struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::kFp32;
  int64_t count = 0;
  bool empty() const { return data == nullptr; }
};
// Read-only view.
struct ConstRef {
  const void* data = nullptr;
  DType dtype = DType::kFp32;
  int64_t count = 0;
  ConstRef() = default;
  ConstRef(const void* d, DType t, int64_t n) : data(d), dtype(t), count(n) {}
  ConstRef(const TensorRef& t) : data(t.data), dtype(t.dtype), count(t.count) {}  // NOLINT
  bool empty() const { return data == nullptr; }
};

// Where a dropout mask's elements sit in the GLOBAL tensor (so every layout and backend draws the
// same mask): element i of the local array has global index first + i (hidden sites, whose rows
// are never split), or the attention index below.
struct DropoutSpec {
  double p = 0.0;      // 0: no dropout (the mask is then not written)
  uint64_t key = 0;    // Philox key: (site, step)
  uint64_t first = 0;  // global index of local element 0 (hidden sites)
  // Context parallelism (hidden sites, cp > 1): the microbatch's local rows [b][S], S = s / cp,
  // are two chunks of each sequence (kernels/reference/context_chunks.h), not a contiguous run.
  // Local element i is then row first_row + i / width of them (bi = row / S, t = row % S), at
  // global index first + (bi seq + Position(t)) width + i % width; `first` is the index of the
  // microbatch's first element.
  int cp = 1, cp_rank = 0;
  int64_t seq = 0, width = 0, first_row = 0;
};

// The runs of a hidden-site dropout's `count` local elements whose global indices are
// consecutive: call(offset, n, first) for local elements [offset, offset + n) at global indices
// first .. first + n - 1. One run; under context parallelism one per chunk of each sequence,
// whole rows of `width` each. Every backend draws its masks through it (ops.cc).
using DropoutRunCall = std::function<Status(int64_t offset, int64_t n, uint64_t first)>;
Status ForEachDropoutRun(const DropoutSpec& drop, int64_t count, const DropoutRunCall& call);

// RoPE's frequencies (model.rotary_base, model.rope_scaling_*): the seam's copy of
// kernels/reference/rope.h RopeFreqs, field for field, which the backends pass on
// (runtime/backend/rope_freqs.h RopeFreqsOf).
struct RopeSpec {
  double base = 10000;
  double factor = 0;  // Llama 3.1's scaling (or YaRN's) when > 0
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  double original_max_positions = 8192;
  double percent = 1;  // model.rotary_percent: the share of a head's features turned
  bool yarn = false;   // model.rope_scaling_type "yarn"
  double beta_fast = 32;
  double beta_slow = 1;
  double attention_factor = 1;  // cos and sin scaled by it (YaRN's concentration)
};

// Causal self-attention of one microbatch on one tensor rank.
struct AttentionShape {
  int64_t b = 1, s = 1;
  int64_t heads_local = 1, head_dim = 1;
  int64_t heads_total = 1, head_begin = 0;  // global heads, this rank's first
  int64_t batch_begin = 0;                  // global index of the microbatch's first sequence
  // Grouped-query attention: query heads per key/value head; qkv rows are then
  // [heads_local / group][group + 2][D] (kernels/reference/qkv_layout.h), 1 is [heads_local][3][D].
  int64_t group = 1;
  // Context parallelism (layout.cp): s stays the whole sequence and this rank holds S = s / cp
  // of its positions (kernels/reference/context_chunks.h); the Context* ops below take it.
  int cp = 1, cp_rank = 0;
  int64_t LocalSeq() const { return s / cp; }
  // Sliding-window attention (model.window_size, in a windowed layer): query i attends keys
  // i - window .. i; 0: every earlier key. The layout refuses it beside cp > 1 or unfused
  // attention.
  int64_t window = 0;
};

// The attention state kept from forward to backward, as core/shapes.h AttentionCoreActivations
// lists it for the layout; the layer allocates exactly the listed tensors and leaves the others
// empty. Two forms, told apart by which fields are set:
//   unfused (layout.fused_attention off, Megatron-LM 2021): probs, and with dropout mask and
//     dropped; lse empty.
//   fused (layout.fused_attention on, FlashAttention-class): only lse, the fp32 log-sum-exp of
//     each row of the scaled scores; probs, mask, dropped empty. The backward recomputes the
//     probabilities exp(q.k scale - lse) from qkv and regenerates the dropout mask from the
//     counter generator with the forward's key (dropout_key) and the same global indices as
//     the forward (AttentionShape), so no mask is stored. `out` is the forward's output, which
//     the layer stashes anyway (attn.proj.input): a FlashAttention backward reads it for
//     rowsum(dout * out); the CPU backend does not need it.
// The layer sets lse, dropout_key and out on both calls; they are not new allocations but lse.
struct AttentionStash {
  TensorRef probs;           // [b][a/t][s][s] compute dtype, unfused
  TensorRef mask;            // [b][a/t][s][s] u8, unfused with dropout
  TensorRef dropped;         // [b][a/t][s][s] compute dtype, unfused with dropout
  TensorRef lse;             // [b][a/t][s] fp32, fused
  uint64_t dropout_key = 0;  // the forward's DropoutSpec key (ignored when p == 0)
  ConstRef out;              // the forward's output [b s][a/t D] (read-only), both forms
  bool fused() const { return !lse.empty(); }
};

// Vocabulary shard of the cross-entropy.
struct VocabShard {
  int64_t rows = 0;     // tokens
  int64_t v_local = 0;  // logits per row on this rank
  int64_t begin = 0;    // first global id of the shard
  int64_t real = 0;     // ids >= real are padding, excluded from the softmax
};

struct AdamWHyper {
  double lr = 0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;  // 1-based
  // The update reads grad * grad_scale (the clipping coefficient), rounded as Scale would round
  // it, and leaves grad as it is: one pass over the gradients fewer than Scale, then AdamW.
  double grad_scale = 1.0;
};

// One tensor of a multi-tensor AdamW step (Ops::AdamWMany): AdamW's arguments, with the tensor's
// own weight decay (the trainer decays 2-D tensors only).
struct AdamWTensor {
  TensorRef param, compute_copy;
  ConstRef grad;
  TensorRef m, v;
  double weight_decay = 0;
};

// A mixture of experts' router (model.moe_*; kernels/reference/moe.h MoeRouterTopK): E experts,
// the top k; group-limited routing (groups > 0: the k from the group_topk best of `groups`); and
// pre_softmax (the softmax over all E, the top k's values unrenormalised; else the softmax over
// the top k's logits); or sigmoid (DeepSeek-V3's: the k's sigmoids over their sum), the choice
// moved by `bias` ([E] wide, or empty: the expert bias); the top k's weights times `scale`.
// The auxiliary loss's grouping of rows and its scores (kernels/reference/moe.h MoeAuxRule): row
// r of the n counts in group (first_row + r) / group_rows (0: one group), one per sequence for
// Megatron-Core's seq_aux_loss; sigmoid: the scores are the sigmoids over their row's sum (else
// the softmax over all E).
struct MoeAuxGrouping {
  int64_t group_rows = 0, first_row = 0;
  bool sigmoid = false;
};

struct MoeRouting {
  int64_t experts = 0, k = 0, groups = 0, group_topk = 0;
  bool pre_softmax = false;
  bool sigmoid = false;
  double scale = 1.0;
  ConstRef bias;
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual const char* name() const = 0;

 protected:
  Status ContextUnsupported() const {
    return Status::Invalid(std::string(name()) +
                           " ops: no context-parallel attention (layout.cp > 1)");
  }
  // The ops of Llama-style layers that a backend does not have (`what`: the model field).
  Status ArchUnsupported(const char* what) const {
    return Status::Invalid(std::string(name()) + " ops: no " + what + " (plan.model." + what +
                           ") on this backend yet");
  }

 public:
  // ---- LayerNorm over rows of c: out = (x - mean) rstd (w + weight_offset) + b; mean, rstd wide
  // [n]. weight_offset is 1 for LayerNorm1P (model.layernorm_1p: w stored as its offset from 1,
  // the 1 added in the wide type as Transformer Engine's zero_centered_gamma does), else 0.
  virtual Status LayerNormForward(TensorRef out, TensorRef mean, TensorRef rstd, ConstRef x,
                                  ConstRef w, ConstRef b, int64_t n, int64_t c,
                                  double weight_offset) = 0;
  // dx overwritten (or accumulated when accumulate_dx); dw, db (wide) accumulate.
  virtual Status LayerNormBackward(TensorRef dx, TensorRef dw, TensorRef db, ConstRef dout,
                                   ConstRef x, ConstRef w, ConstRef mean, ConstRef rstd, int64_t n,
                                   int64_t c, bool accumulate_dx, double weight_offset) = 0;

  // ---- RMSNorm over rows of c (model.rmsnorm, eps model.norm_eps): out = x rstd w, rstd wide
  // [n]. The backward overwrites dx and accumulates dw (wide).
  virtual Status RmsNormForward(TensorRef /*out*/, TensorRef /*rstd*/, ConstRef /*x*/,
                                ConstRef /*w*/, int64_t /*n*/, int64_t /*c*/, double /*eps*/) {
    return ArchUnsupported("rmsnorm");
  }
  virtual Status RmsNormBackward(TensorRef /*dx*/, TensorRef /*dw*/, ConstRef /*dout*/,
                                 ConstRef /*x*/, ConstRef /*w*/, ConstRef /*rstd*/, int64_t /*n*/,
                                 int64_t /*c*/) {
    return ArchUnsupported("rmsnorm");
  }
  // ---- SwiGLU (model.swiglu): in [count][2] (each feature's gate and up) -> out [count] =
  // silu(gate) up; the backward writes din [count][2].
  virtual Status SwigluForward(TensorRef /*out*/, ConstRef /*in*/, int64_t /*count*/) {
    return ArchUnsupported("swiglu");
  }
  virtual Status SwigluBackward(TensorRef /*din*/, ConstRef /*in*/, ConstRef /*dout*/,
                                int64_t /*count*/) {
    return ArchUnsupported("swiglu");
  }
  // ---- Mixture of experts (model.moe_experts; runtime/model/moe_layer.h, kernels/reference/
  // moe.h). The router (MoeRouting): the top k of each of n rows of E logits (wide) into probs
  // [n][k] (wide, their softmax, or with pre_softmax the full softmax's values) and index [n][k]
  // (i32), and its backward into dlogits [n][E] (wide, overwritten; it reads the logits with
  // pre_softmax); with groups > 0 the k come from the group_topk best of `groups` equal groups of
  // experts (kernels/reference/moe.h). The moves of rows of `width` between the tokens' order and
  // the experts' (rows, slot: i32 [n]): out[i] = x[rows[i]]; out[rows[i]] += y[i]; out[i] = in[i]
  // weight[slot[i]] (weight wide); out[slot[i]] = <a[i], b[i]> (out wide).
  virtual Status MoeRouterTopK(TensorRef /*probs*/, TensorRef /*index*/, ConstRef /*logits*/,
                               int64_t /*n*/, const MoeRouting& /*routing*/) {
    return ArchUnsupported("moe_experts");
  }
  virtual Status MoeRouterTopKBackward(TensorRef /*dlogits*/, ConstRef /*dprobs*/,
                                       ConstRef /*probs*/, ConstRef /*index*/, ConstRef /*logits*/,
                                       int64_t /*n*/, const MoeRouting& /*routing*/) {
    return ArchUnsupported("moe_experts");
  }
  // The auxiliary load-balancing loss's gradient into dlogits [n][E] (wide, accumulated) from the
  // logits and the tokens each expert got (counts wide [groups][E], each row its group's;
  // kernels/reference/moe.h).
  virtual Status MoeAuxLossBackward(TensorRef /*dlogits*/, ConstRef /*logits*/, ConstRef /*counts*/,
                                    double /*scale*/, int64_t /*n*/, int64_t /*experts*/,
                                    const MoeAuxGrouping& /*grouping*/) {
    return ArchUnsupported("moe_experts");
  }
  // The router's z-loss (kernels/reference/moe.h MoeZLossBackward): sum_sq [1] (wide, overwritten)
  // = the sum over n rows of lse^2, and scale times its gradient into dlogits [n][E] (accumulated).
  virtual Status MoeZLossBackward(TensorRef /*dlogits*/, TensorRef /*sum_sq*/, ConstRef /*logits*/,
                                  double /*scale*/, int64_t /*n*/, int64_t /*experts*/) {
    return ArchUnsupported("moe_experts");
  }
  // The sum over each group's rows of their scores into out [groups][E] (wide, overwritten; groups
  // = out.count / E, those without rows here zero).
  virtual Status MoeRouterProbSums(TensorRef /*out*/, ConstRef /*logits*/, int64_t /*n*/,
                                   int64_t /*experts*/, const MoeAuxGrouping& /*grouping*/) {
    return ArchUnsupported("moe_experts");
  }
  virtual Status MoePermuteRows(TensorRef /*out*/, ConstRef /*x*/, ConstRef /*rows*/, int64_t /*n*/,
                                int64_t /*width*/) {
    return ArchUnsupported("moe_experts");
  }
  virtual Status MoeUnpermuteAddRows(TensorRef /*out*/, ConstRef /*y*/, ConstRef /*rows*/,
                                     int64_t /*n*/, int64_t /*width*/) {
    return ArchUnsupported("moe_experts");
  }
  virtual Status MoeScaleRows(TensorRef /*out*/, ConstRef /*in*/, ConstRef /*weight*/,
                              ConstRef /*slot*/, int64_t /*n*/, int64_t /*width*/) {
    return ArchUnsupported("moe_experts");
  }
  virtual Status MoeRowDots(TensorRef /*out*/, ConstRef /*a*/, ConstRef /*b*/, ConstRef /*slot*/,
                            int64_t /*n*/, int64_t /*width*/) {
    return ArchUnsupported("moe_experts");
  }
  // The shared expert's gate (model.moe_shared_gate): gate [n] (wide) = sigmoid(logit [n]), and
  // dlogit [n] (overwritten) = dgate gate (1 - gate).
  virtual Status MoeGateSigmoid(TensorRef /*gate*/, ConstRef /*logit*/, int64_t /*n*/) {
    return ArchUnsupported("moe_shared_gate");
  }
  virtual Status MoeGateSigmoidBackward(TensorRef /*dlogit*/, ConstRef /*gate*/, ConstRef /*dgate*/,
                                        int64_t /*n*/) {
    return ArchUnsupported("moe_shared_gate");
  }
  // ---- Squared ReLU (model.squared_relu; Nemotron-4's MLP): out [count] = relu(in)^2; the
  // backward writes din [count] = 2 relu(in) dout.
  virtual Status SquaredReluForward(TensorRef /*out*/, ConstRef /*in*/, int64_t /*count*/) {
    return ArchUnsupported("squared_relu");
  }
  virtual Status SquaredReluBackward(TensorRef /*din*/, ConstRef /*in*/, ConstRef /*dout*/,
                                     int64_t /*count*/) {
    return ArchUnsupported("squared_relu");
  }
  // ---- Rotary position embedding (model.rotary, its frequencies model.rotary_base and
  // model.rope_scaling) of the queries and keys of qkv [b S][...] in place, each row at its global
  // position (context parallelism's chunks included); `inverse` applies the transpose (the
  // backward, on the gradients). kernels/reference/ops.h RotaryEmbedding.
  virtual Status RotaryEmbedding(TensorRef /*qkv*/, const AttentionShape&, const RopeSpec& /*rope*/,
                                 bool /*inverse*/) {
    return ArchUnsupported("rotary");
  }
  // ---- QK norm (model.qk_norm; Qwen3's): an RMSNorm of each query and key head's head_dim
  // features of qkv [b S][...] in place, q_w for the queries and k_w for the keys (shared by
  // the heads). qk_in [b S][kv][group + 1][D] keeps the rows before the norm and rstd (wide)
  // [b S][kv][group + 1] their 1/rms; the backward turns dqkv's query and key gradients into
  // those before the norm in place and accumulates dq_w, dk_w (wide).
  // kernels/reference/ops.h QkNormForward.
  virtual Status QkNormForward(TensorRef /*qkv*/, TensorRef /*qk_in*/, TensorRef /*rstd*/,
                               ConstRef /*q_w*/, ConstRef /*k_w*/, const AttentionShape&,
                               double /*eps*/) {
    return ArchUnsupported("qk_norm");
  }
  virtual Status QkNormBackward(TensorRef /*dqkv*/, TensorRef /*dq_w*/, TensorRef /*dk_w*/,
                                ConstRef /*qk_in*/, ConstRef /*rstd*/, ConstRef /*q_w*/,
                                ConstRef /*k_w*/, const AttentionShape&) {
    return ArchUnsupported("qk_norm");
  }

  // ---- Linear: out[n][oc] = x[n][c] W[oc][c]^T (+ bias); with gelu_out, also gelu_out = GeLU(out)
  // (the bias-GeLU epilogue; out keeps the pre-activation for the backward).
  virtual Status LinearForward(TensorRef out, TensorRef gelu_out, ConstRef x, ConstRef w,
                               ConstRef bias, int64_t n, int64_t c, int64_t oc) = 0;
  // dx[n][c] = dout W (overwrites).
  virtual Status LinearBackwardData(TensorRef dx, ConstRef dout, ConstRef w, int64_t n, int64_t c,
                                    int64_t oc) = 0;
  // dW (wide main gradient) += dout^T x; dbias (wide, optional) += column sums of dout.
  virtual Status LinearBackwardWeight(TensorRef dw, TensorRef dbias, ConstRef dout, ConstRef x,
                                      int64_t n, int64_t c, int64_t oc) = 0;
  // dpre = GeLU'(pre) * dgelu (the backward of the bias-GeLU epilogue).
  virtual Status GeluBackward(TensorRef dpre, ConstRef pre, ConstRef dgelu, int64_t count) = 0;
  // dpre[n][c] = GeLU'(pre) * (dout W): LinearBackwardData and GeluBackward in one call (on CUDA,
  // cuBLASLt's dGeLU epilogue), for a backend whose FusesLinearGeluBackward(dtype) is true; the
  // layers call the two ops otherwise, so backends without it need nothing.
  virtual bool FusesLinearGeluBackward(DType) const { return false; }
  virtual Status LinearBackwardDataGelu(TensorRef /*dpre*/, ConstRef /*dout*/, ConstRef /*w*/,
                                        ConstRef /*pre*/, int64_t /*n*/, int64_t /*c*/,
                                        int64_t /*oc*/) {
    return Status::Internal(std::string(name()) + " ops: LinearBackwardDataGelu is not fused here");
  }

  // ---- out[n][c] = residual + dropout(x + bias). mask (u8 [n][c]) is written when drop.p > 0.
  virtual Status BiasDropoutResidual(TensorRef out, TensorRef mask, ConstRef x, ConstRef bias,
                                     ConstRef residual, int64_t n, int64_t c,
                                     const DropoutSpec& drop) = 0;
  // dx = dy * mask / (1 - p) (or dy without dropout); dbias (wide, optional) += column sums of dx.
  virtual Status DropoutBackward(TensorRef dx, TensorRef dbias, ConstRef dy, ConstRef mask,
                                 int64_t n, int64_t c, double p) = 0;
  // out = a + b (or out += b when out aliases a).
  virtual Status Add(TensorRef out, ConstRef a, ConstRef b) = 0;

  // ---- Attention: qkv [b s][a/t][3][D] -> out [b s][a/t D]; stash as AttentionStash says.
  virtual Status AttentionForward(TensorRef out, AttentionStash* stash, ConstRef qkv,
                                  const AttentionShape& shape, const DropoutSpec& drop) = 0;
  virtual Status AttentionBackward(TensorRef dqkv, ConstRef dout, ConstRef qkv,
                                   const AttentionStash& stash, const AttentionShape& shape,
                                   double p) = 0;

  // ---- Context-parallel attention (runtime/model/context_attention.cc; kernels/reference/ops.h
  // ContextAttentionForward). Tensors are [b S][a/t][parts][D] with S = shape.LocalSeq(); the
  // fused form only (lse [b][a/t][S] wide). Backends without them say so (the CUDA one, today).
  // kv = the keys and values of qkv; dkv written into the key and value slots of dqkv.
  virtual Status ContextKvPack(TensorRef /*kv*/, ConstRef /*qkv*/, const AttentionShape&) {
    return ContextUnsupported();
  }
  virtual Status ContextKvUnpack(TensorRef /*dqkv*/, ConstRef /*dkv*/, const AttentionShape&) {
    return ContextUnsupported();
  }
  // out and lse of the local queries against kv_all [cp][b S][a/t][2][D], every rank's pack.
  virtual Status ContextAttentionForward(TensorRef /*out*/, TensorRef /*lse*/, ConstRef /*qkv*/,
                                         ConstRef /*kv_all*/, const AttentionShape&,
                                         const DropoutSpec&) {
    return ContextUnsupported();
  }
  // Through rank src's keys and values: the query gradient ADDED to dqkv's query slots, dkv_src
  // overwritten with this rank's share of src's key and value gradients.
  virtual Status ContextAttentionBackward(TensorRef /*dqkv*/, TensorRef /*dkv_src*/,
                                          ConstRef /*dout*/, ConstRef /*out*/, ConstRef /*qkv*/,
                                          ConstRef /*kv_src*/, ConstRef /*lse*/,
                                          const AttentionShape&, int /*src*/, const DropoutSpec&) {
    return ContextUnsupported();
  }

  // ---- Embedding: out[b s][c] = wte rows of the tokens in [vocab_begin, vocab_end) (others 0)
  // + wpe[position] when wpe is given; backward accumulates into wide dwte, dwpe.
  virtual Status EmbeddingForward(TensorRef out, ConstRef tokens, ConstRef wte, ConstRef wpe,
                                  int64_t b, int64_t s, int64_t c, int64_t vocab_begin,
                                  int64_t vocab_end) = 0;
  virtual Status EmbeddingBackward(TensorRef dwte, TensorRef dwpe, ConstRef dout, ConstRef tokens,
                                   int64_t b, int64_t s, int64_t c, int64_t vocab_begin,
                                   int64_t vocab_end) = 0;
  // Dropout in place: x = x * mask / (1-p), writing the mask (u8).
  virtual Status Dropout(TensorRef x, TensorRef mask, const DropoutSpec& drop) = 0;

  // ---- Vocabulary-parallel cross-entropy (kernels/reference/ops.h): the logits are read once
  // forward (LocalStats) and once backward; the layer runs the max and sum all-reduces between
  // the steps. logits, row_max, row_sum, sums wide.
  // row_max [rows] := the local max over the shard's real columns (-inf when none); sums [2][rows]
  // := the row sums of exp(logit - local max) (0 when none), then the target's logit (0 outside
  // the shard).
  virtual Status CrossEntropyLocalStats(TensorRef row_max, TensorRef sums, ConstRef logits,
                                        ConstRef targets, const VocabShard& v) = 0;
  // Tensor groups of more than one rank, after the max all-reduce: sums[0][n] *= exp(local_max[n]
  // - global_max[n]) (a 0 sum stays 0), so the sums all-reduce adds terms of one global max.
  virtual Status CrossEntropyRescaleSums(TensorRef sums, ConstRef local_max, ConstRef global_max,
                                         const VocabShard& v) = 0;
  // After the all-reduce: row_sum = sums[0]; loss_sum (fp64 device scalar) += sum over rows of
  // log(row_sum) + row_max - target_logit. A row whose target is negative is left out of the loss
  // (and gets a zero gradient below): the positions a multi-token prediction depth has no target
  // for (runtime/model/mtp.h), as Megatron-Core's loss mask leaves them out.
  virtual Status CrossEntropyLoss(TensorRef row_sum, TensorRef loss_sum, ConstRef sums,
                                  ConstRef row_max, ConstRef targets, const VocabShard& v) = 0;
  // dlogits = (softmax - onehot) * dloss (one value for every token), 0 on padding and on the
  // rows whose target is negative.
  virtual Status CrossEntropyBackward(TensorRef dlogits, ConstRef logits, ConstRef row_max,
                                      ConstRef row_sum, ConstRef targets, double dloss,
                                      const VocabShard& v) = 0;

  // ---- Optimizer over the flat arenas (wide params, grads, m, v). compute_copy (optional, the
  // 16-bit weights the layers read) is refreshed with the rounded new parameters.
  virtual Status AdamW(TensorRef param, TensorRef compute_copy, ConstRef grad, TensorRef m,
                       TensorRef v, const AdamWHyper& h) = 0;
  // acc (fp64 device scalar) += sum of x^2.
  virtual Status SumSquares(TensorRef acc, ConstRef x) = 0;
  // The optimizer step over many tensors in one call: AdamW on each tensor in order, each with
  // h and its own weight_decay (h.weight_decay is not read), and acc += the sum of squares of
  // every x. These defaults loop over the single-tensor ops in the same order, so a backend
  // without a multi-tensor kernel (CpuOps) gives exactly the single-tensor results. A backend
  // whose FusesMultiTensor() is true runs each as one launch (CudaOps, docs/cuda.md).
  virtual bool FusesMultiTensor() const { return false; }
  virtual Status AdamWMany(std::span<const AdamWTensor> tensors, const AdamWHyper& h) {
    AdamWHyper each = h;
    for (const AdamWTensor& t : tensors) {
      each.weight_decay = t.weight_decay;
      PTDP_RETURN_IF_ERROR(AdamW(t.param, t.compute_copy, t.grad, t.m, t.v, each));
    }
    return Status::Ok();
  }
  virtual Status SumSquaresMany(TensorRef acc, std::span<const ConstRef> xs) {
    for (const ConstRef& x : xs) PTDP_RETURN_IF_ERROR(SumSquares(acc, x));
    return Status::Ok();
  }
  // x *= factor.
  virtual Status Scale(TensorRef x, double factor) = 0;
  // flag (fp64 device scalar) := 1 when x holds an inf or NaN (left as is otherwise).
  virtual Status FlagNonFinite(TensorRef flag, ConstRef x) = 0;
  // dst = src converted (rounded to nearest even when narrowing).
  virtual Status Cast(TensorRef dst, ConstRef src) = 0;
  // Every element := value (converted to dst's dtype).
  virtual Status Fill(TensorRef dst, double value) = 0;
  // out[i] = mean + stddev * NormalFromCounter(key, global_index(i)) where the global index of
  // local element i is ((i / cols) * global_cols + col0 + i % cols): a row block or column block
  // of a tensor (initialisation from the counter generator).
  virtual Status FillNormal(TensorRef out, uint64_t key, int64_t cols, int64_t global_cols,
                            int64_t col0, int64_t row0, double mean, double stddev) = 0;
};

}  // namespace ptdp::runtime
