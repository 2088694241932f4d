// The kernels of Llama-style layers (kernels/cuda/ops.h): RMSNorm with one warp per row and a
// column reduction for the weight gradient, SwiGLU elementwise, and the rotary embedding with one
// thread per rotated pair. Twins of kernels/reference/llama_ops.cc, in fp32 arithmetic.
#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/reference/context_chunks.h"
#include "kernels/reference/qkv_layout.h"

namespace ptdp::cuda_kernels {
namespace {

constexpr int kWarpsPerBlock = 8;

template <typename T>
__global__ void RmsNormFwdWarpPerRow(T* out, float* rstd, const T* x, const T* weight, int64_t n,
                                     int64_t c, float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;  // whole warps leave together
  const T* xr = x + row * c;
  float sq = 0.0f;
  for (int64_t i = lane; i < c; i += 32) {
    const float v = ToFloat(xr[i]);
    sq += v * v;
  }
  const float rs = rsqrtf(WarpSum(sq) / static_cast<float>(c) + eps);
  T* o = out + row * c;
  for (int64_t i = lane; i < c; i += 32)
    o[i] = FromFloat<T>(ToFloat(xr[i]) * rs * ToFloat(weight[i]));
  if (lane == 0) rstd[row] = rs;
}

// dx = rstd (g - x rstd^2 mean(g x)), g = dout * weight.
template <typename T>
__global__ void RmsNormBwdDxWarpPerRow(T* dx, const T* dout, const T* x, const T* weight,
                                       const float* rstd, int64_t n, int64_t c) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const T* xr = x + row * c;
  const T* dr = dout + row * c;
  const float rs = rstd[row];
  float gx = 0.0f;
  for (int64_t i = lane; i < c; i += 32) gx += ToFloat(dr[i]) * ToFloat(weight[i]) * ToFloat(xr[i]);
  const float gx_mean = WarpSum(gx) / static_cast<float>(c);
  T* o = dx + row * c;
  for (int64_t i = lane; i < c; i += 32) {
    const float g = ToFloat(dr[i]) * ToFloat(weight[i]);
    o[i] = FromFloat<T>(rs * (g - ToFloat(xr[i]) * rs * rs * gx_mean));
  }
}

// dweight[col] += sum_r dout x rstd. Block (32 columns) x (8 row lanes), as LayerNorm's.
template <typename T>
__global__ void RmsNormBwdWeightColumns(float* dweight, const T* dout, const T* x,
                                        const float* rstd, int64_t n, int64_t c) {
  __shared__ float sw[8][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.0f;
  if (col < c) {
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; r < n;
         r += static_cast<int64_t>(gridDim.y) * 8) {
      acc += ToFloat(dout[r * c + col]) * ToFloat(x[r * c + col]) * rstd[r];
    }
  }
  sw[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < c) {
    float t = 0.0f;
    for (int k = 0; k < 8; ++k) t += sw[k][threadIdx.x];
    atomicAdd(dweight + col, t);
  }
}

__device__ __forceinline__ float Sigmoid(float z) {
  return 1.0f / (1.0f + expf(-z));
}

template <typename T>
__global__ void SwigluFwd(T* out, const T* in, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gate = ToFloat(in[2 * i]), up = ToFloat(in[2 * i + 1]);
    out[i] = FromFloat<T>(gate * Sigmoid(gate) * up);
  }
}

template <typename T>
__global__ void SwigluBwd(T* din, const T* in, const T* dout, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gate = ToFloat(in[2 * i]), up = ToFloat(in[2 * i + 1]), g = ToFloat(dout[i]);
    const float sig = Sigmoid(gate);
    din[2 * i] = FromFloat<T>(g * up * sig * (1.0f + gate * (1.0f - sig)));
    din[2 * i + 1] = FromFloat<T>(g * gate * sig);
  }
}

// One thread per (row, rotated head, pair e < d/2): the rotated heads of a row are its query
// heads, then its key heads.
template <typename T>
__global__ void RotaryPairs(T* qkv, RotaryDims r, float sign) {
  const kernels::ContextChunks chunks{r.s, r.cp, r.rank};
  const kernels::QkvLayout row{r.h, r.d, r.group};
  const int64_t half = r.d / 2, heads = r.h + row.KvHeads(), S = chunks.Local();
  const int64_t total = r.b * S * heads * half;
  const float log2_base = log2f(r.base);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i % half, head = (i / half) % heads, n = i / (half * heads);
    const int64_t at = head < r.h ? row.Q(head) : row.KvOf(head - r.h);
    T* x = qkv + n * row.Width() + at;
    const float pos = static_cast<float>(chunks.Position(n % S));
    const float angle =
        pos * exp2f(-2.0f * static_cast<float>(e) / static_cast<float>(r.d) * log2_base);
    float sn, cs;
    sincosf(angle, &sn, &cs);
    sn *= sign;
    const float x1 = ToFloat(x[e]), x2 = ToFloat(x[e + half]);
    x[e] = FromFloat<T>(x1 * cs - x2 * sn);
    x[e + half] = FromFloat<T>(x2 * cs + x1 * sn);
  }
}

}  // namespace

template <typename T>
void RmsNormForward(T* out, float* rstd, const T* x, const T* weight, int64_t n, int64_t c,
                    float eps, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  RmsNormFwdWarpPerRow<T>
      <<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(out, rstd, x, weight, n, c, eps);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void RmsNormBackward(T* dx, float* dweight, const T* dout, const T* x, const T* weight,
                     const float* rstd, int64_t n, int64_t c, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  RmsNormBwdDxWarpPerRow<T>
      <<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(dx, dout, x, weight, rstd, n, c);
  PTDP_CUDA_CHECK(cudaGetLastError());
  const dim3 grid(static_cast<unsigned>((c + 31) / 32), ColumnGridRows(n));
  RmsNormBwdWeightColumns<T><<<grid, dim3(32, 8), 0, stream>>>(dweight, dout, x, rstd, n, c);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void SwigluForward(T* out, const T* in, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  SwigluFwd<T><<<GridFor(count, 256), 256, 0, stream>>>(out, in, count);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void SwigluBackward(T* din, const T* in, const T* dout, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  SwigluBwd<T><<<GridFor(count, 256), 256, 0, stream>>>(din, in, dout, count);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void RotaryEmbedding(T* qkv, const RotaryDims& r, bool inverse, cudaStream_t stream) {
  const int64_t total = r.b * (r.s / r.cp) * (r.h + r.h / r.group) * (r.d / 2);
  if (total == 0) return;
  RotaryPairs<T><<<GridFor(total, 256), 256, 0, stream>>>(qkv, r, inverse ? -1.0f : 1.0f);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

#define PTDP_INSTANTIATE(T)                                                                \
  template void RmsNormForward<T>(T*, float*, const T*, const T*, int64_t, int64_t, float, \
                                  cudaStream_t);                                           \
  template void RmsNormBackward<T>(T*, float*, const T*, const T*, const T*, const float*, \
                                   int64_t, int64_t, cudaStream_t);                        \
  template void SwigluForward<T>(T*, const T*, int64_t, cudaStream_t);                     \
  template void SwigluBackward<T>(T*, const T*, const T*, int64_t, cudaStream_t);          \
  template void RotaryEmbedding<T>(T*, const RotaryDims&, bool, cudaStream_t);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(bf16)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda_kernels
