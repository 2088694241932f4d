// Vocabulary-parallel cross-entropy: one block per row for the forward's statistics (one read of
// the logits, in 16-byte packs: cross_entropy_stats.h), one block per row for the gradient.
// Columns whose global id >= vocab_real (padding) are skipped.
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cross_entropy_stats.h"
#include "kernels/cuda/ops.h"

namespace ptdp::cuda_kernels {
namespace {

constexpr int kThreads = 256;

// Real columns of a shard starting at global id vocab_begin.
inline int64_t RealColumns(int64_t v_local, int64_t vocab_begin, int64_t vocab_real) {
  const int64_t r = vocab_real - vocab_begin;
  return r < 0 ? 0 : (r < v_local ? r : v_local);
}

// Combine the stats of all threads of the block (a multiple of 32, at most 1024); thread 0 gets
// the row's. `scratch_max` and `scratch_sum` hold 32 floats of shared memory each (plain floats:
// a __shared__ array of a class with member initializers would ask for dynamic initialisation).
__device__ __forceinline__ ce::SoftmaxStats BlockStats(ce::SoftmaxStats v, float* scratch_max,
                                                       float* scratch_sum) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int o = 16; o > 0; o >>= 1) {
    ce::SoftmaxStats other;
    other.max = __shfl_xor_sync(kFullMask, v.max, o);
    other.sum = __shfl_xor_sync(kFullMask, v.sum, o);
    v = ce::Combine(v, other);
  }
  if (lane == 0) {
    scratch_max[warp] = v.max;
    scratch_sum[warp] = v.sum;
  }
  __syncthreads();
  if (warp == 0) {
    v = ce::SoftmaxStats{};
    if (lane < warps) {
      v.max = scratch_max[lane];
      v.sum = scratch_sum[lane];
    }
    for (int o = 16; o > 0; o >>= 1) {
      ce::SoftmaxStats other;
      other.max = __shfl_xor_sync(kFullMask, v.max, o);
      other.sum = __shfl_xor_sync(kFullMask, v.sum, o);
      v = ce::Combine(v, other);
    }
  }
  return v;
}

// One block per row: each thread's running (max, sum) over its packs of the row's real columns,
// then the block's; thread 0 writes them and the target's logit (0 outside the shard).
template <typename T, int V>
__global__ void CeStatsPacks(float* row_max, float* row_sum, float* target_logit, const T* logits,
                             const int32_t* targets, int64_t v_local, int64_t vocab_begin,
                             int64_t real) {
  __shared__ float scratch_max[32], scratch_sum[32];
  const int64_t row = blockIdx.x;
  const T* l = logits + row * v_local;
  const ce::SoftmaxStats mine = ce::ThreadStats<T, V>(l, real, threadIdx.x, blockDim.x);
  const ce::SoftmaxStats all = BlockStats(mine, scratch_max, scratch_sum);
  if (threadIdx.x == 0) {
    row_max[row] = all.max;
    row_sum[row] = all.sum;
    const int64_t t = static_cast<int64_t>(targets[row]) - vocab_begin;
    target_logit[row] = (t >= 0 && t < real) ? ToFloat(l[t]) : 0.0f;
  }
}

__global__ void CeRescaleSums(float* row_sum, const float* local_max, const float* global_max,
                              int64_t n) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < n) row_sum[r] = ce::RescaledSum(row_sum[r], local_max[r], global_max[r]);
}

__global__ void CeLoss(float* loss, const float* row_max, const float* row_sum,
                       const float* target_logit, int64_t n) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < n) loss[r] = logf(row_sum[r]) + row_max[r] - target_logit[r];
}

// One block per row (grid-stride over rows): the row's max, sum and target are read once, and
// no element pays a 64-bit division to find its row (the flat grid-stride form it replaces ran at
// a third of HBM speed on an H200). In place allowed: each element is read, then written.
template <typename T, typename TOut>
__global__ void CeBackward(TOut* dlogits, const T* logits, const float* row_max,
                           const float* row_sum, const int32_t* targets, const float* dloss,
                           int64_t n, int64_t v_local, int64_t vocab_begin, int64_t real) {
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const T* l = logits + r * v_local;
    TOut* d = dlogits + r * v_local;
    // A row without a target (negative: out of the loss) gets a zero gradient.
    const float m = row_max[r], inv_sum = 1.0f / row_sum[r];
    const float scale = targets[r] < 0 ? 0.0f : dloss[r];
    const int64_t t = static_cast<int64_t>(targets[r]) - vocab_begin;
    for (int64_t j = threadIdx.x; j < v_local; j += blockDim.x) {
      if (j >= real) {
        d[j] = FromFloat<TOut>(0.0f);
        continue;
      }
      const float p = expf(ToFloat(l[j]) - m) * inv_sum;
      d[j] = FromFloat<TOut>((p - (j == t ? 1.0f : 0.0f)) * scale);
    }
  }
}

}  // namespace

template <typename T>
void CrossEntropyLocalStats(float* row_max, float* row_sum, float* target_logit, const T* logits,
                            const int32_t* targets, int64_t n, int64_t v_local, int64_t vocab_begin,
                            int64_t vocab_real, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t real = RealColumns(v_local, vocab_begin, vocab_real);
  constexpr int V = ce::kPackWidth<T>;
  // 16-byte packs when every row starts on a 16-byte boundary; one logit at a time otherwise.
  const bool packs = reinterpret_cast<uintptr_t>(logits) % 16 == 0 && v_local % V == 0;
  const unsigned rows = static_cast<unsigned>(n);
  if (packs) {
    CeStatsPacks<T, V><<<rows, kThreads, 0, stream>>>(row_max, row_sum, target_logit, logits,
                                                      targets, v_local, vocab_begin, real);
  } else {
    CeStatsPacks<T, 1><<<rows, kThreads, 0, stream>>>(row_max, row_sum, target_logit, logits,
                                                      targets, v_local, vocab_begin, real);
  }
  PTDP_CUDA_CHECK(cudaGetLastError());
}

void CrossEntropyRescaleSums(float* row_sum, const float* local_max, const float* global_max,
                             int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  CeRescaleSums<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(row_sum, local_max,
                                                                            global_max, n);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

void CrossEntropyLoss(float* loss, const float* row_max, const float* row_sum,
                      const float* target_logit, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  CeLoss<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(loss, row_max, row_sum,
                                                                     target_logit, n);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T, typename TOut>
void CrossEntropyBackward(TOut* dlogits, const T* logits, const float* row_max,
                          const float* row_sum, const int32_t* targets, const float* dloss,
                          int64_t n, int64_t v_local, int64_t vocab_begin, int64_t vocab_real,
                          cudaStream_t stream) {
  if (n * v_local == 0) return;
  const unsigned blocks = static_cast<unsigned>(n < 65535 ? n : 65535);
  CeBackward<T, TOut><<<blocks, kThreads, 0, stream>>>(
      dlogits, logits, row_max, row_sum, targets, dloss, n, v_local, vocab_begin,
      RealColumns(v_local, vocab_begin, vocab_real));
  PTDP_CUDA_CHECK(cudaGetLastError());
}

#define PTDP_INSTANTIATE(T)                                                                  \
  template void CrossEntropyLocalStats<T>(float*, float*, float*, const T*, const int32_t*,  \
                                          int64_t, int64_t, int64_t, int64_t, cudaStream_t); \
  template void CrossEntropyBackward<T, T>(T*, const T*, const float*, const float*,         \
                                           const int32_t*, const float*, int64_t, int64_t,   \
                                           int64_t, int64_t, cudaStream_t);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(bf16)
#undef PTDP_INSTANTIATE
template void CrossEntropyBackward<float, bf16>(bf16*, const float*, const float*, const float*,
                                                const int32_t*, const float*, int64_t, int64_t,
                                                int64_t, int64_t, cudaStream_t);

}  // namespace ptdp::cuda_kernels
