// Vocabulary-parallel embedding lookup (tokens outside this shard contribute 0) plus positions.
#include "kernels/reference/ops.h"

namespace ptdp::kernels {

template <typename T>
void EmbeddingForward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t b,
                      int64_t s, int64_t c, int64_t vocab_begin, int64_t vocab_end) {
  for (int64_t r = 0; r < b * s; ++r) {
    T* o = out + r * c;
    const int64_t tok = tokens[r];
    const bool local = tok >= vocab_begin && tok < vocab_end;
    const T* we = local ? wte + (tok - vocab_begin) * c : nullptr;
    const T* pe = wpe ? wpe + (r % s) * c : nullptr;
    for (int64_t i = 0; i < c; ++i) {
      T v = we ? we[i] : T(0);
      if (pe) v += pe[i];
      o[i] = v;
    }
  }
}

template <typename T>
void EmbeddingBackward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t b, int64_t s,
                       int64_t c, int64_t vocab_begin, int64_t vocab_end) {
  for (int64_t r = 0; r < b * s; ++r) {
    const T* g = dout + r * c;
    const int64_t tok = tokens[r];
    if (dwte != nullptr && tok >= vocab_begin && tok < vocab_end) {
      T* dw = dwte + (tok - vocab_begin) * c;
      for (int64_t i = 0; i < c; ++i) dw[i] += g[i];
    }
    if (dwpe != nullptr) {
      T* dp = dwpe + (r % s) * c;
      for (int64_t i = 0; i < c; ++i) dp[i] += g[i];
    }
  }
}

#define PTDP_INSTANTIATE(T)                                                                       \
  template void EmbeddingForward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t,     \
                                    int64_t, int64_t, int64_t);                                   \
  template void EmbeddingBackward<T>(T*, T*, const T*, const int32_t*, int64_t, int64_t, int64_t, \
                                     int64_t, int64_t);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::kernels
