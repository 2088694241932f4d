// GEMMs through cuBLASLt: bf16 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F), bf16 or fp32
// output, an optional bias epilogue, and one workspace owned by the context.
//
// The row-major nn.Linear helpers map onto column-major cuBLAS by reading a row-major [R][C]
// matrix as a column-major C x R one:
//   LinearForward        out[N][OC] = x[N][C] W[OC][C]^T (+ bias)   (m = OC, n = N, k = C)
//   LinearBackwardData   dx[N][C]  (+)= dout[N][OC] W[OC][C]        (m = C,  n = N, k = OC)
//   LinearBackwardWeight dw[OC][C]  += dout^T x, fp32 main grads     (m = C,  n = OC, k = N)
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
  // OutT is float or bf16.
  template <typename OutT>
  void Matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const bf16* a, int64_t lda, const bf16* b, int64_t ldb, float beta, OutT* d,
              int64_t ldd, const OutT* bias, cudaStream_t stream);

  template <typename OutT>
  void LinearForward(OutT* out, const bf16* x, const bf16* w, const OutT* bias, int64_t n,
                     int64_t c, int64_t oc, cudaStream_t stream);
  void LinearBackwardData(bf16* dx, const bf16* dout, const bf16* w, int64_t n, int64_t c,
                          int64_t oc, bool accumulate, cudaStream_t stream);
  void LinearBackwardWeight(float* dw, const bf16* dout, const bf16* x, int64_t n, int64_t c,
                            int64_t oc, cudaStream_t stream);

  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  struct Plan;
  // (trans_a, trans_b, m, n, k, lda, ldb, ldd, out type, bias, alignment of a|b|d in bytes).
  using PlanKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int,
                             bool, uint32_t, uint32_t, uint32_t>;

  LtGemm() = default;
  // The cached plan for `key`, made on first use (bias: the pointer the heuristic sees).
  const Plan& GetPlan(const PlanKey& key, const void* bias);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
};

}  // namespace ptdp::cublas
