// Checks for CUDA runtime calls. PTDP_CUDA_CHECK is the hot-path form (an invariant: a failure is a
// device error the step cannot recover from, reported with the call, file:line and CUDA's own
// message through PTDP_CHECK_MSG). CudaStatus is the setup form that returns a Status.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/status.h"

#define PTDP_CUDA_CHECK(expr)                                                             \
  do {                                                                                    \
    const cudaError_t ptdp_cuda_err_ = (expr);                                            \
    if (ptdp_cuda_err_ != cudaSuccess) {                                                  \
      ::ptdp::CheckFailed(__FILE__, __LINE__, #expr, cudaGetErrorString(ptdp_cuda_err_)); \
    }                                                                                     \
  } while (0)

namespace ptdp::cuda_kernels {

// OK, or an Internal-style error naming `what` and CUDA's message.
inline Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorString(err));
}

// The number of CUDA devices, 0 when there is no device or no driver (never an error).
inline int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

}  // namespace ptdp::cuda_kernels
