// CudaOps' LayerNorm on 16-byte packs (layernorm_kernels.cu, bodies in layernorm_packs.h). They
// apply when c is a multiple of the pack width (8 bf16/fp16, 4 fp32) and every row pointer is
// 16-byte aligned (LayerNormPacksApply); otherwise CudaOps calls kernels/cuda's scalar kernels.
// Each function enqueues on `stream` and returns cudaGetLastError() (cudaErrorInvalidValue when
// the packs do not apply). T is float or __nv_bfloat16.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ptdp::runtime::cuda::opk {

template <typename T>
bool LayerNormPacksApply(int64_t c, const void* a, const void* b, const void* d, const void* e);
// out = (x - mean) rstd (weight + weight_offset) + bias; mean[n], rstd[n] saved for the
// backward (weight_offset 1: LayerNorm1P).
template <typename T>
cudaError_t LayerNormForwardPacks(T* out, float* mean, float* rstd, const T* x, const T* weight,
                                  const T* bias, int64_t n, int64_t c, cudaStream_t stream,
                                  float weight_offset = 0.0f);
// dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dout (weight + weight_offset) (overwrites
// dx); dweight += sum_rows dout xhat, dbias += sum_rows dout.
template <typename T>
cudaError_t LayerNormBackwardPacks(T* dx, float* dweight, float* dbias, const T* dout, const T* x,
                                   const T* weight, const float* mean, const float* rstd, int64_t n,
                                   int64_t c, cudaStream_t stream, float weight_offset = 0.0f);

}  // namespace ptdp::runtime::cuda::opk
