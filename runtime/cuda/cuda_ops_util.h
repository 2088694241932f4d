// Helpers shared by the CudaOps sources (cuda_ops.cc, cuda_ops_step.cc): typed views of the
// Ops tensors, dtype dispatch, and the seam where kernels/cuda's throwing invariant checks become
// Status. Internal to runtime/cuda.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

#include "runtime/backend/ops.h"
#include "runtime/cuda/check.h"

namespace ptdp::runtime::cuda::detail {
using bf16 = __nv_bfloat16;
using fp16 = __half;

#define PTDP_BLAS_RETURN(expr)                                                           \
  do {                                                                                   \
    const cublasStatus_t _ptdp_st = (expr);                                              \
    if (_ptdp_st != CUBLAS_STATUS_SUCCESS)                                               \
      return Status::Internal(std::string(__FILE__) +                                    \
                              ": " #expr " failed: " + cublasGetStatusString(_ptdp_st)); \
  } while (0)

// Runs f (which enqueues kernels/cuda or kernels/cublas work whose invariant checks throw) and
// turns a thrown check or a pending launch error into a Status.
template <typename F>
inline Status Guarded(F&& f) {
  try {
    PTDP_RETURN_IF_ERROR(f());
  } catch (const InternalError& e) {
    return Status::Internal(std::string("cuda ops: ") + e.what());
  }
  PTDP_CUDA_RETURN(cudaGetLastError());
  return Status::Ok();
}

inline Status NotImplemented(const char* op, DType t) {
  return Status::Invalid(std::string("cuda ops: ") + op + " in " + DTypeName(t) +
                         " is not implemented (kernels/cuda has fp32 and bf16)");
}

// Runs f(T{}) with T float for fp32 and bf16 for bf16 compute tensors.
template <typename F>
inline Status ForCompute(DType t, const char* op, F&& f) {
  if (t == DType::kFp32) return Guarded([&] { return f(float{}); });
  if (t == DType::kBf16) return Guarded([&] { return f(bf16{}); });
  return NotImplemented(op, t);
}

template <typename T>
constexpr DType DTypeOf() {
  if constexpr (std::is_same_v<T, float>) return DType::kFp32;
  if constexpr (std::is_same_v<T, bf16>) return DType::kBf16;
  if constexpr (std::is_same_v<T, fp16>) return DType::kFp16;
  if constexpr (std::is_same_v<T, double>) return DType::kFp64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kI32;
  return DType::kU8;
}

// Typed pointers (nullptr for an empty view); a non-empty view of another dtype is a caller bug.
template <typename T>
T* P(TensorRef r) {
  PTDP_CHECK_MSG(r.empty() || r.dtype == DTypeOf<T>(),
                 std::string("cuda ops: a tensor of ") + DTypeName(r.dtype) + " where " +
                     DTypeName(DTypeOf<T>()) + " was expected");
  return static_cast<T*>(r.data);
}
template <typename T>
const T* P(ConstRef r) {
  PTDP_CHECK_MSG(r.empty() || r.dtype == DTypeOf<T>(),
                 std::string("cuda ops: a tensor of ") + DTypeName(r.dtype) + " where " +
                     DTypeName(DTypeOf<T>()) + " was expected");
  return static_cast<const T*>(r.data);
}

// Runs f(T{}) for any floating dtype the fills and reductions take.
template <typename F>
inline Status ForFloat(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::kFp32:
      return Guarded([&] { return f(float{}); });
    case DType::kBf16:
      return Guarded([&] { return f(bf16{}); });
    case DType::kFp16:
      return Guarded([&] { return f(fp16{}); });
    case DType::kFp64:
      return Guarded([&] { return f(double{}); });
    default:
      return NotImplemented(op, t);
  }
}

}  // namespace ptdp::runtime::cuda::detail
