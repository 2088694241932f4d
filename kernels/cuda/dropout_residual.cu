// Fused bias + dropout + residual add. The mask is never stored: the backward redraws it from
// the counter generator (kernels/reference/counter_rng.h), the same numbers the reference draws.
#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/reference/counter_rng.h"

namespace ptdp::cuda_kernels {
namespace {

// The dropout factor of element i: 0 or 1/(1-p) (1 when p == 0).
__device__ __forceinline__ float DropoutFactor(const DropoutSpec& d, float keep_scale, int64_t i) {
  if (d.p <= 0.0f) return 1.0f;
  return kernels::rng::DropoutKeeps(d.key, d.first_index + static_cast<uint64_t>(i), d.p)
             ? keep_scale
             : 0.0f;
}

template <typename T>
__global__ void BiasDropoutResidualFwd(T* out, const T* x, const T* bias, const T* residual,
                                       int64_t n, int64_t c, DropoutSpec d, float keep_scale) {
  const int64_t total = n * c;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = ToFloat(x[i]);
    if (bias != nullptr) v += ToFloat(bias[i % c]);
    out[i] = FromFloat<T>(ToFloat(residual[i]) + v * DropoutFactor(d, keep_scale, i));
  }
}

// Block (32 columns) x (8 row lanes), see ColumnGridRows.
template <typename T>
__global__ void BiasDropoutResidualBwdColumns(T* dx, float* dbias, const T* dout, int64_t n,
                                              int64_t c, DropoutSpec d, float keep_scale) {
  __shared__ float partial[8][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.0f;
  if (col < c) {
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; r < n;
         r += static_cast<int64_t>(gridDim.y) * 8) {
      const int64_t i = r * c + col;
      const float g = ToFloat(dout[i]) * DropoutFactor(d, keep_scale, i);
      dx[i] = FromFloat<T>(g);
      acc += g;
    }
  }
  if (dbias == nullptr) return;
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < c) {
    float t = 0.0f;
    for (int k = 0; k < 8; ++k) t += partial[k][threadIdx.x];
    atomicAdd(dbias + col, t);
  }
}

float KeepScale(const DropoutSpec& d) {
  return d.p > 0.0f ? static_cast<float>(1.0 / (1.0 - static_cast<double>(d.p))) : 1.0f;
}

}  // namespace

template <typename T>
void BiasDropoutResidualForward(T* out, const T* x, const T* bias, const T* residual, int64_t n,
                                int64_t c, DropoutSpec dropout, cudaStream_t stream) {
  if (n * c == 0) return;
  BiasDropoutResidualFwd<T><<<GridFor(n * c, 256), 256, 0, stream>>>(out, x, bias, residual, n, c,
                                                                     dropout, KeepScale(dropout));
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void BiasDropoutResidualBackward(T* dx, float* dbias, const T* dout, int64_t n, int64_t c,
                                 DropoutSpec dropout, cudaStream_t stream) {
  if (n * c == 0) return;
  const dim3 grid(static_cast<unsigned>((c + 31) / 32), ColumnGridRows(n));
  BiasDropoutResidualBwdColumns<T>
      <<<grid, dim3(32, 8), 0, stream>>>(dx, dbias, dout, n, c, dropout, KeepScale(dropout));
  PTDP_CUDA_CHECK(cudaGetLastError());
}

#define PTDP_INSTANTIATE(T)                                                                       \
  template void BiasDropoutResidualForward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, \
                                              DropoutSpec, cudaStream_t);                         \
  template void BiasDropoutResidualBackward<T>(T*, float*, const T*, int64_t, int64_t,            \
                                               DropoutSpec, cudaStream_t);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(bf16)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda_kernels
