// Kernels of CudaOps that kernels/cuda does not have (see ops_kernels.h). Grid-stride loops; the
// dropout and normal draws come from kernels/reference/counter_rng.h, the CPU's generator, so both
// backends draw the same masks and the same initial weights.
#include "runtime/cuda/ops_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/reference/counter_rng.h"
#include "runtime/cuda/elementwise_packs.h"

namespace ptdp::runtime::cuda::opk {
namespace rng = ::ptdp::kernels::rng;
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t count) {
  const int64_t b = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

using packs::Wide;  // 16-bit and fp32 to fp32 (elementwise_packs.h)

template <typename T>
__device__ __forceinline__ T Narrow(double v);
template <>
__device__ __forceinline__ float Narrow<float>(double v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ double Narrow<double>(double v) {
  return v;
}
template <>
__device__ __forceinline__ int32_t Narrow<int32_t>(double v) {
  return static_cast<int32_t>(v);
}
// Double to 16-bit through float: exact for the values Fill and FillNormal write except in the
// rare double-rounding case, which the CPU's half::Narrow (from float) shares.
template <>
__device__ __forceinline__ __nv_bfloat16 Narrow<__nv_bfloat16>(double v) {
  return __float2bfloat16_rn(static_cast<float>(v));
}
template <>
__device__ __forceinline__ __half Narrow<__half>(double v) {
  return __float2half_rn(static_cast<float>(v));
}

#define PTDP_GRID_LOOP(i, count)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (count); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// The pack kernels (runtime/cuda/elementwise_packs.h): elements [begin, begin + packs * V).
template <typename T, int V>
__global__ void BdrPacks(T* out, uint8_t* mask, const T* x, const T* bias, const T* residual,
                         int64_t c, uint64_t key, uint64_t first, float p, float keep_scale,
                         int64_t begin, int64_t packs) {
  PTDP_GRID_LOOP(q, packs) {
    packs::BiasDropoutResidualPack<T, V>(out, mask, x, bias, residual, c, key, first, p, keep_scale,
                                         begin + q * V);
  }
}

template <typename T, int V>
__global__ void DropoutBwdPacks(T* dx, const T* dy, const uint8_t* mask, float keep_scale,
                                bool dropout, int64_t begin, int64_t packs) {
  PTDP_GRID_LOOP(q, packs) {
    packs::DropoutBackwardPack<T, V>(dx, dy, mask, keep_scale, dropout, begin + q * V);
  }
}

template <typename T, int V>
__global__ void AddPacks(T* out, const T* a, const T* b, int64_t begin, int64_t packs) {
  PTDP_GRID_LOOP(q, packs) packs::AddPack<T, V>(out, a, b, begin + q * V);
}

template <typename T, int V>
__global__ void GeluFwdPacks(T* out, const T* pre, int64_t begin, int64_t packs) {
  PTDP_GRID_LOOP(q, packs) packs::GeluForwardPack<T, V>(out, pre, begin + q * V);
}

template <typename T, int V>
__global__ void GeluBwdPacks(T* dpre, const T* pre, const T* dgelu, int64_t begin, int64_t packs) {
  PTDP_GRID_LOOP(q, packs) packs::GeluBackwardPack<T, V>(dpre, pre, dgelu, begin + q * V);
}

// True when every non-null pointer is a multiple of `bytes`.
template <typename... P>
bool AlignedTo(uintptr_t bytes, const P*... p) {
  return ((p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0) && ...);
}

// 1 / (1 - p) in fp32, as KeepScale<float> (kernels/reference) computes it.
float KeepScale(double p) {
  return static_cast<float>(1.0 / (1.0 - p));
}

template <typename T>
__global__ void FillKernel(T* dst, int64_t count, double value) {
  const T v = Narrow<T>(value);
  PTDP_GRID_LOOP(i, count) dst[i] = v;
}

template <typename T>
__global__ void NormalKernel(T* out, int64_t count, uint64_t key, int64_t cols, int64_t global_cols,
                             int64_t col0, int64_t row0, double mean, double stddev) {
  const uint64_t k = rng::NormalStreamKey(key);
  constexpr double kTwoPi = 6.28318530717958647692;
  PTDP_GRID_LOOP(i, count) {
    const auto g = static_cast<uint64_t>((row0 + i / cols) * global_cols + col0 + i % cols);
    const double u1 = rng::Uniform(k, 2 * g), u2 = rng::Uniform(k, 2 * g + 1);
    out[i] = Narrow<T>(mean + stddev * (sqrt(-2.0 * log(u1)) * cos(kTwoPi * u2)));
  }
}

template <typename T>
__global__ void NonFiniteKernel(double* flag, const T* x, int64_t count) {
  PTDP_GRID_LOOP(i, count) {
    if (!isfinite(static_cast<double>(Wide(x[i])))) *flag = 1.0;  // a benign race: all write 1
  }
}
template <>
__global__ void NonFiniteKernel<double>(double* flag, const double* x, int64_t count) {
  PTDP_GRID_LOOP(i, count) {
    if (!isfinite(x[i])) *flag = 1.0;
  }
}

// One block: the row losses summed in double in a fixed order (deterministic).
__global__ void CeLossSumKernel(float* row_sum, double* loss_sum, const float* sums,
                                const float* row_max, const int32_t* targets, int64_t rows) {
  __shared__ double part[kThreads];
  double acc = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    row_sum[r] = sums[r];
    if (targets[r] < 0) continue;  // no target: out of the loss
    const float loss = logf(sums[r]) + row_max[r] - sums[rows + r];
    acc += static_cast<double>(loss);
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) part[threadIdx.x] += part[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss_sum += part[0];
}

__global__ void BroadcastKernel(float* out, const float* bias, int64_t n, int64_t c) {
  PTDP_GRID_LOOP(i, n * c) out[i] = bias[i % c];
}

}  // namespace

// Each launcher: 16-byte packs over the whole multiple of V when the pointers allow it, then the
// rest (unaligned pointers, or the count % V tail) one element per thread.
template <typename T>
cudaError_t BiasDropoutResidualMask(T* out, uint8_t* mask, const T* x, const T* bias,
                                    const T* residual, int64_t n, int64_t c, uint64_t key,
                                    uint64_t first, double p, cudaStream_t stream) {
  constexpr int V = packs::kWidth<T>;
  const int64_t count = n * c;
  const float pf = static_cast<float>(p), keep = KeepScale(p);
  int64_t done = 0;
  if (c % V == 0 && AlignedTo(16, out, x, bias, residual) && AlignedTo(V, mask)) {
    const int64_t vecs = count / V;
    if (vecs > 0) {
      BdrPacks<T, V><<<Blocks(vecs), kThreads, 0, stream>>>(out, mask, x, bias, residual, c, key,
                                                            first, pf, keep, 0, vecs);
    }
    done = vecs * V;
  }
  if (count > done) {
    BdrPacks<T, 1><<<Blocks(count - done), kThreads, 0, stream>>>(
        out, mask, x, bias, residual, c, key, first, pf, keep, done, count - done);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t MaskedDropoutBackward(T* dx, const T* dy, const uint8_t* mask, int64_t count, double p,
                                  cudaStream_t stream) {
  constexpr int V = packs::kWidth<T>;
  const bool dropout = p > 0.0;
  const float keep = dropout ? KeepScale(p) : 1.0f;
  int64_t done = 0;
  if (AlignedTo(16, dx, dy) && AlignedTo(V, dropout ? mask : nullptr)) {
    const int64_t vecs = count / V;
    if (vecs > 0) {
      DropoutBwdPacks<T, V>
          <<<Blocks(vecs), kThreads, 0, stream>>>(dx, dy, mask, keep, dropout, 0, vecs);
    }
    done = vecs * V;
  }
  if (count > done) {
    DropoutBwdPacks<T, 1><<<Blocks(count - done), kThreads, 0, stream>>>(
        dx, dy, mask, keep, dropout, done, count - done);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t Add(T* out, const T* a, const T* b, int64_t count, cudaStream_t stream) {
  constexpr int V = packs::kWidth<T>;
  int64_t done = 0;
  if (AlignedTo(16, out, a, b)) {
    const int64_t vecs = count / V;
    if (vecs > 0) AddPacks<T, V><<<Blocks(vecs), kThreads, 0, stream>>>(out, a, b, 0, vecs);
    done = vecs * V;
  }
  if (count > done) {
    AddPacks<T, 1><<<Blocks(count - done), kThreads, 0, stream>>>(out, a, b, done, count - done);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t GeluForward(T* out, const T* pre, int64_t count, cudaStream_t stream) {
  constexpr int V = packs::kWidth<T>;
  int64_t done = 0;
  if (AlignedTo(16, out, pre)) {
    const int64_t vecs = count / V;
    if (vecs > 0) GeluFwdPacks<T, V><<<Blocks(vecs), kThreads, 0, stream>>>(out, pre, 0, vecs);
    done = vecs * V;
  }
  if (count > done) {
    GeluFwdPacks<T, 1><<<Blocks(count - done), kThreads, 0, stream>>>(out, pre, done, count - done);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t GeluBackward(T* dpre, const T* pre, const T* dgelu, int64_t count,
                         cudaStream_t stream) {
  constexpr int V = packs::kWidth<T>;
  int64_t done = 0;
  if (AlignedTo(16, dpre, pre, dgelu)) {
    const int64_t vecs = count / V;
    if (vecs > 0) {
      GeluBwdPacks<T, V><<<Blocks(vecs), kThreads, 0, stream>>>(dpre, pre, dgelu, 0, vecs);
    }
    done = vecs * V;
  }
  if (count > done) {
    GeluBwdPacks<T, 1>
        <<<Blocks(count - done), kThreads, 0, stream>>>(dpre, pre, dgelu, done, count - done);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t FillValue(T* dst, int64_t count, double value, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  FillKernel<T><<<Blocks(count), kThreads, 0, stream>>>(dst, count, value);
  return cudaGetLastError();
}

template <typename T>
cudaError_t FillNormal(T* out, int64_t count, uint64_t key, int64_t cols, int64_t global_cols,
                       int64_t col0, int64_t row0, double mean, double stddev,
                       cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  NormalKernel<T><<<Blocks(count), kThreads, 0, stream>>>(out, count, key, cols, global_cols, col0,
                                                          row0, mean, stddev);
  return cudaGetLastError();
}

template <typename T>
cudaError_t FlagNonFinite(double* flag, const T* x, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  NonFiniteKernel<T><<<Blocks(count), kThreads, 0, stream>>>(flag, x, count);
  return cudaGetLastError();
}

cudaError_t CrossEntropyLossSum(float* row_sum, double* loss_sum, const float* sums,
                                const float* row_max, const int32_t* targets, int64_t rows,
                                cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  CeLossSumKernel<<<1, kThreads, 0, stream>>>(row_sum, loss_sum, sums, row_max, targets, rows);
  return cudaGetLastError();
}

cudaError_t BroadcastRows(float* out, const float* bias, int64_t n, int64_t c,
                          cudaStream_t stream) {
  if (n * c == 0) return cudaSuccess;
  BroadcastKernel<<<Blocks(n * c), kThreads, 0, stream>>>(out, bias, n, c);
  return cudaGetLastError();
}

#define PTDP_INSTANTIATE_FLOAT(T)                                                               \
  template cudaError_t BiasDropoutResidualMask<T>(T*, uint8_t*, const T*, const T*, const T*,   \
                                                  int64_t, int64_t, uint64_t, uint64_t, double, \
                                                  cudaStream_t);                                \
  template cudaError_t MaskedDropoutBackward<T>(T*, const T*, const uint8_t*, int64_t, double,  \
                                                cudaStream_t);                                  \
  template cudaError_t GeluBackward<T>(T*, const T*, const T*, int64_t, cudaStream_t);          \
  template cudaError_t GeluForward<T>(T*, const T*, int64_t, cudaStream_t);                     \
  template cudaError_t Add<T>(T*, const T*, const T*, int64_t, cudaStream_t);
#define PTDP_INSTANTIATE_ANY(T)                                                                 \
  template cudaError_t FillValue<T>(T*, int64_t, double, cudaStream_t);                         \
  template cudaError_t FillNormal<T>(T*, int64_t, uint64_t, int64_t, int64_t, int64_t, int64_t, \
                                     double, double, cudaStream_t);                             \
  template cudaError_t FlagNonFinite<T>(double*, const T*, int64_t, cudaStream_t);
PTDP_INSTANTIATE_FLOAT(float)
PTDP_INSTANTIATE_FLOAT(__nv_bfloat16)
PTDP_INSTANTIATE_FLOAT(__half)
PTDP_INSTANTIATE_ANY(float)
PTDP_INSTANTIATE_ANY(double)
PTDP_INSTANTIATE_ANY(__nv_bfloat16)
PTDP_INSTANTIATE_ANY(__half)
template cudaError_t FillValue<int32_t>(int32_t*, int64_t, double, cudaStream_t);
#undef PTDP_INSTANTIATE_FLOAT
#undef PTDP_INSTANTIATE_ANY

}  // namespace ptdp::runtime::cuda::opk
