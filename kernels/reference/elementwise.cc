// Elementwise ops: add, multiply by a mask, accumulate, scale, sum of squares.
#include "kernels/reference/ops.h"

namespace ptdp::kernels {

template <typename T>
void Add(T* out, const T* a, const T* b, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void Mul(T* out, const T* x, const T* mask, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = x[i] * mask[i];
}

template <typename T>
void Accumulate(T* out, const T* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] += x[i];
}

template <typename T>
void Scale(T* x, double factor, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] = static_cast<T>(x[i] * factor);
}

template <typename T>
double SumSquares(const T* x, int64_t count) {
  double s = 0.0;
  for (int64_t i = 0; i < count; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

#define PTDP_INSTANTIATE(T)                              \
  template void Add<T>(T*, const T*, const T*, int64_t); \
  template void Mul<T>(T*, const T*, const T*, int64_t); \
  template void Accumulate<T>(T*, const T*, int64_t);    \
  template void Scale<T>(T*, double, int64_t);           \
  template double SumSquares<T>(const T*, int64_t);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::kernels
