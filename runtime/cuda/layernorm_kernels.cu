// CudaOps' LayerNorm: one warp per row reading 16-byte packs (layernorm_packs.h), and a column
// reduction for the weight and bias gradients in which each thread owns one pack of columns, so a
// warp reads 512 contiguous bytes of a row per load instead of kernels/cuda's 64.
#include "kernels/cuda/common.cuh"
#include "runtime/cuda/layernorm_kernels.h"
#include "runtime/cuda/layernorm_packs.h"

namespace ptdp::runtime::cuda::opk {
namespace {

namespace ck = ::ptdp::cuda_kernels;

constexpr int kWarpsPerBlock = 8;
constexpr int kParamRowLanes = 8;  // rows a parameter-gradient block walks at once

template <typename T, int V>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    LnFwdPacks(T* out, float* mean, float* rstd, const T* x, const T* weight, const T* bias,
               int64_t n, int64_t c, float weight_offset) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;  // whole warps leave together
  const T* xr = x + row * c;
  float sum = 0.0f;
  for (int64_t i = static_cast<int64_t>(lane) * V; i < c; i += 32 * V) {
    sum += lnpacks::PackSum<T, V>(xr, i);
  }
  const float mu = ck::WarpSum(sum) / static_cast<float>(c);
  float sq = 0.0f;
  for (int64_t i = static_cast<int64_t>(lane) * V; i < c; i += 32 * V) {
    sq += lnpacks::PackSquaredDeviation<T, V>(xr, i, mu);
  }
  const float rs = rsqrtf(ck::WarpSum(sq) / static_cast<float>(c) + lnpacks::kEps);
  for (int64_t i = static_cast<int64_t>(lane) * V; i < c; i += 32 * V) {
    lnpacks::NormalizePack<T, V>(out + row * c, xr, weight, bias, i, mu, rs, weight_offset);
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    LnBwdDxPacks(T* dx, const T* dout, const T* x, const T* weight, const float* mean,
                 const float* rstd, int64_t n, int64_t c, float weight_offset) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const T* xr = x + row * c;
  const T* dr = dout + row * c;
  const float mu = mean[row], rs = rstd[row];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int64_t i = static_cast<int64_t>(lane) * V; i < c; i += 32 * V) {
    lnpacks::PackGradSums<T, V>(&g_sum, &gx_sum, dr, xr, weight, i, mu, rs, weight_offset);
  }
  const float g_mean = ck::WarpSum(g_sum) / static_cast<float>(c);
  const float gx_mean = ck::WarpSum(gx_sum) / static_cast<float>(c);
  for (int64_t i = static_cast<int64_t>(lane) * V; i < c; i += 32 * V) {
    lnpacks::DxPack<T, V>(dx + row * c, dr, xr, weight, i, mu, rs, g_mean, gx_mean, weight_offset);
  }
}

// Block (32 packs of columns) x (kParamRowLanes rows); the grid's y dimension splits the rows.
// Partial sums meet in shared memory, then one atomicAdd per column and block (dweight and
// dbias accumulate, as every backward does into parameter gradients).
template <typename T, int V>
__global__ void __launch_bounds__(32 * kParamRowLanes)
    LnBwdParamPacks(float* dweight, float* dbias, const T* dout, const T* x, const float* mean,
                    const float* rstd, int64_t n, int64_t c) {
  __shared__ float sw[kParamRowLanes][32 * V + 1];
  __shared__ float sb[kParamRowLanes][32 * V + 1];
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x) * V;
  float acc_w[V], acc_b[V];
  for (int j = 0; j < V; ++j) acc_w[j] = acc_b[j] = 0.0f;
  if (col0 < c) {
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * kParamRowLanes + threadIdx.y; r < n;
         r += static_cast<int64_t>(gridDim.y) * kParamRowLanes) {
      lnpacks::ParamGradPack<T, V>(acc_w, acc_b, dout + r * c, x + r * c, col0, mean[r], rstd[r]);
    }
  }
  for (int j = 0; j < V; ++j) {
    sw[threadIdx.y][threadIdx.x * V + j] = acc_w[j];
    sb[threadIdx.y][threadIdx.x * V + j] = acc_b[j];
  }
  __syncthreads();
  // Thread (tx, ty) now sums column tx + 32 k of the block's 32 V columns over the row lanes.
  for (int k = threadIdx.y; k < V; k += kParamRowLanes) {
    const int local = threadIdx.x + 32 * k;
    const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 * V + local;
    if (col >= c) continue;
    float tw = 0.0f, tb = 0.0f;
    for (int lane_row = 0; lane_row < kParamRowLanes; ++lane_row) {
      tw += sw[lane_row][local];
      tb += sb[lane_row][local];
    }
    atomicAdd(dweight + col, tw);
    atomicAdd(dbias + col, tb);
  }
}

// True when every pointer is a multiple of 16 bytes.
template <typename... P>
bool Aligned16(const P*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}

unsigned RowBlocks(int64_t n) {
  return static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

template <typename T>
bool LayerNormPacksApply(int64_t c, const void* a, const void* b, const void* d, const void* e) {
  constexpr int V = packs::kWidth<T>;
  return c % V == 0 && Aligned16(a, b, d, e);
}

template <typename T>
cudaError_t LayerNormForwardPacks(T* out, float* mean, float* rstd, const T* x, const T* weight,
                                  const T* bias, int64_t n, int64_t c, cudaStream_t stream,
                                  float weight_offset) {
  constexpr int V = packs::kWidth<T>;
  if (n == 0) return cudaSuccess;
  if (!LayerNormPacksApply<T>(c, out, x, weight, bias)) return cudaErrorInvalidValue;
  LnFwdPacks<T, V><<<RowBlocks(n), 32 * kWarpsPerBlock, 0, stream>>>(out, mean, rstd, x, weight,
                                                                     bias, n, c, weight_offset);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LayerNormBackwardPacks(T* dx, float* dweight, float* dbias, const T* dout, const T* x,
                                   const T* weight, const float* mean, const float* rstd, int64_t n,
                                   int64_t c, cudaStream_t stream, float weight_offset) {
  constexpr int V = packs::kWidth<T>;
  if (n == 0) return cudaSuccess;
  if (!LayerNormPacksApply<T>(c, dx, dout, x, weight)) return cudaErrorInvalidValue;
  LnBwdDxPacks<T, V><<<RowBlocks(n), 32 * kWarpsPerBlock, 0, stream>>>(dx, dout, x, weight, mean,
                                                                       rstd, n, c, weight_offset);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const int64_t col_blocks = (c / V + 31) / 32;
  const dim3 grid(static_cast<unsigned>(col_blocks), ck::ColumnGridRows(n));
  LnBwdParamPacks<T, V>
      <<<grid, dim3(32, kParamRowLanes), 0, stream>>>(dweight, dbias, dout, x, mean, rstd, n, c);
  return cudaGetLastError();
}

#define PTDP_INSTANTIATE(T)                                                                        \
  template bool LayerNormPacksApply<T>(int64_t, const void*, const void*, const void*,             \
                                       const void*);                                               \
  template cudaError_t LayerNormForwardPacks<T>(T*, float*, float*, const T*, const T*, const T*,  \
                                                int64_t, int64_t, cudaStream_t, float);            \
  template cudaError_t LayerNormBackwardPacks<T>(T*, float*, float*, const T*, const T*, const T*, \
                                                 const float*, const float*, int64_t, int64_t,     \
                                                 cudaStream_t, float);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(__nv_bfloat16)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::runtime::cuda::opk
