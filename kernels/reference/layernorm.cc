// LayerNorm over the last dimension, forward and backward (statistics accumulated in double).
#include <cmath>

#include "kernels/reference/ops.h"

namespace ptdp::kernels {
namespace {

// The weight the norm multiplies by: the stored one, or 1 + it for LayerNorm1P (in double, then
// T, as Transformer Engine adds the 1 in fp32 before it multiplies).
template <typename T>
T Gamma(T weight, double offset) {
  return offset == 0 ? weight : static_cast<T>(static_cast<double>(weight) + offset);
}

}  // namespace

template <typename T>
void LayerNormForward(T* out, T* mean, T* rstd, const T* x, const T* weight, const T* bias,
                      int64_t n, int64_t c, double weight_offset) {
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * c;
    double sum = 0.0;
    for (int64_t i = 0; i < c; ++i) sum += xr[i];
    const double mu = sum / static_cast<double>(c);
    double var = 0.0;
    for (int64_t i = 0; i < c; ++i) {
      const double d = xr[i] - mu;
      var += d * d;
    }
    var /= static_cast<double>(c);
    const double rs = 1.0 / std::sqrt(var + static_cast<double>(kLayerNormEps));
    T* o = out + r * c;
    for (int64_t i = 0; i < c; ++i) {
      o[i] = static_cast<T>((xr[i] - mu) * rs) * Gamma(weight[i], weight_offset) + bias[i];
    }
    mean[r] = static_cast<T>(mu);
    rstd[r] = static_cast<T>(rs);
  }
}

// With xhat = (x - mean) rstd and g = dout * weight:
//   dx = rstd (g - mean(g) - xhat mean(g xhat)),  dweight += dout xhat,  dbias += dout.
template <typename T>
void LayerNormBackward(T* dx, T* dweight, T* dbias, const T* dout, const T* x, const T* weight,
                       const T* mean, const T* rstd, int64_t n, int64_t c, double weight_offset) {
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * c;
    const T* dr = dout + r * c;
    const double mu = mean[r];
    const double rs = rstd[r];
    double g_mean = 0.0;
    double gx_mean = 0.0;
    for (int64_t i = 0; i < c; ++i) {
      const double xhat = (xr[i] - mu) * rs;
      const double g = static_cast<double>(dr[i]) * Gamma(weight[i], weight_offset);
      g_mean += g;
      gx_mean += g * xhat;
      dweight[i] += static_cast<T>(dr[i] * xhat);
      dbias[i] += dr[i];
    }
    g_mean /= static_cast<double>(c);
    gx_mean /= static_cast<double>(c);
    T* dxr = dx + r * c;
    for (int64_t i = 0; i < c; ++i) {
      const double xhat = (xr[i] - mu) * rs;
      const double g = static_cast<double>(dr[i]) * Gamma(weight[i], weight_offset);
      dxr[i] = static_cast<T>(rs * (g - g_mean - xhat * gx_mean));
    }
  }
}

#define PTDP_INSTANTIATE(T)                                                                        \
  template void LayerNormForward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t,    \
                                    double);                                                       \
  template void LayerNormBackward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, \
                                     int64_t, int64_t, double);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::kernels
