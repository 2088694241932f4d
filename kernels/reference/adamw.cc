// AdamW (decoupled weight decay), one step over a flat buffer.
#include <cmath>

#include "kernels/reference/ops.h"

namespace ptdp::kernels {

// m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  mhat = m / (1-b1^t);  vhat = v / (1-b2^t);
// param -= lr (mhat / (sqrt(vhat) + eps) + weight_decay param).
template <typename T>
void AdamWUpdate(T* param, const T* grad, T* m, T* v, int64_t count, double lr, double beta1,
                 double beta2, double eps, double weight_decay, int64_t step) {
  const double c1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double c2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  for (int64_t i = 0; i < count; ++i) {
    const double g = grad[i];
    const double mi = beta1 * m[i] + (1.0 - beta1) * g;
    const double vi = beta2 * v[i] + (1.0 - beta2) * g * g;
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    const double update = (mi / c1) / (std::sqrt(vi / c2) + eps);
    param[i] = static_cast<T>(param[i] - lr * (update + weight_decay * param[i]));
  }
}

template void AdamWUpdate<float>(float*, const float*, float*, float*, int64_t, double, double,
                                 double, double, double, int64_t);
template void AdamWUpdate<double>(double*, const double*, double*, double*, int64_t, double, double,
                                  double, double, double, int64_t);

}  // namespace ptdp::kernels
