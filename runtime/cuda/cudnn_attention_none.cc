// CudnnAttention in a build without cuDNN or the cudnn-frontend headers (cmake/CudnnFrontend.cmake
// said why at configure time): Create fails, so CudaOps runs kernels/cuda's attention.
#include "runtime/cuda/cudnn_attention.h"

namespace ptdp::runtime::cuda {

struct CudnnAttention::Impl {};

bool CudnnAttentionBuilt() {
  return false;
}

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnAttention::~CudnnAttention() = default;

Result<std::unique_ptr<CudnnAttention>> CudnnAttention::Create(cudaStream_t) {
  return Status::NotFound("this build has no cuDNN (see the cuDNN attention line of CMake)");
}

Result<bool> CudnnAttention::Supports(const AttentionShape&, double, std::string*) {
  return false;
}

Status CudnnAttention::Forward(__nv_bfloat16*, float*, const __nv_bfloat16*, const AttentionShape&,
                               double, uint64_t, const ScratchFn&) {
  return Status::Internal("cudnn attention: not built");
}

Status CudnnAttention::Backward(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,
                                const __nv_bfloat16*, const float*, const AttentionShape&, double,
                                uint64_t, const ScratchFn&) {
  return Status::Internal("cudnn attention: not built");
}

}  // namespace ptdp::runtime::cuda
