// Vocabulary-parallel cross-entropy pieces (see ops.h for the protocol around the collectives).
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/reference/ops.h"

namespace ptdp::kernels {

template <typename T>
void CrossEntropyLocalStats(T* row_max, T* row_sum, T* target_logit, const T* logits,
                            const int32_t* targets, int64_t n, int64_t v_local, int64_t vocab_begin,
                            int64_t vocab_real) {
  // Real columns of this shard: global id < vocab_real.
  const int64_t real = std::max<int64_t>(0, std::min(v_local, vocab_real - vocab_begin));
  for (int64_t r = 0; r < n; ++r) {
    const T* l = logits + r * v_local;
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < real; ++j) m = std::max(m, l[j]);
    row_max[r] = m;
    // The sum relative to the max just found (none when the shard has no real column).
    double sum = 0.0;
    for (int64_t j = 0; j < real; ++j) sum += std::exp(static_cast<double>(l[j]) - m);
    row_sum[r] = static_cast<T>(sum);
    const int64_t t = static_cast<int64_t>(targets[r]) - vocab_begin;
    target_logit[r] = (t >= 0 && t < real) ? l[t] : T(0);
  }
}

template <typename T>
void CrossEntropyRescaleSums(T* row_sum, const T* local_max, const T* global_max, int64_t n) {
  for (int64_t r = 0; r < n; ++r) {
    // An empty shard's sum is 0 whatever the maxima (and exp(-inf - -inf) would be NaN).
    if (row_sum[r] == T(0)) continue;
    row_sum[r] = static_cast<T>(static_cast<double>(row_sum[r]) *
                                std::exp(static_cast<double>(local_max[r]) - global_max[r]));
  }
}

template <typename T>
void CrossEntropyBackward(T* dlogits, const T* logits, const T* row_max, const T* row_sum,
                          const int32_t* targets, const T* dloss, int64_t n, int64_t v_local,
                          int64_t vocab_begin, int64_t vocab_real) {
  const int64_t real = std::max<int64_t>(0, std::min(v_local, vocab_real - vocab_begin));
  for (int64_t r = 0; r < n; ++r) {
    const T* l = logits + r * v_local;
    T* dl = dlogits + r * v_local;
    const double m = row_max[r];
    const double inv_sum = 1.0 / static_cast<double>(row_sum[r]);
    const double g = dloss[r];
    const int64_t t = static_cast<int64_t>(targets[r]) - vocab_begin;
    for (int64_t j = 0; j < v_local; ++j) {
      if (j >= real) {
        dl[j] = T(0);
        continue;
      }
      const double p = std::exp(static_cast<double>(l[j]) - m) * inv_sum;
      dl[j] = static_cast<T>((p - (j == t ? 1.0 : 0.0)) * g);
    }
  }
}

template <typename T>
void CrossEntropyLoss(T* loss, const T* row_max, const T* row_sum, const T* target_logit,
                      int64_t n) {
  for (int64_t r = 0; r < n; ++r) {
    loss[r] =
        static_cast<T>(std::log(static_cast<double>(row_sum[r])) + row_max[r] - target_logit[r]);
  }
}

#define PTDP_INSTANTIATE(T)                                                                       \
  template void CrossEntropyLoss<T>(T*, const T*, const T*, const T*, int64_t);                   \
  template void CrossEntropyLocalStats<T>(T*, T*, T*, const T*, const int32_t*, int64_t, int64_t, \
                                          int64_t, int64_t);                                      \
  template void CrossEntropyRescaleSums<T>(T*, const T*, const T*, int64_t);                      \
  template void CrossEntropyBackward<T>(T*, const T*, const T*, const T*, const int32_t*,         \
                                        const T*, int64_t, int64_t, int64_t, int64_t);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::kernels
