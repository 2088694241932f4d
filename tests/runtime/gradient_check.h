// What the finite-difference layer tests share (layer_gradient_test.cc,
// llama_layer_gradient_test.cc): fp64 host vectors as device views (the CPU device's memory is the
// host's), seeded normal vectors, and central differences checked against an analytic gradient.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "runtime/backend/device.h"

namespace ptdp::runtime::gradient_check {

using Vec = std::vector<double>;

inline ConstRef C(const Vec& v) {
  return {v.data(), DType::kFp64, static_cast<int64_t>(v.size())};
}
inline TensorRef M(Vec& v) {
  return {v.data(), DType::kFp64, static_cast<int64_t>(v.size())};
}

// Host copy into a device tensor.
inline void Put(Tensor& t, const Vec& v) {
  std::copy(v.begin(), v.end(), static_cast<double*>(t.data()));
}

inline Vec Random(int64_t n, uint32_t seed, double scale = 0.5) {
  std::mt19937 g(seed);
  std::normal_distribution<double> nd(0, scale);
  Vec v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(g);
  return v;
}

// Central differences of f with respect to x[i] for about `samples` evenly spaced indices;
// compares each with `grad`.
inline void CheckGrad(const char* what, Vec& x, const Vec& grad, const std::function<double()>& f,
                      size_t samples = 23) {
  const double eps = 1e-6;
  const size_t stride = std::max<size_t>(1, x.size() / samples);
  for (size_t i = 0; i < x.size(); i += stride) {
    const double keep = x[i];
    x[i] = keep + eps;
    const double fp = f();
    x[i] = keep - eps;
    const double fm = f();
    x[i] = keep;
    const double fd = (fp - fm) / (2 * eps);
    EXPECT_NEAR(grad[i], fd, 1e-6 + 1e-5 * std::abs(fd)) << what << "[" << i << "]";
  }
}

}  // namespace ptdp::runtime::gradient_check
