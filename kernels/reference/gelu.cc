// GeLU, tanh approximation: y = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi).
#include <cmath>

#include "kernels/reference/ops.h"

namespace ptdp::kernels {
namespace {
constexpr double kGeluK = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluA = 0.044715;
}  // namespace

template <typename T>
void GeluForward(T* out, const T* x, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const double v = x[i];
    out[i] = static_cast<T>(0.5 * v * (1.0 + std::tanh(kGeluK * (v + kGeluA * v * v * v))));
  }
}

// dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3a x^2), t = tanh(k (x + a x^3)).
template <typename T>
void GeluBackward(T* dx, const T* x, const T* dout, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const double v = x[i];
    const double t = std::tanh(kGeluK * (v + kGeluA * v * v * v));
    const double grad =
        0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * kGeluK * (1.0 + 3.0 * kGeluA * v * v);
    dx[i] = static_cast<T>(grad * dout[i]);
  }
}

template void GeluForward<float>(float*, const float*, int64_t);
template void GeluForward<double>(double*, const double*, int64_t);
template void GeluBackward<float>(float*, const float*, const float*, int64_t);
template void GeluBackward<double>(double*, const double*, const double*, int64_t);

}  // namespace ptdp::kernels
