// The bias gradient in 16-byte packs (bias_grad_packs.h), with kernels/cuda's ColumnSums where a
// pack does not fit (c not a multiple of the pack width, or dout not 16-byte aligned).
#include "kernels/cuda/ops.h"
#include "runtime/cuda/bias_grad_packs.h"
#include "runtime/cuda/ops_kernels.h"

namespace ptdp::runtime::cuda::opk {
namespace {

using packs::kBiasPacksPerBlock;
using packs::kBiasRowLanes;

constexpr int kThreads = kBiasPacksPerBlock * kBiasRowLanes;

template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    BiasGradPacks(float* dbias, const T* dout, int64_t n, int64_t c) {
  static_assert(kBiasPacksPerBlock * V <= kThreads, "one reducing thread per column");
  __shared__ float partial[kBiasRowLanes][kBiasPacksPerBlock * V + 1];
  const int64_t pack = int64_t(blockIdx.x) * kBiasPacksPerBlock + threadIdx.x;
  float acc[V];
  if (pack < c / V) {
    packs::ColumnPackSum<T, V>(acc, dout, c, pack,
                               int64_t(blockIdx.y) * kBiasRowLanes + threadIdx.y,
                               int64_t(gridDim.y) * kBiasRowLanes, n);
  } else {
    for (int j = 0; j < V; ++j) acc[j] = 0.0f;
  }
  for (int j = 0; j < V; ++j) partial[threadIdx.y][threadIdx.x * V + j] = acc[j];
  __syncthreads();
  const int t = threadIdx.y * kBiasPacksPerBlock + threadIdx.x;
  const int64_t col = int64_t(blockIdx.x) * kBiasPacksPerBlock * V + t;
  if (t < kBiasPacksPerBlock * V && col < c) {
    float sum = 0.0f;
    for (int k = 0; k < kBiasRowLanes; ++k) sum += partial[k][t];
    atomicAdd(dbias + col, sum);  // gridDim.y adds per column
  }
}

int64_t TargetBlocks() {
  static const int64_t blocks = [] {
    int device = 0, sms = 132;
    if (cudaGetDevice(&device) == cudaSuccess) {
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    }
    return int64_t(sms) * (2048 / kThreads);  // one full wave at full occupancy
  }();
  return blocks;
}

}  // namespace

template <typename T>
cudaError_t BiasGradAccumulate(float* dbias, const T* dout, int64_t n, int64_t c,
                               cudaStream_t stream) {
  if (n * c == 0) return cudaSuccess;
  constexpr int V = packs::kWidth<T>;
  if (c % V != 0 || reinterpret_cast<uintptr_t>(dout) % 16 != 0) {
    ::ptdp::cuda_kernels::BiasGradAccumulate<T>(dbias, dout, n, c, stream);
    return cudaGetLastError();
  }
  const packs::BiasGradGrid g = packs::BiasGradGridFor(n, c, V, TargetBlocks());
  BiasGradPacks<T, V>
      <<<dim3(unsigned(g.x), unsigned(g.y)), dim3(kBiasPacksPerBlock, kBiasRowLanes), 0, stream>>>(
          dbias, dout, n, c);
  return cudaGetLastError();
}

template cudaError_t BiasGradAccumulate<float>(float*, const float*, int64_t, int64_t,
                                               cudaStream_t);
template cudaError_t BiasGradAccumulate<__nv_bfloat16>(float*, const __nv_bfloat16*, int64_t,
                                                       int64_t, cudaStream_t);

}  // namespace ptdp::runtime::cuda::opk
