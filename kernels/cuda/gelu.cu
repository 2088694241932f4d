// Fused bias + GeLU (tanh approximation): elementwise forward; backward computes the input
// gradient and reduces the bias gradient over rows in the same pass.
#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace ptdp::cuda_kernels {
namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

__device__ __forceinline__ float Gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluK * (x + kGeluA * x * x * x)));
}

__device__ __forceinline__ float GeluGrad(float x) {
  const float t = tanhf(kGeluK * (x + kGeluA * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluA * x * x);
}

template <typename T>
__global__ void BiasGeluFwd(T* out, const T* x, const T* bias, int64_t n, int64_t c) {
  const int64_t total = n * c;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = ToFloat(x[i]);
    if (bias != nullptr) v += ToFloat(bias[i % c]);
    out[i] = FromFloat<T>(Gelu(v));
  }
}

// Block (32 columns) x (8 row lanes), see ColumnGridRows.
template <typename T>
__global__ void BiasGeluBwdColumns(T* dx, float* dbias, const T* x, const T* bias, const T* dout,
                                   int64_t n, int64_t c) {
  __shared__ float partial[8][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.0f;
  if (col < c) {
    const float b = bias != nullptr ? ToFloat(bias[col]) : 0.0f;
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; r < n;
         r += static_cast<int64_t>(gridDim.y) * 8) {
      const int64_t i = r * c + col;
      const float g = GeluGrad(ToFloat(x[i]) + b) * ToFloat(dout[i]);
      dx[i] = FromFloat<T>(g);
      acc += g;
    }
  }
  if (dbias == nullptr) return;  // uniform over the block
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < c) {
    float t = 0.0f;
    for (int k = 0; k < 8; ++k) t += partial[k][threadIdx.x];
    atomicAdd(dbias + col, t);
  }
}

}  // namespace

template <typename T>
void BiasGeluForward(T* out, const T* x, const T* bias, int64_t n, int64_t c, cudaStream_t stream) {
  if (n * c == 0) return;
  BiasGeluFwd<T><<<GridFor(n * c, 256), 256, 0, stream>>>(out, x, bias, n, c);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void BiasGeluBackward(T* dx, float* dbias, const T* x, const T* bias, const T* dout, int64_t n,
                      int64_t c, cudaStream_t stream) {
  if (n * c == 0) return;
  const dim3 grid(static_cast<unsigned>((c + 31) / 32), ColumnGridRows(n));
  BiasGeluBwdColumns<T><<<grid, dim3(32, 8), 0, stream>>>(dx, dbias, x, bias, dout, n, c);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

#define PTDP_INSTANTIATE(T)                                                                     \
  template void BiasGeluForward<T>(T*, const T*, const T*, int64_t, int64_t, cudaStream_t);     \
  template void BiasGeluBackward<T>(T*, float*, const T*, const T*, const T*, int64_t, int64_t, \
                                    cudaStream_t);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(bf16)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda_kernels
