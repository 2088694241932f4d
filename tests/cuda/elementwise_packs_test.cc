// The CUDA element-wise kernels' bodies (runtime/cuda/elementwise_packs.h) run here on the host,
// pack by pack as ops_kernels.cu launches them (16-byte packs over the multiple of V, then the
// tail one element at a time), against CpuOps on the same inputs (label unit: no GPU involved;
// what the GPU adds, its tanhf, is covered by cuda_ops_test on a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/reference/ops.h"
#include "runtime/backend/cpu_ops.h"
#include "runtime/cuda/elementwise_packs.h"

namespace ptdp::runtime::cuda {
namespace {

// 64-byte aligned host buffer of n elements (packs need 16-byte alignment).
template <typename T>
struct Buf {
  explicit Buf(int64_t n) : n(n), p(static_cast<T*>(std::aligned_alloc(64, Rounded(n)))) {
    std::memset(static_cast<void*>(p), 0xFF, Rounded(n));
  }
  ~Buf() { std::free(p); }
  static size_t Rounded(int64_t n) { return (size_t(n) * sizeof(T) + 63) / 64 * 64; }
  int64_t n;
  T* p;
};

template <typename T>
DType DTypeOf() {
  return sizeof(T) == 4 ? DType::kFp32 : DType::kBf16;
}

template <typename T>
void FillRandom(Buf<T>* b, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  for (int64_t i = 0; i < b->n; ++i) b->p[i] = packs::Narrow<T>(d(gen));
}

// The launcher's split: packs of V over [0, count / V * V), then single elements.
template <typename T, typename Body>
void ForPacks(int64_t count, Body&& body) {
  constexpr int V = packs::kWidth<T>;
  const int64_t vecs = count / V;
  for (int64_t q = 0; q < vecs; ++q) body(std::integral_constant<int, V>{}, q * V);
  for (int64_t i = vecs * V; i < count; ++i) body(std::integral_constant<int, 1>{}, i);
}

// CpuOps evaluates GeLU' in double, the pack in float: about ten roundings and tanhf's 2 ulp, each
// relative to the terms 0.5 (1 + t) and 0.5 x (1 - t^2) k (1 + 3a x^2), whose sum cancels near
// GeLU's minimum; so 16 ulp of fp32 of the terms' bound 1 + k |x| (1 + 3a x^2), times |dgelu|,
// plus in bf16 one flipped rounding of the output (2^-8 of it).
double GeluGradTolerance(double x, double dgelu, double want, bool bf16) {
  const double terms = 1.0 + 0.7978845608 * std::fabs(x) * (1.0 + 3 * 0.044715 * x * x);
  return 16 * 0x1p-24 * terms * std::fabs(dgelu) + (bf16 ? 0x1p-8 * std::fabs(want) : 0.0) + 1e-30;
}

template <typename T>
class PacksTest : public ::testing::Test {};
using Types = ::testing::Types<float, __nv_bfloat16>;
TYPED_TEST_SUITE(PacksTest, Types);

TYPED_TEST(PacksTest, GeluBackwardMatchesCpuOps) {
  using T = TypeParam;
  const int64_t count = 1000 * packs::kWidth<T> + 5;  // a tail
  Buf<T> pre(count), dgelu(count), got(count), want(count);
  FillRandom(&pre, 1, 2.0f);
  FillRandom(&dgelu, 2, 1.0f);
  ForPacks<T>(count, [&](auto v, int64_t i) {
    packs::GeluBackwardPack<T, decltype(v)::value>(got.p, pre.p, dgelu.p, i);
  });
  CpuOps cpu;
  const DType d = DTypeOf<T>();
  ASSERT_TRUE(
      cpu.GeluBackward({want.p, d, count}, {pre.p, d, count}, {dgelu.p, d, count}, count).ok());
  for (int64_t i = 0; i < count; ++i) {
    const double g = packs::Wide(got.p[i]), w = packs::Wide(want.p[i]);
    const double x = packs::Wide(pre.p[i]), dy = packs::Wide(dgelu.p[i]);
    ASSERT_NEAR(g, w, GeluGradTolerance(x, dy, w, sizeof(T) == 2)) << "element " << i;
  }
}

TYPED_TEST(PacksTest, GeluForwardMatchesTheReference) {
  using T = TypeParam;
  const int64_t count = 1000 * packs::kWidth<T> + 3;
  Buf<T> pre(count), got(count);
  FillRandom(&pre, 7, 3.0f);
  ForPacks<T>(count, [&](auto v, int64_t i) {
    packs::GeluForwardPack<T, decltype(v)::value>(got.p, pre.p, i);
  });
  std::vector<double> x(count), want(count);
  for (int64_t i = 0; i < count; ++i) x[i] = packs::Wide(pre.p[i]);
  kernels::GeluForward<double>(want.data(), x.data(), count);
  // fp32 against double: about ten roundings and tanhf's 2 ulp, relative to 0.5 |x| (1 + t) <= |x|
  // (which cancels for negative x): 16 ulp of fp32 of |x|; in bf16 also one flipped rounding.
  for (int64_t i = 0; i < count; ++i) {
    const double tol = 16 * 0x1p-24 * std::fabs(x[i]) +
                       (sizeof(T) == 2 ? 0x1p-8 * std::fabs(want[i]) : 0.0) + 1e-30;
    ASSERT_NEAR(packs::Wide(got.p[i]), want[i], tol) << "element " << i << " x " << x[i];
  }
}

TYPED_TEST(PacksTest, DropoutBackwardEqualsCpuOps) {
  using T = TypeParam;
  const int64_t n = 37, c = 8 * packs::kWidth<T> + 3;  // rows with a tail overall
  const int64_t count = n * c;
  Buf<T> dy(count), got(count), want(count);
  Buf<uint8_t> mask(count);
  FillRandom(&dy, 3, 1.0f);
  for (int64_t i = 0; i < count; ++i) mask.p[i] = (i * 7919) % 5 != 0;
  const double p = 0.2;
  const float keep = static_cast<float>(1.0 / (1.0 - p));
  ForPacks<T>(count, [&](auto v, int64_t i) {
    packs::DropoutBackwardPack<T, decltype(v)::value>(got.p, dy.p, mask.p, keep, true, i);
  });
  CpuOps cpu;
  const DType d = DTypeOf<T>();
  ASSERT_TRUE(cpu.DropoutBackward({want.p, d, count}, {}, {dy.p, d, count},
                                  {mask.p, DType::kU8, count}, n, c, p)
                  .ok());
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(packs::Wide(got.p[i]), packs::Wide(want.p[i])) << "element " << i;
  }
}

TYPED_TEST(PacksTest, AddEqualsCpuOpsAlsoInPlace) {
  using T = TypeParam;
  const int64_t count = 300 * packs::kWidth<T> + 5;  // packs, then a tail
  Buf<T> a(count), b(count), got(count), want(count);
  FillRandom(&a, 11, 1.0f);
  FillRandom(&b, 12, 3.0f);
  ForPacks<T>(
      count, [&](auto v, int64_t i) { packs::AddPack<T, decltype(v)::value>(got.p, a.p, b.p, i); });
  CpuOps cpu;
  const DType d = DTypeOf<T>();
  ASSERT_TRUE(cpu.Add({want.p, d, count}, {a.p, d, count}, {b.p, d, count}).ok());
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(packs::Wide(got.p[i]), packs::Wide(want.p[i])) << "element " << i;
  }
  // In place (out == a), as the backward's residual sums run it.
  ForPacks<T>(count,
              [&](auto v, int64_t i) { packs::AddPack<T, decltype(v)::value>(a.p, a.p, b.p, i); });
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(packs::Wide(a.p[i]), packs::Wide(want.p[i])) << "in place, element " << i;
  }
}

TYPED_TEST(PacksTest, BiasDropoutResidualEqualsCpuOpsMaskAndValues) {
  using T = TypeParam;
  // c a multiple of V (the launcher's condition for packs); `first` not a multiple of 4, so packs
  // straddle Philox blocks.
  const int64_t n = 29, c = 6 * packs::kWidth<T>, count = n * c;
  Buf<T> x(count), bias(c), res(count), got(count), want(count);
  Buf<uint8_t> got_mask(count), want_mask(count);
  FillRandom(&x, 4, 1.0f);
  FillRandom(&bias, 5, 0.5f);
  FillRandom(&res, 6, 1.0f);
  const DropoutSpec drop{0.1, 0xC0FFEEull, 1000003};
  const float keep = static_cast<float>(1.0 / (1.0 - drop.p));
  ForPacks<T>(count, [&](auto v, int64_t i) {
    packs::BiasDropoutResidualPack<T, decltype(v)::value>(
        got.p, got_mask.p, x.p, bias.p, res.p, c, drop.key, drop.first, float(drop.p), keep, i);
  });
  CpuOps cpu;
  const DType d = DTypeOf<T>();
  ASSERT_TRUE(cpu.BiasDropoutResidual({want.p, d, count}, {want_mask.p, DType::kU8, count},
                                      {x.p, d, count}, {bias.p, d, c}, {res.p, d, count}, n, c,
                                      drop)
                  .ok());
  int64_t dropped = 0;
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(got_mask.p[i], want_mask.p[i]) << "mask element " << i;
    ASSERT_EQ(packs::Wide(got.p[i]), packs::Wide(want.p[i])) << "element " << i;
    dropped += want_mask.p[i] == 0;
  }
  // The mask is a real draw: about p of the elements dropped (not none, not all).
  EXPECT_GT(dropped, count / 20);
  EXPECT_LT(dropped, count / 5);
}

}  // namespace
}  // namespace ptdp::runtime::cuda
