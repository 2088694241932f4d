// The online-softmax statistics of the cross-entropy's one forward pass over the logits
// (ops.h CrossEntropyLocalStats): a row's (max, sum of exp(logit - max)) kept as a running pair,
// updated a 16-byte pack of logits at a time and combined across threads and shards. The bodies are
// __host__ __device__ so that tests/cuda/cross_entropy_stats_test.cc runs them on the host, split
// across threads as the kernel splits a row, against kernels/reference (label unit).
//
// An empty pair (no real column: a padding-only shard, or a thread with no columns) is
// {-inf, 0}. Combining two pairs never evaluates exp(-inf - -inf) (NaN): when both maxima are
// -inf the result is the empty pair; when only one is, its exp(-inf) is 0 and its sum 0.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#ifndef PTDP_HOST_DEVICE
#if defined(__CUDACC__)
#define PTDP_HOST_DEVICE __host__ __device__
#else
#define PTDP_HOST_DEVICE
#endif
#endif

namespace ptdp::cuda_kernels::ce {

struct SoftmaxStats {
  float max = -INFINITY;
  float sum = 0.0f;  // of exp(x - max) over the values seen
};

// The stats of the union of two sets of values: m = max(m1, m2), s = s1 e^(m1 - m) + s2 e^(m2 - m).
PTDP_HOST_DEVICE inline SoftmaxStats Combine(SoftmaxStats a, SoftmaxStats b) {
  const float m = a.max > b.max ? a.max : b.max;
  if (m == -INFINITY) return SoftmaxStats{};
  SoftmaxStats r;
  r.max = m;
  r.sum = (a.max == m ? a.sum : a.sum * expf(a.max - m)) +
          (b.max == m ? b.sum : b.sum * expf(b.max - m));
  return r;
}

// A thread's running stats after V more values: the pack's max first, so the running sum is
// rescaled at most once per pack (and not at all while the max stands).
template <int V>
PTDP_HOST_DEVICE inline SoftmaxStats Update(SoftmaxStats acc, const float (&x)[V]) {
  float m = acc.max;
  for (int j = 0; j < V; ++j) m = x[j] > m ? x[j] : m;
  if (m == -INFINITY) return acc;  // nothing but -inf yet
  float s = m == acc.max ? acc.sum : acc.sum * expf(acc.max - m);
  for (int j = 0; j < V; ++j) s += expf(x[j] - m);
  SoftmaxStats r;
  r.max = m;
  r.sum = s;
  return r;
}

// The rescale of a shard's row sum to the tensor group's max (ops.h CrossEntropyRescaleSums): a
// 0 sum (an empty shard, whose local max is -inf) stays 0 whatever the global max.
PTDP_HOST_DEVICE inline float RescaledSum(float sum, float local_max, float global_max) {
  return sum == 0.0f ? 0.0f : sum * expf(local_max - global_max);
}

PTDP_HOST_DEVICE inline float Widen(float v) {
  return v;
}
PTDP_HOST_DEVICE inline float Widen(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// V logits read as one 16-byte access (V = 16 / sizeof(T)), or one logit (V = 1).
template <typename T, int V>
struct alignas(sizeof(T) * V) LogitPack {
  T e[V];
};

// Elements per 16-byte access.
template <typename T>
inline constexpr int kPackWidth = static_cast<int>(16 / sizeof(T));

// What thread `thread` of `threads` accumulates over the real columns [0, real) of one row: packs
// q = thread, thread + threads, ... of V columns over [0, real / V * V), then the tail columns
// one at a time. With V > 1 the row must start on a 16-byte boundary (the launcher checks).
template <typename T, int V>
PTDP_HOST_DEVICE inline SoftmaxStats ThreadStats(const T* row, int64_t real, int64_t thread,
                                                 int64_t threads) {
  SoftmaxStats acc;
  const int64_t packs = real / V;
  for (int64_t q = thread; q < packs; q += threads) {
    const LogitPack<T, V> p = *reinterpret_cast<const LogitPack<T, V>*>(row + q * V);
    float x[V];
    for (int j = 0; j < V; ++j) x[j] = Widen(p.e[j]);
    acc = Update<V>(acc, x);
  }
  for (int64_t j = packs * V + thread; j < real; j += threads) {
    const float x[1] = {Widen(row[j])};
    acc = Update<1>(acc, x);
  }
  return acc;
}

}  // namespace ptdp::cuda_kernels::ce
