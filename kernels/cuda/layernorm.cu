// Fused LayerNorm: forward and input-gradient kernels with one warp per row (statistics reduced
// by shuffles, fp32), and a column-reduction kernel for the weight and bias gradients.
#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace ptdp::cuda_kernels {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kWarpsPerBlock = 8;

// REQUIRES: blockDim.x == 32 * kWarpsPerBlock. Two passes over the row (the second re-reads x
// from L1/L2) keep the variance exact for rows with a large mean.
template <typename T>
__global__ void LayerNormFwdWarpPerRow(T* out, float* mean, float* rstd, const T* x,
                                       const T* weight, const T* bias, int64_t n, int64_t c,
                                       float weight_offset) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;  // whole warps leave together
  const T* xr = x + row * c;
  float sum = 0.0f;
  for (int64_t i = lane; i < c; i += 32) sum += ToFloat(xr[i]);
  const float mu = WarpSum(sum) / static_cast<float>(c);
  float var = 0.0f;
  for (int64_t i = lane; i < c; i += 32) {
    const float d = ToFloat(xr[i]) - mu;
    var += d * d;
  }
  const float rs = rsqrtf(WarpSum(var) / static_cast<float>(c) + kEps);
  T* o = out + row * c;
  for (int64_t i = lane; i < c; i += 32) {
    const float xhat = (ToFloat(xr[i]) - mu) * rs;
    o[i] = FromFloat<T>(xhat * (ToFloat(weight[i]) + weight_offset) + ToFloat(bias[i]));
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dout * weight.
template <typename T>
__global__ void LayerNormBwdDxWarpPerRow(T* dx, const T* dout, const T* x, const T* weight,
                                         const float* mean, const float* rstd, int64_t n, int64_t c,
                                         float weight_offset) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const T* xr = x + row * c;
  const T* dr = dout + row * c;
  const float mu = mean[row], rs = rstd[row];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int64_t i = lane; i < c; i += 32) {
    const float g = ToFloat(dr[i]) * (ToFloat(weight[i]) + weight_offset);
    g_sum += g;
    gx_sum += g * (ToFloat(xr[i]) - mu) * rs;
  }
  const float g_mean = WarpSum(g_sum) / static_cast<float>(c);
  const float gx_mean = WarpSum(gx_sum) / static_cast<float>(c);
  T* o = dx + row * c;
  for (int64_t i = lane; i < c; i += 32) {
    const float g = ToFloat(dr[i]) * (ToFloat(weight[i]) + weight_offset);
    const float xhat = (ToFloat(xr[i]) - mu) * rs;
    o[i] = FromFloat<T>(rs * (g - g_mean - xhat * gx_mean));
  }
}

// dweight[col] += sum_r dout * xhat, dbias[col] += sum_r dout. Block (32 columns) x (8 row
// lanes); the grid's y dimension splits the rows; partial sums meet in shared memory, then one
// atomicAdd per column and block.
template <typename T>
__global__ void LayerNormBwdParamsColumns(float* dweight, float* dbias, const T* dout, const T* x,
                                          const float* mean, const float* rstd, int64_t n,
                                          int64_t c) {
  __shared__ float sw[8][33];
  __shared__ float sb[8][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc_w = 0.0f, acc_b = 0.0f;
  if (col < c) {
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; r < n;
         r += static_cast<int64_t>(gridDim.y) * 8) {
      const float d = ToFloat(dout[r * c + col]);
      acc_w += d * (ToFloat(x[r * c + col]) - mean[r]) * rstd[r];
      acc_b += d;
    }
  }
  sw[threadIdx.y][threadIdx.x] = acc_w;
  sb[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y == 0 && col < c) {
    float tw = 0.0f, tb = 0.0f;
    for (int k = 0; k < 8; ++k) {
      tw += sw[k][threadIdx.x];
      tb += sb[k][threadIdx.x];
    }
    atomicAdd(dweight + col, tw);
    atomicAdd(dbias + col, tb);
  }
}

}  // namespace

template <typename T>
void LayerNormForward(T* out, float* mean, float* rstd, const T* x, const T* weight, const T* bias,
                      int64_t n, int64_t c, cudaStream_t stream, float weight_offset) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  LayerNormFwdWarpPerRow<T><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(out, mean, rstd, x, weight,
                                                                        bias, n, c, weight_offset);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void LayerNormBackward(T* dx, float* dweight, float* dbias, const T* dout, const T* x,
                       const T* weight, const float* mean, const float* rstd, int64_t n, int64_t c,
                       cudaStream_t stream, float weight_offset) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  LayerNormBwdDxWarpPerRow<T><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(
      dx, dout, x, weight, mean, rstd, n, c, weight_offset);
  PTDP_CUDA_CHECK(cudaGetLastError());
  const dim3 grid(static_cast<unsigned>((c + 31) / 32), ColumnGridRows(n));
  LayerNormBwdParamsColumns<T>
      <<<grid, dim3(32, 8), 0, stream>>>(dweight, dbias, dout, x, mean, rstd, n, c);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

#define PTDP_INSTANTIATE(T)                                                                      \
  template void LayerNormForward<T>(T*, float*, float*, const T*, const T*, const T*, int64_t,   \
                                    int64_t, cudaStream_t, float);                               \
  template void LayerNormBackward<T>(T*, float*, float*, const T*, const T*, const T*,           \
                                     const float*, const float*, int64_t, int64_t, cudaStream_t, \
                                     float);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(bf16)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda_kernels
