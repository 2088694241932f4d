// Counter-based random numbers and AdamW.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/reference/counter_rng.h"
#include "kernels/reference/ops.h"

namespace ptdp::kernels {
namespace {

TEST(ReferenceRandom, HashKeyIsFnv1a) {
  // Published FNV-1a 64-bit test vectors.
  EXPECT_EQ(HashKey(""), 0xCBF29CE484222325ull);
  EXPECT_EQ(HashKey("a"), 0xAF63DC4C8601EC8Cull);
  EXPECT_NE(HashKey("layer0.qkv.weight"), HashKey("layer1.qkv.weight"));
}

TEST(ReferenceRandom, SameCounterSameValue) {
  const uint64_t key = HashKey("wte");
  for (uint64_t i : {0ull, 1ull, 12345ull, 1ull << 40}) {
    EXPECT_EQ(UniformFromCounter(key, i), UniformFromCounter(key, i));
    EXPECT_EQ(NormalFromCounter(key, i), NormalFromCounter(key, i));
    EXPECT_EQ(DropoutMaskValue<float>(key, i, 0.1), DropoutMaskValue<float>(key, i, 0.1));
  }
  EXPECT_NE(UniformFromCounter(key, 0), UniformFromCounter(key, 1));
  EXPECT_NE(UniformFromCounter(key, 0), UniformFromCounter(key + 1, 0));
  // Filling a range equals drawing element by element at the global index.
  std::vector<double> fill(5);
  FillNormal(fill.data(), key, 100, 5, 1.0, 0.02);
  for (int i = 0; i < 5; ++i)
    EXPECT_DOUBLE_EQ(fill[i], 1.0 + 0.02 * NormalFromCounter(key, 100 + i));
}

// The four-at-a-time mask fill decides every index as DropoutKeeps does alone, for runs that start
// and end at every offset within a Philox counter's four words.
TEST(ReferenceRandom, DropoutRunsEqualOneByOne) {
  const uint64_t key = HashKey("dropout-run");
  for (uint64_t first : {0ull, 1ull, 2ull, 3ull, 4ull, 1001ull}) {
    for (int64_t count : {0, 1, 2, 3, 5, 8, 13}) {
      std::vector<int> keeps(static_cast<size_t>(count), -1);
      rng::ForEachDropoutKeep(key, first, count, 0.3f,
                              [&](int64_t i, bool kept) { keeps[size_t(i)] = kept ? 1 : 0; });
      for (int64_t i = 0; i < count; ++i) {
        EXPECT_EQ(keeps[size_t(i)], rng::DropoutKeeps(key, first + uint64_t(i), 0.3f) ? 1 : 0)
            << "first " << first << " count " << count << " i " << i;
      }
    }
  }
  std::vector<float> mask(7);
  FillDropoutMask(mask.data(), key, 6, 7, 0.3);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(mask[size_t(i)], DropoutMaskValue<float>(key, 6 + i, 0.3));
}

TEST(ReferenceRandom, UniformAndNormalMoments) {
  const int n = 100000;
  const uint64_t key = HashKey("moments");
  double su = 0, sn = 0, sn2 = 0;
  for (int i = 0; i < n; ++i) {
    const double u = UniformFromCounter(key, i);
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
    su += u;
    const double z = NormalFromCounter(key, i);
    sn += z;
    sn2 += z * z;
  }
  // Standard errors: uniform mean 0.29/sqrt(n) ~ 1e-3; normal mean 1/sqrt(n) ~ 3e-3, variance
  // sqrt(2/n) ~ 4.5e-3. Bounds at about 5 standard errors.
  EXPECT_NEAR(su / n, 0.5, 5e-3);
  const double mean = sn / n;
  EXPECT_NEAR(mean, 0.0, 1.6e-2);
  EXPECT_NEAR(sn2 / n - mean * mean, 1.0, 2.3e-2);
}

TEST(ReferenceRandom, DropoutRate) {
  const int n = 100000;
  const double p = 0.1;
  std::vector<float> mask(n);
  FillDropoutMask(mask.data(), HashKey("dropout"), 0, n, p);
  int dropped = 0;
  for (float m : mask) {
    if (m == 0.0f) {
      ++dropped;
    } else {
      ASSERT_FLOAT_EQ(m, static_cast<float>(1.0 / 0.9));
    }
  }
  // Standard error sqrt(p (1-p) / n) ~ 9.5e-4.
  EXPECT_NEAR(static_cast<double>(dropped) / n, p, 5e-3);
  FillDropoutMask(mask.data(), HashKey("dropout"), 0, 100, 0.0);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(mask[i], 1.0f);
}

TEST(ReferenceRandom, AttentionMaskSameForEveryHeadSplit) {
  // 4 heads in one shard, or 2 + 2 in two tensor-parallel shards: the same mask per global head.
  const int64_t b = 2, s = 5, h = 4;
  const uint64_t key = HashKey("attn-dropout");
  std::vector<float> whole(b * h * s * s), lo(b * 2 * s * s), hi(b * 2 * s * s);
  FillAttentionDropoutMask(whole.data(), key, b, s, h, 0, h, 0.3);
  FillAttentionDropoutMask(lo.data(), key, b, s, 2, 0, h, 0.3);
  FillAttentionDropoutMask(hi.data(), key, b, s, 2, 2, h, 0.3);
  int zeros = 0;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hh = 0; hh < h; ++hh) {
      const float* shard = hh < 2 ? lo.data() : hi.data();
      for (int64_t e = 0; e < s * s; ++e) {
        const float w = whole[(bi * h + hh) * s * s + e];
        ASSERT_EQ(w, shard[(bi * 2 + hh % 2) * s * s + e]);
        zeros += w == 0.0f;
      }
    }
  }
  EXPECT_GT(zeros, 0);
}

TEST(ReferenceRandom, AttentionMaskIndexedByGlobalSequence) {
  // A micro-batch of one sequence starting at global sequence 1 draws the second sequence of a
  // two-sequence micro-batch starting at 0.
  const int64_t s = 6, h = 3;
  const uint64_t key = HashKey("attn-dropout");
  std::vector<double> two(2 * h * s * s), second(h * s * s);
  FillAttentionDropoutMask(two.data(), key, 2, s, h, 0, h, 0.5);
  FillAttentionDropoutMask(second.data(), key, 1, s, h, 0, h, 0.5, /*batch_begin=*/1);
  for (int64_t e = 0; e < h * s * s; ++e) ASSERT_EQ(second[e], two[h * s * s + e]);
}

TEST(ReferenceAdamW, OneStepByHand) {
  // param 1, grad 0.5, lr 0.1, betas (0.9, 0.999), eps 1e-8, weight decay 0.01, step 1:
  // m = 0.05, v = 0.00025, mhat = 0.5, vhat = 0.25, update = 0.5 / (0.5 + 1e-8);
  // param = 1 - 0.1 (update + 0.01).
  std::vector<double> p = {1.0}, g = {0.5}, m = {0.0}, v = {0.0};
  AdamWUpdate(p.data(), g.data(), m.data(), v.data(), 1, 0.1, 0.9, 0.999, 1e-8, 0.01, 1);
  EXPECT_NEAR(m[0], 0.05, 1e-15);
  EXPECT_NEAR(v[0], 0.00025, 1e-18);
  EXPECT_NEAR(p[0], 1.0 - 0.1 * (0.5 / (0.5 + 1e-8) + 0.01), 1e-15);
  // Step 2 with grad -0.5: m = 0.9*0.05 - 0.05 = -0.005, v = 0.999*0.00025 + 0.00025 = 0.00049975;
  // mhat = -0.005 / 0.19, vhat = 0.00049975 / (1 - 0.999^2).
  const double p1 = p[0];
  g[0] = -0.5;
  AdamWUpdate(p.data(), g.data(), m.data(), v.data(), 1, 0.1, 0.9, 0.999, 1e-8, 0.01, 2);
  const double mhat = -0.005 / 0.19, vhat = 0.00049975 / (1.0 - 0.999 * 0.999);
  EXPECT_NEAR(p[0], p1 - 0.1 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.01 * p1), 1e-14);
}

}  // namespace
}  // namespace ptdp::kernels
