// CudaOps: the Ops (runtime/backend/ops.h) of the CUDA backend, composed from kernels/cuda, the
// cuBLASLt GEMMs of kernels/cublas (bf16), cuBLAS SGEMM (fp32) and the few kernels of
// runtime/cuda/ops_kernels.h. Every call enqueues on the device's compute stream and returns at
// once; launch and library errors come back as Status (the kernels/cuda and kernels/cublas
// invariant checks, which throw, are caught at this seam).
//
// Dtypes: fp32 and bf16 compute; fp16 compute and fp64 return kNotImplemented naming the dtype
// (kernels/cuda has no fp16 GEMM or attention). Rounding points follow CpuOps: fp32 arithmetic,
// one rounding per output; GEMMs accumulate in fp32 (cuBLAS's order, not Eigen's).
//
// The attention stash differs from the CPU's (docs/cuda.md "Attention stash"): CudaOps writes
// the per-row log-sum-exp (fp32 [b][a/t][s]) into the first bytes of stash.probs, writes
// stash.mask (so the layer's mask exists as on the CPU) but never stash.dropped, and the backward
// reads the forward's output from stash.out. The fused kernel regenerates the dropout from the
// counter generator.
//
// Attention in bf16 runs cuDNN's fused SDPA on tensor cores (cudnn_attention.h) when the build has
// cuDNN and cuDNN takes the shape; kernels/cuda's attention is the reference, runs fp32, and
// takes over (with one line on stderr, once per process) when cuDNN is missing or refuses. With
// attention dropout, cuDNN draws its own masks (docs/cuda.md "Attention on tensor cores"). The
// environment variable PTDP_ATTENTION=reference|cudnn (read by Create; default cudnn) or
// set_attention_path picks the path.
//
// Scratch (attention backward workspace, fp32 temporaries) is one stream-ordered buffer grown
// with cudaMallocAsync; it is outside the Device's per-tag accounting.
// Thread-safety: one thread at a time, like the CudaDevice that owns it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>

#include "kernels/cublas/gemm.h"
#include "runtime/backend/ops.h"

namespace ptdp::runtime::cuda {

class CudnnAttention;
struct MultiTensorTables;  // multi_tensor_table.h

// Which attention bf16 runs: cuDNN's (kernels/cuda where cuDNN refuses) or kernels/cuda's always.
enum class AttentionPath { kCudnn, kReference };

class CudaOps final : public Ops {
 public:
  // Ops on `stream` (the CudaDevice's compute stream, which outlives this object).
  static Result<std::unique_ptr<CudaOps>> Create(cudaStream_t stream);
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  const char* name() const override { return "cuda"; }
  void set_attention_path(AttentionPath p) { attention_path_ = p; }
  AttentionPath attention_path() const { return attention_path_; }
  // bf16 GeLU in cuBLASLt's epilogues (default): LinearForward's GELU_AUX_BIAS, and the fused
  // LinearBackwardDataGelu's DGELU; off: a GEMM and a packed GeLU pass each. Tests run both.
  void set_gelu_epilogue(bool on) { gelu_epilogue_ = on; }
  // AdamWMany and SumSquaresMany as one launch each over device tables cached while the tensors
  // are unchanged (default); off: Ops' loop over the single-tensor kernels. PTDP_MULTI_TENSOR=0
  // turns it off (the GPU script's op table measures both).
  void set_multi_tensor(bool on) { multi_tensor_ = on; }
  // Uploads of the AdamW and sum-of-squares tables so far (tests: the cache holds and
  // invalidates).
  int64_t multi_tensor_uploads() const;
  // Whether the latest attention call (forward or backward) ran cuDNN; for tests and the profile.
  bool last_attention_used_cudnn() const { return last_attention_cudnn_; }
  Status LayerNormForward(TensorRef out, TensorRef mean, TensorRef rstd, ConstRef x, ConstRef w,
                          ConstRef b, int64_t n, int64_t c, double weight_offset) override;
  Status LayerNormBackward(TensorRef dx, TensorRef dw, TensorRef db, ConstRef dout, ConstRef x,
                           ConstRef w, ConstRef mean, ConstRef rstd, int64_t n, int64_t c,
                           bool accumulate_dx, double weight_offset) override;
  Status LinearForward(TensorRef out, TensorRef gelu_out, ConstRef x, ConstRef w, ConstRef bias,
                       int64_t n, int64_t c, int64_t oc) override;
  Status LinearBackwardData(TensorRef dx, ConstRef dout, ConstRef w, int64_t n, int64_t c,
                            int64_t oc) override;
  Status LinearBackwardWeight(TensorRef dw, TensorRef dbias, ConstRef dout, ConstRef x, int64_t n,
                              int64_t c, int64_t oc) override;
  Status GeluBackward(TensorRef dpre, ConstRef pre, ConstRef dgelu, int64_t count) override;
  // Llama-style layers (cuda_ops_llama.cc; kernels/cuda/llama.cu).
  Status RmsNormForward(TensorRef out, TensorRef rstd, ConstRef x, ConstRef w, int64_t n, int64_t c,
                        double eps) override;
  Status RmsNormBackward(TensorRef dx, TensorRef dw, ConstRef dout, ConstRef x, ConstRef w,
                         ConstRef rstd, int64_t n, int64_t c) override;
  Status SwigluForward(TensorRef out, ConstRef in, int64_t count) override;
  Status SwigluBackward(TensorRef din, ConstRef in, ConstRef dout, int64_t count) override;
  Status SquaredReluForward(TensorRef out, ConstRef in, int64_t count) override;
  Status SquaredReluBackward(TensorRef din, ConstRef in, ConstRef dout, int64_t count) override;
  // Mixture of experts (cuda_ops_moe.cc): the router's tensors fp32, the rows fp32 or bf16.
  Status MoeRouterTopK(TensorRef probs, TensorRef index, ConstRef logits, int64_t n,
                       const MoeRouting& routing) override;
  Status MoeRouterTopKBackward(TensorRef dlogits, ConstRef dprobs, ConstRef probs, ConstRef index,
                               ConstRef logits, int64_t n, const MoeRouting& routing) override;
  Status MoeAuxLossBackward(TensorRef dlogits, ConstRef logits, ConstRef counts, double scale,
                            int64_t n, int64_t experts, const MoeAuxGrouping& grouping) override;
  Status MoeZLossBackward(TensorRef dlogits, TensorRef sum_sq, ConstRef logits, double scale,
                          int64_t n, int64_t experts) override;
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
  Status RotaryEmbedding(TensorRef qkv, const AttentionShape& a, const RopeSpec& rope,
                         bool inverse) override;
  Status QkNormForward(TensorRef qkv, TensorRef qk_in, TensorRef rstd, ConstRef q_w, ConstRef k_w,
                       const AttentionShape& a, double eps) override;
  Status QkNormBackward(TensorRef dqkv, TensorRef dq_w, TensorRef dk_w, ConstRef qk_in,
                        ConstRef rstd, ConstRef q_w, ConstRef k_w,
                        const AttentionShape& a) override;
  bool FusesLinearGeluBackward(DType t) const override {
    return t == DType::kBf16 && gelu_epilogue_;
  }
  Status LinearBackwardDataGelu(TensorRef dpre, ConstRef dout, ConstRef w, ConstRef pre, int64_t n,
                                int64_t c, int64_t oc) override;
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
  bool FusesMultiTensor() const override { return multi_tensor_; }
  Status AdamWMany(std::span<const AdamWTensor> tensors, const AdamWHyper& h) override;
  Status SumSquaresMany(TensorRef acc, std::span<const ConstRef> xs) override;
  Status Scale(TensorRef x, double factor) override;
  Status FlagNonFinite(TensorRef flag, ConstRef x) override;
  Status Cast(TensorRef dst, ConstRef src) override;
  Status Fill(TensorRef dst, double value) override;
  Status FillNormal(TensorRef out, uint64_t key, int64_t cols, int64_t global_cols, int64_t col0,
                    int64_t row0, double mean, double stddev) override;

 private:
  explicit CudaOps(cudaStream_t stream);
  // At least `bytes` of stream-ordered device scratch (valid until the next call).
  Result<void*> Scratch(int64_t bytes);
  // The same, a second buffer: grouped-query attention's multi-head copies (AttentionForward,
  // AttentionBackward), which live across the attention kernels' own Scratch.
  Result<void*> GroupScratch(int64_t bytes);
  // out = x W^T (+ bias) for fp32 tensors (cuBLAS SGEMM, no TF32).
  Status SgemmForward(float* out, const float* x, const float* w, const float* bias, int64_t n,
                      int64_t c, int64_t oc);
  // True when cuDNN runs this attention call (bf16, path kCudnn, cuDNN built, started and taking
  // the shape); false: kernels/cuda runs it. Forward and backward of one shape decide alike.
  Result<bool> UseCudnn(DType t, const AttentionShape& a, double p);

  cudaStream_t stream_;
  std::unique_ptr<cublas::LtGemm> lt_;
  cublasHandle_t blas_ = nullptr;
  void* scratch_ = nullptr;
  int64_t scratch_bytes_ = 0;
  void* group_scratch_ = nullptr;
  int64_t group_scratch_bytes_ = 0;
  AttentionPath attention_path_ = AttentionPath::kCudnn;
  bool layernorm_packs_ = true;  // runtime/cuda/layernorm_kernels.h when they apply
  bool gemm_tune_ = true;        // kernels/cublas times its candidates per shape
  bool gelu_epilogue_ = true;    // LinearForward's GeLU in the GEMM epilogue
  bool multi_tensor_ = true;     // AdamWMany, SumSquaresMany in one launch each
  std::unique_ptr<MultiTensorTables> multi_;
  std::unique_ptr<CudnnAttention> cudnn_;  // started at the first bf16 attention
  bool cudnn_tried_ = false;
  bool last_attention_cudnn_ = false;
};

}  // namespace ptdp::runtime::cuda
