// Helpers for the kernel tests: seeded random vectors, norm-wise relative error, and central
// finite differences of a scalar loss.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace ptdp::kernels::testing {

inline std::vector<double> RandomVector(int64_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, scale);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// ||a - b|| / ||b|| (with ||b|| floored at 1e-30).
inline double RelativeError(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

inline double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// d loss / d x by central differences, perturbing x in place (restored afterwards).
inline std::vector<double> NumericGradient(std::vector<double>& x,
                                           const std::function<double()>& loss, double h = 1e-5) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    g[i] = (up - down) / (2.0 * h);
  }
  return g;
}

// Finite-difference tolerance for double-precision gradients (norm-wise relative).
inline constexpr double kGradTolerance = 1e-6;

}  // namespace ptdp::kernels::testing
