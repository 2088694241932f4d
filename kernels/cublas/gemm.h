// GEMMs through cuBLASLt: bf16 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F), bf16 or fp32
// output, an optional bias epilogue, and one workspace owned by the context.
//
// The row-major nn.Linear helpers map onto column-major cuBLAS by reading a row-major [R][C]
// matrix as a column-major C x R one:
//   LinearForward        out[N][OC] = x[N][C] W[OC][C]^T (+ bias)   (m = OC, n = N, k = C)
//   LinearBackwardData   dx[N][C]  (+)= dout[N][OC] W[OC][C]        (m = C,  n = N, k = OC)
//   LinearBackwardWeight dw[OC][C]  += dout^T x, fp32 main grads     (m = C,  n = OC, k = N)
//
// Algorithm choice: cuBLASLt's heuristic ranks up to kCandidates algorithms per shape; the first
// call of each shape times every candidate on its own operands (kTuneRounds rounds over all of
// them after a warm-up) and keeps the first pick unless another is kTuneMargin faster
// (kernels/cublas/tune_pick.h). Why: on an H200 the heuristic's first pick for the weight gradient
// of gpt-1.3b's fc1 and QKV GEMMs ran at ~550 TFLOP/s while the same FLOPs in the fc2 layout ran
// at ~740, and its picks for the GeLU epilogues were 8-10% slower than a timed one (docs/cuda.md).
// A call that accumulates (beta != 0) has its output saved first and restored after the timing
// runs, so tuning never changes a result's inputs. set_tuning(false) keeps the heuristic's first
// pick (CudaOps: PTDP_GEMM_TUNE=0).
//
// Thread safety: an LtGemm is used from one host thread at a time (it caches a plan per shape).
// The workspace is shared by every GEMM of the context, so GEMMs of one context must be ordered
// (one stream, or streams ordered by events).
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/status.h"

namespace ptdp::cublas {

using bf16 = __nv_bfloat16;

class LtGemm {
 public:
  // A context with `workspace_bytes` of device workspace (32 MiB is cuBLAS's advice for Hopper).
  static Result<std::unique_ptr<LtGemm>> Create(size_t workspace_bytes = size_t{32} << 20);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Column-major: D[m][n] (leading dim ldd) = alpha op(A) op(B) + beta D, op(A) m x k, op(B)
  // k x n; bias (nullable) has m elements of D's type and is added to every column.
  // OutT is float or bf16. GeLU epilogues (aux: the pre-activation, OutT, leading dimension ldd,
  // which must be a multiple of 8, 16-byte aligned):
  //   kGeluAux  D = GeLU(product + bias), aux := product + bias (GeLU of the fp32 sum)
  //   kDGelu    D = product * GeLU'(aux) (the product in fp32, rounded once)
  enum class Epilogue { kNone, kGeluAux, kDGelu };
  template <typename OutT>
  void Matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const bf16* a, int64_t lda, const bf16* b, int64_t ldb, float beta, OutT* d,
              int64_t ldd, const OutT* bias, cudaStream_t stream,
              Epilogue epilogue = Epilogue::kNone, const void* aux = nullptr);

  template <typename OutT>
  void LinearForward(OutT* out, const bf16* x, const bf16* w, const OutT* bias, int64_t n,
                     int64_t c, int64_t oc, cudaStream_t stream);
  // pre = x W^T + bias and gelu_out = GeLU(pre) in one GEMM (the GELU_AUX_BIAS epilogue; the
  // conditions of Matmul's gelu_pre: oc % 8 == 0, pre 16-byte aligned).
  void LinearForwardGelu(bf16* gelu_out, bf16* pre, const bf16* x, const bf16* w, const bf16* bias,
                         int64_t n, int64_t c, int64_t oc, cudaStream_t stream);
  void LinearBackwardData(bf16* dx, const bf16* dout, const bf16* w, int64_t n, int64_t c,
                          int64_t oc, bool accumulate, cudaStream_t stream);
  // dpre = (dout W) * GeLU'(pre) in one GEMM (the DGELU epilogue; c % 8 == 0, pre aligned).
  void LinearBackwardDataGelu(bf16* dpre, const bf16* dout, const bf16* w, const bf16* pre,
                              int64_t n, int64_t c, int64_t oc, cudaStream_t stream);
  void LinearBackwardWeight(float* dw, const bf16* dout, const bf16* x, int64_t n, int64_t c,
                            int64_t oc, cudaStream_t stream);

  size_t workspace_bytes() const { return workspace_bytes_; }
  bool tuning() const { return tune_; }
  void set_tuning(bool on) { tune_ = on; }

  static constexpr int kCandidates = 8;
  static constexpr int kTuneWarmRuns = 5;      // runs of the first pick before any timing
  static constexpr int kTuneRounds = 3;        // rounds over every candidate (tune_pick.h)
  static constexpr int kTuneRuns = 2;          // runs per candidate per round
  static constexpr double kTuneMargin = 0.02;  // another candidate must beat the first by 2%

 private:
  struct Plan;
  // (trans_a, trans_b, m, n, k, lda, ldb, ldd, out type, bias, alignment of a|b|d in bytes,
  // GeLU epilogue).
  using PlanKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int,
                             bool, uint32_t, uint32_t, uint32_t, Epilogue>;

  LtGemm() = default;
  // The cached plan for `key`, made on first use (bias, gelu_pre: the pointers the heuristic sees).
  Plan& GetPlan(const PlanKey& key, const void* bias, const void* aux);
  // Times plan.candidates on these operands, sets plan.algo to the fastest, clears candidates.
  void Tune(Plan& plan, const void* alpha, const void* a, const void* b, const void* beta, void* d,
            size_t d_bytes, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool tune_ = true;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
};

}  // namespace ptdp::cublas
