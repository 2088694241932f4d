// Vocabulary-parallel cross-entropy: one block per row for the max and the sums, an elementwise
// kernel for the gradient. Columns whose global id >= vocab_real (padding) are skipped.
#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace ptdp::cuda_kernels {
namespace {

constexpr int kThreads = 256;

// Real columns of a shard starting at global id vocab_begin.
inline int64_t RealColumns(int64_t v_local, int64_t vocab_begin, int64_t vocab_real) {
  const int64_t r = vocab_real - vocab_begin;
  return r < 0 ? 0 : (r < v_local ? r : v_local);
}

template <typename T>
__global__ void CeRowMax(float* row_max, const T* logits, int64_t v_local, int64_t real) {
  __shared__ float scratch[32];
  const T* l = logits + static_cast<int64_t>(blockIdx.x) * v_local;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < real; j += blockDim.x) m = fmaxf(m, ToFloat(l[j]));
  m = BlockMax(m, scratch);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

template <typename T>
__global__ void CeRowSums(float* row_sum, float* target_logit, const T* logits,
                          const float* row_max, const int32_t* targets, int64_t v_local,
                          int64_t vocab_begin, int64_t real) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* l = logits + row * v_local;
  const float m = row_max[row];
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < real; j += blockDim.x) sum += expf(ToFloat(l[j]) - m);
  sum = BlockSum(sum, scratch);
  if (threadIdx.x == 0) {
    row_sum[row] = sum;
    const int64_t t = static_cast<int64_t>(targets[row]) - vocab_begin;
    target_logit[row] = (t >= 0 && t < real) ? ToFloat(l[t]) : 0.0f;
  }
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
    const float m = row_max[r], inv_sum = 1.0f / row_sum[r], scale = dloss[r];
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
void CrossEntropyLocalMax(float* row_max, const T* logits, int64_t n, int64_t v_local,
                          int64_t vocab_begin, int64_t vocab_real, cudaStream_t stream) {
  if (n == 0) return;
  CeRowMax<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
      row_max, logits, v_local, RealColumns(v_local, vocab_begin, vocab_real));
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void CrossEntropyLocalSums(float* row_sum, float* target_logit, const T* logits,
                           const float* row_max, const int32_t* targets, int64_t n, int64_t v_local,
                           int64_t vocab_begin, int64_t vocab_real, cudaStream_t stream) {
  if (n == 0) return;
  CeRowSums<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
      row_sum, target_logit, logits, row_max, targets, v_local, vocab_begin,
      RealColumns(v_local, vocab_begin, vocab_real));
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

#define PTDP_INSTANTIATE(T)                                                                       \
  template void CrossEntropyLocalMax<T>(float*, const T*, int64_t, int64_t, int64_t, int64_t,     \
                                        cudaStream_t);                                            \
  template void CrossEntropyLocalSums<T>(float*, float*, const T*, const float*, const int32_t*,  \
                                         int64_t, int64_t, int64_t, int64_t, cudaStream_t);       \
  template void CrossEntropyBackward<T, T>(T*, const T*, const float*, const float*,              \
                                           const int32_t*, const float*, int64_t, int64_t, int64_t, \
                                           int64_t, cudaStream_t);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(bf16)
#undef PTDP_INSTANTIATE
template void CrossEntropyBackward<float, bf16>(bf16*, const float*, const float*, const float*,
                                                const int32_t*, const float*, int64_t, int64_t,
                                                int64_t, int64_t, cudaStream_t);

}  // namespace ptdp::cuda_kernels
