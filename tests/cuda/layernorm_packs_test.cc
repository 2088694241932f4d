// The CUDA LayerNorm kernels' pack bodies (runtime/cuda/layernorm_packs.h) run here on the host,
// lane by lane as layernorm_kernels.cu's warp-per-row kernels run them, against the reference
// kernels evaluated in double on the same (fp32 or bf16) inputs (label unit: no GPU involved;
// the launch geometry and the shared-memory reduction are covered by cuda_ops_test on a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/reference/ops.h"
#include "runtime/cuda/layernorm_packs.h"

namespace ptdp::runtime::cuda {
namespace {

constexpr double kUlp = 0x1p-24;  // fp32's unit roundoff

template <typename T>
struct Buf {  // 64-byte aligned, poisoned
  explicit Buf(int64_t n) : n(n), p(static_cast<T*>(std::aligned_alloc(64, Bytes(n)))) {
    std::memset(static_cast<void*>(p), 0xFF, Bytes(n));
  }
  ~Buf() { std::free(p); }
  static size_t Bytes(int64_t n) { return (size_t(n) * sizeof(T) + 63) / 64 * 64; }
  std::vector<double> Wide() const {
    std::vector<double> w(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) w[size_t(i)] = packs::Wide(p[i]);
    return w;
  }
  int64_t n;
  T* p;
};

template <typename T>
void FillRandom(Buf<T>* b, uint32_t seed, float mean, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(mean, scale);
  for (int64_t i = 0; i < b->n; ++i) b->p[i] = packs::Narrow<T>(d(gen));
}

// Runs body(i) for the packs lane `lane` of a warp takes in a row of c elements.
template <int V, typename Body>
void LanePacks(int lane, int64_t c, Body&& body) {
  for (int64_t i = static_cast<int64_t>(lane) * V; i < c; i += 32 * V) body(i);
}

// A float sum of k terms is within (k - 1) u sum |terms| of the exact one; the statistics sum c
// terms, a parameter gradient n. `scale` is that sum of magnitudes for the value compared.
double SumTolerance(int64_t terms, double scale, double want, bool bf16) {
  return 4.0 * static_cast<double>(terms) * kUlp * scale + (bf16 ? 0x1p-8 * std::fabs(want) : 0.0) +
         1e-12;
}

template <typename T>
class LayerNormPacksTest : public ::testing::Test {};
using Types = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(LayerNormPacksTest, Types);

// Rows of 40 packs: lanes 0-7 take two packs, the others one (the loop's stride is exercised).
// A mean of 3 against a spread of 1 checks the two-pass variance.
TYPED_TEST(LayerNormPacksTest, ForwardMatchesTheReference) {
  using T = TypeParam;
  constexpr int V = packs::kWidth<T>;
  const int64_t n = 37, c = 40 * V;
  Buf<T> x(n * c), w(c), b(c), got(n * c);
  FillRandom(&x, 1, 3.0f, 1.0f);
  FillRandom(&w, 2, 1.0f, 0.5f);
  FillRandom(&b, 3, 0.0f, 0.5f);
  std::vector<float> got_mean(static_cast<size_t>(n)), got_rstd(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const T* row = x.p + r * c;
    float sum = 0.0f, sq = 0.0f;
    for (int lane = 0; lane < 32; ++lane) {
      LanePacks<V>(lane, c, [&](int64_t i) { sum += lnpacks::PackSum<T, V>(row, i); });
    }
    const float mu = sum / static_cast<float>(c);
    for (int lane = 0; lane < 32; ++lane) {
      LanePacks<V>(lane, c,
                   [&](int64_t i) { sq += lnpacks::PackSquaredDeviation<T, V>(row, i, mu); });
    }
    const float rs = 1.0f / std::sqrt(sq / static_cast<float>(c) + lnpacks::kEps);
    for (int lane = 0; lane < 32; ++lane) {
      LanePacks<V>(lane, c, [&](int64_t i) {
        lnpacks::NormalizePack<T, V>(got.p + r * c, row, w.p, b.p, i, mu, rs);
      });
    }
    got_mean[size_t(r)] = mu;
    got_rstd[size_t(r)] = rs;
  }
  const std::vector<double> xd = x.Wide(), wd = w.Wide(), bd = b.Wide();
  std::vector<double> want(static_cast<size_t>(n * c)), mean(static_cast<size_t>(n)),
      rstd(static_cast<size_t>(n));
  kernels::LayerNormForward<double>(want.data(), mean.data(), rstd.data(), xd.data(), wd.data(),
                                    bd.data(), n, c);
  const bool bf16 = sizeof(T) == 2;
  for (int64_t r = 0; r < n; ++r) {
    ASSERT_NEAR(got_mean[size_t(r)], mean[size_t(r)], SumTolerance(c, 4.0, 0, false));
    // rstd ~ 1: the variance's relative error carries over halved.
    ASSERT_NEAR(got_rstd[size_t(r)], rstd[size_t(r)],
                SumTolerance(c, 8.0 * rstd[size_t(r)], 0, false));
    for (int64_t j = 0; j < c; ++j) {
      const size_t e = size_t(r * c + j);
      const double xhat = (xd[e] - mean[size_t(r)]) * rstd[size_t(r)];
      const double scale =
          (std::fabs(xhat) + 4.0) * std::fabs(wd[size_t(j)]) + std::fabs(bd[size_t(j)]);
      ASSERT_NEAR(packs::Wide(got.p[e]), want[e], SumTolerance(c, scale, want[e], bf16))
          << "row " << r << " column " << j;
    }
  }
}

TYPED_TEST(LayerNormPacksTest, BackwardMatchesTheReference) {
  using T = TypeParam;
  constexpr int V = packs::kWidth<T>;
  const int64_t n = 29, c = 36 * V;
  Buf<T> x(n * c), w(c), dout(n * c), got_dx(n * c);
  FillRandom(&x, 4, 1.0f, 2.0f);
  FillRandom(&w, 5, 1.0f, 0.5f);
  FillRandom(&dout, 6, 0.0f, 1.0f);
  const std::vector<double> xd = x.Wide(), wd = w.Wide(), dd = dout.Wide();
  // Statistics from the reference (the backward reads them; they are not what is tested here).
  std::vector<double> y(static_cast<size_t>(n * c)), mean(static_cast<size_t>(n)),
      rstd(static_cast<size_t>(n)), bias0(static_cast<size_t>(c), 0.0);
  kernels::LayerNormForward<double>(y.data(), mean.data(), rstd.data(), xd.data(), wd.data(),
                                    bias0.data(), n, c);
  std::vector<float> got_dw(size_t(c), 0.5f), got_db(size_t(c), -0.25f);  // accumulated into
  for (int64_t r = 0; r < n; ++r) {
    const T* row = x.p + r * c;
    const T* drow = dout.p + r * c;
    const float mu = float(mean[size_t(r)]), rs = float(rstd[size_t(r)]);
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int lane = 0; lane < 32; ++lane) {
      LanePacks<V>(lane, c, [&](int64_t i) {
        lnpacks::PackGradSums<T, V>(&g_sum, &gx_sum, drow, row, w.p, i, mu, rs);
      });
    }
    const float g_mean = g_sum / float(c), gx_mean = gx_sum / float(c);
    for (int lane = 0; lane < 32; ++lane) {
      LanePacks<V>(lane, c, [&](int64_t i) {
        lnpacks::DxPack<T, V>(got_dx.p + r * c, drow, row, w.p, i, mu, rs, g_mean, gx_mean);
      });
    }
  }
  for (int64_t q = 0; q < c / V; ++q) {  // one thread per column pack, over every row
    float acc_w[V] = {}, acc_b[V] = {};
    for (int64_t r = 0; r < n; ++r) {
      lnpacks::ParamGradPack<T, V>(acc_w, acc_b, dout.p + r * c, x.p + r * c, q * V,
                                   float(mean[size_t(r)]), float(rstd[size_t(r)]));
    }
    for (int j = 0; j < V; ++j) {
      got_dw[size_t(q * V + j)] += acc_w[j];
      got_db[size_t(q * V + j)] += acc_b[j];
    }
  }
  std::vector<double> dx(static_cast<size_t>(n * c)), dw(static_cast<size_t>(c), 0.5),
      db(static_cast<size_t>(c), -0.25);
  kernels::LayerNormBackward<double>(dx.data(), dw.data(), db.data(), dd.data(), xd.data(),
                                     wd.data(), mean.data(), rstd.data(), n, c);
  const bool bf16 = sizeof(T) == 2;
  for (int64_t e = 0; e < n * c; ++e) {
    const int64_t r = e / c;
    const double xhat = (xd[size_t(e)] - mean[size_t(r)]) * rstd[size_t(r)];
    const double g = std::fabs(dd[size_t(e)] * wd[size_t(e % c)]);
    const double scale = rstd[size_t(r)] * (g + 4.0 * (1.0 + std::fabs(xhat)));
    ASSERT_NEAR(packs::Wide(got_dx.p[e]), dx[size_t(e)],
                SumTolerance(c, scale, dx[size_t(e)], bf16))
        << "dx element " << e;
  }
  for (int64_t j = 0; j < c; ++j) {  // fp32 accumulators in both types: no bf16 rounding
    double scale_w = 0.5, scale_b = 0.25;
    for (int64_t r = 0; r < n; ++r) {
      const double d = std::fabs(dd[size_t(r * c + j)]);
      scale_w += d * std::fabs((xd[size_t(r * c + j)] - mean[size_t(r)]) * rstd[size_t(r)]);
      scale_b += d;
    }
    ASSERT_NEAR(got_dw[size_t(j)], dw[size_t(j)], SumTolerance(n + 1, 2.0 * scale_w, 0, false))
        << "dweight column " << j;
    ASSERT_NEAR(got_db[size_t(j)], db[size_t(j)], SumTolerance(n + 1, 2.0 * scale_b, 0, false))
        << "dbias column " << j;
  }
}

}  // namespace
}  // namespace ptdp::runtime::cuda
