// Elementwise kernels: casts between fp32 and the 16-bit types, add, accumulate, scale.
#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace ptdp::cuda_kernels {
namespace {

template <typename To, typename From>
__global__ void CastFlat(To* out, const From* in, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = FromFloat<To>(ToFloat(in[i]));
  }
}

template <typename T>
__global__ void AddFlat(T* out, const T* a, const T* b, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = FromFloat<T>(ToFloat(a[i]) + ToFloat(b[i]));
  }
}

template <typename T>
__global__ void ScaleFlat(T* x, float factor, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = FromFloat<T>(ToFloat(x[i]) * factor);
  }
}

// Block (32 columns) x (8 row lanes), see ColumnGridRows.
template <typename T>
__global__ void ColumnSums(float* dbias, const T* dout, int64_t n, int64_t c) {
  __shared__ float partial[8][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.0f;
  if (col < c) {
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; r < n;
         r += static_cast<int64_t>(gridDim.y) * 8) {
      acc += ToFloat(dout[r * c + col]);
    }
  }
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
void BiasGradAccumulate(float* dbias, const T* dout, int64_t n, int64_t c, cudaStream_t stream) {
  if (n * c == 0) return;
  const dim3 grid(static_cast<unsigned>((c + 31) / 32), ColumnGridRows(n));
  ColumnSums<T><<<grid, dim3(32, 8), 0, stream>>>(dbias, dout, n, c);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename To, typename From>
void Cast(To* out, const From* in, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  CastFlat<To, From><<<GridFor(count, 256), 256, 0, stream>>>(out, in, count);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void Add(T* out, const T* a, const T* b, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  AddFlat<T><<<GridFor(count, 256), 256, 0, stream>>>(out, a, b, count);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void Accumulate(T* out, const T* x, int64_t count, cudaStream_t stream) {
  Add<T>(out, out, x, count, stream);
}

template <typename T>
void Scale(T* x, float factor, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  ScaleFlat<T><<<GridFor(count, 256), 256, 0, stream>>>(x, factor, count);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template void Cast<bf16, float>(bf16*, const float*, int64_t, cudaStream_t);
template void Cast<float, bf16>(float*, const bf16*, int64_t, cudaStream_t);
template void Cast<fp16, float>(fp16*, const float*, int64_t, cudaStream_t);
template void Cast<float, fp16>(float*, const fp16*, int64_t, cudaStream_t);
#define PTDP_INSTANTIATE(T)                                            \
  template void Add<T>(T*, const T*, const T*, int64_t, cudaStream_t); \
  template void Accumulate<T>(T*, const T*, int64_t, cudaStream_t);    \
  template void Scale<T>(T*, float, int64_t, cudaStream_t);            \
  template void BiasGradAccumulate<T>(float*, const T*, int64_t, int64_t, cudaStream_t);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(bf16)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda_kernels
