// The cross-entropy kernel's online-softmax bodies (kernels/cuda/cross_entropy_stats.h) on the
// host: a row split across threads as CeStatsPacks splits it, and across vocabulary shards, against
// the reference's two-pass statistics in double; and the -inf cases (empty threads, padding-only
// shards) giving max -inf and sum 0, never NaN. Host code only: it runs in both kernel test
// binaries, the GPU one and the emulated one (label unit).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "kernels/cuda/cross_entropy_stats.h"
#include "kernels/reference/ops.h"
#include "tests/kernels/test_util.h"

namespace ptdp::cuda_kernels::ce {
namespace {

// A row of `n` logits stored in T, 64-byte aligned (packs need 16).
template <typename T>
struct Row {
  explicit Row(const std::vector<double>& v)
      : n(int64_t(v.size())),
        p(static_cast<T*>(std::aligned_alloc(64, (v.size() * sizeof(T) + 63) / 64 * 64))) {
    for (size_t i = 0; i < v.size(); ++i) p[i] = T(static_cast<float>(v[i]));
  }
  ~Row() { std::free(p); }
  std::vector<double> Wide() const {
    std::vector<double> w(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) w[i] = Widen(p[i]);
    return w;
  }
  int64_t n;
  T* p;
};

// The block's result: every thread's stats over [0, real) of the row, combined.
template <typename T, int V>
SoftmaxStats BlockOf(const T* row, int64_t real, int threads) {
  SoftmaxStats all;
  for (int t = 0; t < threads; ++t) all = Combine(all, ThreadStats<T, V>(row, real, t, threads));
  return all;
}

// The reference's max and sum over the first `real` of the (already rounded) values.
struct RefStats {
  double max, sum;
};
RefStats Reference(const std::vector<double>& v, int64_t real) {
  double m = 0, s = 0, t = 0;
  const int32_t target = 0;
  kernels::CrossEntropyLocalStats(&m, &s, &t, v.data(), &target, 1, int64_t(v.size()), 0, real);
  return {m, s};
}

// fp32 accumulation: each thread adds about real / threads terms, then log2(threads) combines,
// each term off by expf's ulp or two: 2^-20 relative covers rows of a few thousand columns.
constexpr double kRel = 0x1p-20 * 8;

template <typename T, int V>
void ExpectMatchesReference(const std::vector<double>& values, int64_t real, int threads) {
  const Row<T> row(values);
  const SoftmaxStats got = BlockOf<T, V>(row.p, real, threads);
  const RefStats want = Reference(row.Wide(), real);
  EXPECT_EQ(double(got.max), want.max);
  EXPECT_NEAR(got.sum, want.sum, kRel * want.sum) << "real " << real << " threads " << threads;
}

TEST(CrossEntropyStats, ThreadSplitMatchesReferenceFp32AndBf16) {
  const auto v = kernels::testing::RandomVector(1000, 11, 4.0);
  for (int threads : {1, 7, 32, 256}) {
    for (int64_t real : {int64_t(1000), int64_t(997), int64_t(5), int64_t(1)}) {
      ExpectMatchesReference<float, 4>(v, real, threads);
      ExpectMatchesReference<float, 1>(v, real, threads);
      ExpectMatchesReference<__nv_bfloat16, 8>(v, real, threads);
      ExpectMatchesReference<__nv_bfloat16, 1>(v, real, threads);
    }
  }
}

TEST(CrossEntropyStats, RowSplitAcrossShardsMatchesUnsplit) {
  // 1000 columns in 4 shards of 250: combining the shards' stats, or rescaling each shard's sum to
  // the global max and adding (what the runtime's all-reduces do), gives the unsplit row's.
  const auto v = kernels::testing::RandomVector(1000, 12, 6.0);
  const Row<float> row(v);
  const RefStats want = Reference(row.Wide(), 1000);
  SoftmaxStats combined;
  std::vector<SoftmaxStats> shard;
  for (int k = 0; k < 4; ++k) {
    shard.push_back(BlockOf<float, 1>(row.p + 250 * k, 250, 32));
    combined = Combine(combined, shard.back());
  }
  EXPECT_EQ(double(combined.max), want.max);
  EXPECT_NEAR(combined.sum, want.sum, kRel * want.sum);
  double rescaled = 0;
  for (const SoftmaxStats& s : shard) rescaled += RescaledSum(s.sum, s.max, combined.max);
  EXPECT_NEAR(rescaled, want.sum, kRel * want.sum);
}

TEST(CrossEntropyStats, EmptyPairsGiveMinusInfinityAndZeroNotNaN) {
  const SoftmaxStats empty;
  const SoftmaxStats both = Combine(empty, empty);
  EXPECT_TRUE(std::isinf(both.max) && both.max < 0);
  EXPECT_EQ(both.sum, 0.0f);
  // Combining with an empty pair changes nothing, exactly, on either side.
  SoftmaxStats x;
  x.max = 2.5f, x.sum = 3.25f;
  for (const SoftmaxStats& c : {Combine(x, empty), Combine(empty, x)}) {
    EXPECT_EQ(c.max, x.max);
    EXPECT_EQ(c.sum, x.sum);
  }
  // A thread with no columns (real 0, or fewer packs than threads) keeps the empty pair.
  const Row<float> row(std::vector<double>(8, 1.0));
  const SoftmaxStats none = ThreadStats<float, 4>(row.p, 0, 0, 32);
  EXPECT_TRUE(std::isinf(none.max) && none.max < 0);
  EXPECT_EQ(none.sum, 0.0f);
  const SoftmaxStats idle = ThreadStats<float, 4>(row.p, 8, 5, 32);
  EXPECT_TRUE(std::isinf(idle.max) && idle.sum == 0.0f);
  // -inf values alone leave the pair empty; then a finite value counts once.
  const float minus_inf[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  SoftmaxStats u = Update<4>(SoftmaxStats{}, minus_inf);
  EXPECT_TRUE(std::isinf(u.max) && u.sum == 0.0f);
  const float one[1] = {1.0f};
  u = Update<1>(u, one);
  EXPECT_EQ(u.max, 1.0f);
  EXPECT_EQ(u.sum, 1.0f);
  // A padding-only shard's 0 sum stays 0 rescaled to any group max, -inf included.
  for (float global : {-INFINITY, 0.0f, 40.0f})
    EXPECT_EQ(RescaledSum(0.0f, -INFINITY, global), 0.0f);
}

TEST(CrossEntropyStats, RunningMaxRescalesTheSum) {
  // Increasing values: every pack raises the max, so the sum is rescaled at each step.
  std::vector<double> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25 * double(i);
  ExpectMatchesReference<float, 4>(v, 64, 1);
  ExpectMatchesReference<float, 1>(v, 64, 1);
  // A NaN logit makes the sum NaN (the loss shows it), as the two-pass kernels did.
  v[10] = NAN;
  const Row<float> row(v);
  EXPECT_TRUE(std::isnan(BlockOf<float, 4>(row.p, 64, 4).sum));
}

}  // namespace
}  // namespace ptdp::cuda_kernels::ce
