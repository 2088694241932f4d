// CpuOps: the Ops of the CPU backend, composed from kernels/reference (Eigen GEMMs). fp32 and fp64
// (finite-difference tests) run the reference kernels directly; bf16 and fp16 tensors (16-bit
// bit patterns) are widened to fp32 on entry and every output is rounded once to its dtype, the
// rounding points of a GPU (docs/runtime.md "Precision"). Host-side scratch used inside an op
// (widened copies, expanded masks) is the backend's own business, like a kernel's registers.
#pragma once

#include "runtime/backend/ops.h"

namespace ptdp::runtime {

class CpuOps : public Ops {
 public:
  const char* name() const override { return "cpu"; }
  Status LayerNormForward(TensorRef out, TensorRef mean, TensorRef rstd, ConstRef x, ConstRef w,
                          ConstRef b, int64_t n, int64_t c, double weight_offset) override;
  Status LayerNormBackward(TensorRef dx, TensorRef dw, TensorRef db, ConstRef dout, ConstRef x,
                           ConstRef w, ConstRef mean, ConstRef rstd, int64_t n, int64_t c,
                           bool accumulate_dx, double weight_offset) override;
  Status RmsNormForward(TensorRef out, TensorRef rstd, ConstRef x, ConstRef w, int64_t n, int64_t c,
                        double eps) override;
  Status RmsNormBackward(TensorRef dx, TensorRef dw, ConstRef dout, ConstRef x, ConstRef w,
                         ConstRef rstd, int64_t n, int64_t c) override;
  Status MoeRouterTopK(TensorRef probs, TensorRef index, ConstRef logits, int64_t n,
                       const MoeRouting& routing) override;
  Status MoeRouterTopKBackward(TensorRef dlogits, ConstRef dprobs, ConstRef probs, ConstRef index,
                               ConstRef logits, int64_t n, const MoeRouting& routing) override;
  Status MoeZLossBackward(TensorRef dlogits, TensorRef sum_sq, ConstRef logits, double scale,
                          int64_t n, int64_t experts) override;
  Status MoeAuxLossBackward(TensorRef dlogits, ConstRef logits, ConstRef counts, double scale,
                            int64_t n, int64_t experts, const MoeAuxGrouping& grouping) override;
  Status MoeRouterProbSums(TensorRef out, ConstRef logits, int64_t n, int64_t experts,
                           const MoeAuxGrouping& grouping) override;
  Status MoePermuteRows(TensorRef out, ConstRef x, ConstRef rows, int64_t n,
                        int64_t width) override;
  Status MoeUnpermuteAddRows(TensorRef out, ConstRef y, ConstRef rows, int64_t n,
                             int64_t width) override;
  Status MoeScaleRows(TensorRef out, ConstRef in, ConstRef weight, ConstRef slot, int64_t n,
                      int64_t width) override;
  Status MoeRowDots(TensorRef out, ConstRef a, ConstRef b, ConstRef slot, int64_t n,
                    int64_t width) override;
  Status MoeGateSigmoid(TensorRef gate, ConstRef logit, int64_t n) override;
  Status MoeGateSigmoidBackward(TensorRef dlogit, ConstRef gate, ConstRef dgate,
                                int64_t n) override;
  Status SwigluForward(TensorRef out, ConstRef in, int64_t count) override;
  Status SwigluBackward(TensorRef din, ConstRef in, ConstRef dout, int64_t count) override;
  Status SquaredReluForward(TensorRef out, ConstRef in, int64_t count) override;
  Status SquaredReluBackward(TensorRef din, ConstRef in, ConstRef dout, int64_t count) override;
  Status RotaryEmbedding(TensorRef qkv, const AttentionShape& a, const RopeSpec& rope,
                         bool inverse) override;
  Status QkNormForward(TensorRef qkv, TensorRef qk_in, TensorRef rstd, ConstRef q_w, ConstRef k_w,
                       const AttentionShape& a, double eps) override;
  Status QkNormBackward(TensorRef dqkv, TensorRef dq_w, TensorRef dk_w, ConstRef qk_in,
                        ConstRef rstd, ConstRef q_w, ConstRef k_w,
                        const AttentionShape& a) override;
  Status LinearForward(TensorRef out, TensorRef gelu_out, ConstRef x, ConstRef w, ConstRef bias,
                       int64_t n, int64_t c, int64_t oc) override;
  Status LinearBackwardData(TensorRef dx, ConstRef dout, ConstRef w, int64_t n, int64_t c,
                            int64_t oc) override;
  Status LinearBackwardWeight(TensorRef dw, TensorRef dbias, ConstRef dout, ConstRef x, int64_t n,
                              int64_t c, int64_t oc) override;
  Status GeluBackward(TensorRef dpre, ConstRef pre, ConstRef dgelu, int64_t count) override;
  Status BiasDropoutResidual(TensorRef out, TensorRef mask, ConstRef x, ConstRef bias,
                             ConstRef residual, int64_t n, int64_t c,
                             const DropoutSpec& drop) override;
  Status DropoutBackward(TensorRef dx, TensorRef dbias, ConstRef dy, ConstRef mask, int64_t n,
                         int64_t c, double p) override;
  Status Add(TensorRef out, ConstRef a, ConstRef b) override;
  Status AttentionForward(TensorRef out, AttentionStash* stash, ConstRef qkv,
                          const AttentionShape& shape, const DropoutSpec& drop) override;
  Status AttentionBackward(TensorRef dqkv, ConstRef dout, ConstRef qkv, const AttentionStash& stash,
                           const AttentionShape& shape, double p) override;
  Status ContextKvPack(TensorRef kv, ConstRef qkv, const AttentionShape& a) override;
  Status ContextKvUnpack(TensorRef dqkv, ConstRef dkv, const AttentionShape& a) override;
  Status ContextAttentionForward(TensorRef out, TensorRef lse, ConstRef qkv, ConstRef kv_all,
                                 const AttentionShape& a, const DropoutSpec& drop) override;
  Status ContextAttentionBackward(TensorRef dqkv, TensorRef dkv_src, ConstRef dout, ConstRef out,
                                  ConstRef qkv, ConstRef kv_src, ConstRef lse,
                                  const AttentionShape& a, int src,
                                  const DropoutSpec& drop) override;
  Status EmbeddingForward(TensorRef out, ConstRef tokens, ConstRef wte, ConstRef wpe, int64_t b,
                          int64_t s, int64_t c, int64_t vocab_begin, int64_t vocab_end) override;
  Status EmbeddingBackward(TensorRef dwte, TensorRef dwpe, ConstRef dout, ConstRef tokens,
                           int64_t b, int64_t s, int64_t c, int64_t vocab_begin,
                           int64_t vocab_end) override;
  Status Dropout(TensorRef x, TensorRef mask, const DropoutSpec& drop) override;
  Status CrossEntropyLocalStats(TensorRef row_max, TensorRef sums, ConstRef logits,
                                ConstRef targets, const VocabShard& v) override;
  Status CrossEntropyRescaleSums(TensorRef sums, ConstRef local_max, ConstRef global_max,
                                 const VocabShard& v) override;
  Status CrossEntropyLoss(TensorRef row_sum, TensorRef loss_sum, ConstRef sums, ConstRef row_max,
                          ConstRef targets, const VocabShard& v) override;
  Status CrossEntropyBackward(TensorRef dlogits, ConstRef logits, ConstRef row_max,
                              ConstRef row_sum, ConstRef targets, double dloss,
                              const VocabShard& v) override;
  Status AdamW(TensorRef param, TensorRef compute_copy, ConstRef grad, TensorRef m, TensorRef v,
               const AdamWHyper& h) override;
  Status SumSquares(TensorRef acc, ConstRef x) override;
  Status Scale(TensorRef x, double factor) override;
  Status FlagNonFinite(TensorRef flag, ConstRef x) override;
  Status Cast(TensorRef dst, ConstRef src) override;
  Status Fill(TensorRef dst, double value) override;
  Status FillNormal(TensorRef out, uint64_t key, int64_t cols, int64_t global_cols, int64_t col0,
                    int64_t row0, double mean, double stddev) override;
};

}  // namespace ptdp::runtime
