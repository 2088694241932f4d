// Reference forward ops against small hand-computed values and structural properties.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/reference/ops.h"
#include "tests/kernels/test_util.h"

namespace ptdp::kernels {
namespace {

using testing::RandomVector;

TEST(ReferenceForward, MatmulHandComputed) {
  // x = [[1, 2]], W = [[1, 0], [0, 1], [1, 1]], bias = [0.5, 0, -1] -> [1.5, 2, 2].
  const std::vector<float> x = {1, 2}, w = {1, 0, 0, 1, 1, 1}, bias = {0.5f, 0, -1};
  std::vector<float> out(3);
  MatmulForward(out.data(), x.data(), w.data(), bias.data(), 1, 2, 3);
  EXPECT_FLOAT_EQ(out[0], 1.5f);
  EXPECT_FLOAT_EQ(out[1], 2.0f);
  EXPECT_FLOAT_EQ(out[2], 2.0f);
  MatmulForward<float>(out.data(), x.data(), w.data(), nullptr, 1, 2, 3);
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[2], 3.0f);
}

TEST(ReferenceForward, LayerNormKnownVector) {
  // x = [1, 2, 3, 4]: mean 2.5, variance 1.25; weight 2, bias 1.
  const std::vector<double> x = {1, 2, 3, 4}, w(4, 2.0), b(4, 1.0);
  std::vector<double> out(4), mean(1), rstd(1);
  LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), 1, 4);
  const double rs = 1.0 / std::sqrt(1.25 + 1e-5);
  EXPECT_DOUBLE_EQ(mean[0], 2.5);
  EXPECT_NEAR(rstd[0], rs, 1e-15);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], (x[i] - 2.5) * rs * 2.0 + 1.0, 1e-14);
}

TEST(ReferenceForward, GeluAtPoints) {
  // Values of 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) computed independently (Python).
  const std::vector<double> x = {0.0, 1.0, -1.0, 2.0, 0.5, 10.0};
  const std::vector<double> want = {
      0.0, 0.8411919906082768, -0.15880800939172324, 1.954597694087775, 0.34571400982514394, 10.0};
  std::vector<double> out(x.size());
  GeluForward(out.data(), x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-14) << "x=" << x[i];
}

// The float GeLU far in its negative tail, where 1 + tanh(u) cancels in double (the tanh form
// returned 0 there): each result is the correctly rounded value of the logistic form in long
// double, x / (1 + exp(-2u)).
TEST(ReferenceForward, GeluFloatNegativeTailIsCorrectlyRounded) {
  const std::vector<float> x = {-3.0f, -5.0f, -6.5f, -8.0f, -9.0f};
  std::vector<float> out(x.size());
  GeluForward(out.data(), x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const long double v = x[i];
    const long double u = 0.79788456080286535588L * (v + 0.044715L * v * v * v);
    const float want = static_cast<float>(v / (1.0L + std::exp(-2.0L * u)));
    EXPECT_NE(want, 0.0f) << "x=" << x[i];
    EXPECT_EQ(out[i], want) << "x=" << x[i];
  }
}

// A window of W keys before each query: probabilities 0 outside i - W .. i, rows still sum to 1,
// a window as long as the sequence is the causal attention itself, and the fused form's
// log-sum-exp and recomputed probabilities agree with the explicit ones.
TEST(ReferenceForward, AttentionWindowMasksEarlierKeys) {
  const int64_t b = 1, s = 6, h = 2, d = 4, window = 2;
  auto qkv = RandomVector(b * s * h * 3 * d, 62);
  std::vector<double> out(b * s * h * d), att(b * h * s * s), full_out(out.size()),
      full_att(att.size()), lse(b * h * s), rebuilt(att.size());
  AttentionForward<double>(out.data(), att.data(), qkv.data(), nullptr, b, s, h, d, 1, window);
  for (int64_t bh = 0; bh < b * h; ++bh) {
    for (int64_t i = 0; i < s; ++i) {
      double row = 0.0;
      for (int64_t j = 0; j < s; ++j) {
        const double p = att[(bh * s + i) * s + j];
        if (j > i || j < i - window) {
          EXPECT_EQ(p, 0.0) << i << " " << j;
        } else {
          EXPECT_GT(p, 0.0) << i << " " << j;
        }
        row += p;
      }
      EXPECT_NEAR(row, 1.0, 1e-14);
    }
  }
  AttentionForward<double>(full_out.data(), full_att.data(), qkv.data(), nullptr, b, s, h, d);
  EXPECT_NE(out, full_out);                // rows past the window differ
  for (int64_t i = 0; i <= window; ++i) {  // rows within reach of every earlier key do not
    for (int64_t hd = 0; hd < h * d; ++hd)
      EXPECT_NEAR(out[i * h * d + hd], full_out[i * h * d + hd], 1e-15);
  }
  std::vector<double> long_out(out.size()), long_att(att.size());
  AttentionForward<double>(long_out.data(), long_att.data(), qkv.data(), nullptr, b, s, h, d, 1,
                           s - 1);
  EXPECT_EQ(long_out, full_out);
  AttentionLogSumExp<double>(lse.data(), qkv.data(), b, s, h, d, 1, window);
  AttentionProbsFromLse<double>(rebuilt.data(), qkv.data(), lse.data(), b, s, h, d, 1, window);
  for (size_t i = 0; i < att.size(); ++i) EXPECT_NEAR(rebuilt[i], att[i], 1e-14);
}

TEST(ReferenceForward, AttentionCausalMaskAndRows) {
  const int64_t b = 2, s = 4, h = 3, d = 4;
  auto qkv = RandomVector(b * s * h * 3 * d, 61);
  std::vector<double> out(b * s * h * d), att(b * h * s * s);
  AttentionForward<double>(out.data(), att.data(), qkv.data(), nullptr, b, s, h, d);
  for (int64_t bh = 0; bh < b * h; ++bh) {
    const double* p = att.data() + bh * s * s;
    // The first position attends only to itself.
    EXPECT_DOUBLE_EQ(p[0], 1.0);
    for (int64_t i = 0; i < s; ++i) {
      double row = 0.0;
      for (int64_t j = 0; j < s; ++j) {
        if (j > i) {
          EXPECT_EQ(p[i * s + j], 0.0);
        }
        row += p[i * s + j];
      }
      EXPECT_NEAR(row, 1.0, 1e-14);
    }
  }
  // So the output at position 0 is v_0 of each head.
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hh = 0; hh < h; ++hh) {
      for (int64_t e = 0; e < d; ++e) {
        const double v0 = qkv[((bi * s) * h + hh) * 3 * d + 2 * d + e];
        EXPECT_DOUBLE_EQ(out[(bi * s) * h * d + hh * d + e], v0);
      }
    }
  }
  // Changing the last position's q, k, v leaves every earlier output unchanged.
  auto qkv2 = qkv;
  for (int64_t i = 0; i < h * 3 * d; ++i) qkv2[((s - 1) * h) * 3 * d + i] += 1.0;
  std::vector<double> out2(out.size());
  AttentionForward<double>(out2.data(), att.data(), qkv2.data(), nullptr, b, s, h, d);
  for (int64_t i = 0; i < (s - 1) * h * d; ++i) EXPECT_EQ(out2[i], out[i]);
}

TEST(ReferenceForward, AttentionTwoPositionsHandComputed) {
  // One head, d = 1: q1 = 2, k0 = 0, k1 = 1, v0 = 3, v1 = 5. Scores at position 1: 0 and 2 (scale
  // 1), so p = [1, e^2] / (1 + e^2) and out1 = (3 + 5 e^2) / (1 + e^2).
  const std::vector<double> qkv = {7, 0, 3, 2, 1, 5};  // [s][h=1][q,k,v][d=1]
  std::vector<double> out(2), att(4);
  AttentionForward<double>(out.data(), att.data(), qkv.data(), nullptr, 1, 2, 1, 1);
  const double e2 = std::exp(2.0);
  EXPECT_DOUBLE_EQ(out[0], 3.0);
  EXPECT_NEAR(out[1], (3.0 + 5.0 * e2) / (1.0 + e2), 1e-14);
  EXPECT_NEAR(att[2], 1.0 / (1.0 + e2), 1e-15);
  // A dropout mask [[1, 0], [2, 0]] keeps only v0 at twice its probability.
  const std::vector<double> mask = {1, 0, 2, 0};
  AttentionForward<double>(out.data(), att.data(), qkv.data(), mask.data(), 1, 2, 1, 1);
  EXPECT_NEAR(out[1], 2.0 * 3.0 / (1.0 + e2), 1e-14);
  EXPECT_NEAR(att[2], 1.0 / (1.0 + e2), 1e-15);  // saved before dropout
}

TEST(ReferenceForward, EmbeddingShardsSumToWhole) {
  const int64_t b = 2, s = 3, c = 4, v = 6;
  const std::vector<int32_t> tokens = {0, 5, 2, 3, 3, 1};
  const auto wte = RandomVector(v * c, 71);
  const auto wpe = RandomVector(s * c, 72);
  std::vector<double> whole(b * s * c), a(b * s * c), bb(b * s * c);
  EmbeddingForward(whole.data(), tokens.data(), wte.data(), wpe.data(), b, s, c, 0, v);
  // Shard 0 holds ids [0, 3) and the positions; shard 1 holds [3, 6).
  EmbeddingForward(a.data(), tokens.data(), wte.data(), wpe.data(), b, s, c, 0, 3);
  EmbeddingForward<double>(bb.data(), tokens.data(), wte.data() + 3 * c, nullptr, b, s, c, 3, 6);
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_DOUBLE_EQ(a[i] + bb[i], whole[i]);
  // Row 1 (token 5, position 1) = wte[5] + wpe[1].
  for (int64_t i = 0; i < c; ++i) EXPECT_DOUBLE_EQ(whole[c + i], wte[5 * c + i] + wpe[c + i]);
}

TEST(ReferenceForward, CrossEntropyUniformIgnoresPadding) {
  // Uniform logits over 10 real ids; the 2 padding columns hold huge values that must not count.
  const int64_t n = 2, v = 12, v_real = 10;
  std::vector<double> logits(n * v, 0.25);
  for (int64_t r = 0; r < n; ++r) logits[r * v + 10] = logits[r * v + 11] = 100.0;
  const std::vector<int32_t> targets = {3, 9};
  std::vector<double> mx(n), sum(n), tl(n), loss(n);
  CrossEntropyLocalStats(mx.data(), sum.data(), tl.data(), logits.data(), targets.data(), n, v, 0,
                         v_real);
  CrossEntropyLoss(loss.data(), mx.data(), sum.data(), tl.data(), n);
  for (int64_t r = 0; r < n; ++r) EXPECT_NEAR(loss[r], std::log(10.0), 1e-14);
}

TEST(ReferenceForward, CrossEntropyTwoShardsEqualUnsplit) {
  // V = 10 padded columns, 9 real; shard 0 = [0, 5), shard 1 = [5, 10).
  const int64_t n = 4, v = 10, v_real = 9, half = 5;
  const auto logits = RandomVector(n * v, 81, 4.0);
  const std::vector<int32_t> targets = {0, 4, 5, 8};
  const std::vector<double> dloss = {1.0, 0.25, 2.0, 1.0};
  std::vector<double> mx(n), sum(n), tl(n), loss(n), dl(n * v);
  CrossEntropyLocalStats(mx.data(), sum.data(), tl.data(), logits.data(), targets.data(), n, v, 0,
                         v_real);
  CrossEntropyLoss(loss.data(), mx.data(), sum.data(), tl.data(), n);
  CrossEntropyBackward(dl.data(), logits.data(), mx.data(), sum.data(), targets.data(),
                       dloss.data(), n, v, 0, v_real);

  // Each shard sees its own [n][5] slice.
  std::vector<double> shard[2];
  for (int k = 0; k < 2; ++k) {
    shard[k].resize(n * half);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < half; ++j) shard[k][r * half + j] = logits[r * v + k * half + j];
  }
  // Each shard's stats are relative to its own max; the sums move to the global max before the
  // sum all-reduce.
  std::vector<double> m0(n), m1(n), gmax(n), s0(n), s1(n), t0(n), t1(n);
  CrossEntropyLocalStats(m0.data(), s0.data(), t0.data(), shard[0].data(), targets.data(), n, half,
                         0, v_real);
  CrossEntropyLocalStats(m1.data(), s1.data(), t1.data(), shard[1].data(), targets.data(), n, half,
                         half, v_real);
  for (int64_t r = 0; r < n; ++r) gmax[r] = std::max(m0[r], m1[r]);  // all-reduce max
  CrossEntropyRescaleSums(s0.data(), m0.data(), gmax.data(), n);
  CrossEntropyRescaleSums(s1.data(), m1.data(), gmax.data(), n);
  std::vector<double> gsum(n), gt(n), gloss(n);
  for (int64_t r = 0; r < n; ++r) {  // all-reduce sum
    gsum[r] = s0[r] + s1[r];
    gt[r] = t0[r] + t1[r];
  }
  CrossEntropyLoss(gloss.data(), gmax.data(), gsum.data(), gt.data(), n);
  for (int64_t r = 0; r < n; ++r) EXPECT_NEAR(gloss[r], loss[r], 1e-13);
  for (int k = 0; k < 2; ++k) {
    std::vector<double> dk(n * half);
    CrossEntropyBackward(dk.data(), shard[k].data(), gmax.data(), gsum.data(), targets.data(),
                         dloss.data(), n, half, k * half, v_real);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < half; ++j)
        EXPECT_NEAR(dk[r * half + j], dl[r * v + k * half + j], 1e-15);
  }
  // A shard of padding only has no real column: its local max is -inf, its sum and target 0, and
  // rescaled to any global max (even -inf) its sum stays 0, not NaN.
  std::vector<double> pad_max(n), pad_sum(n), pad_t(n), any_max = {-INFINITY, 0.0, 3.0, 1e300};
  CrossEntropyLocalStats(pad_max.data(), pad_sum.data(), pad_t.data(), shard[1].data(),
                         targets.data(), n, half, 9, v_real);
  CrossEntropyRescaleSums(pad_sum.data(), pad_max.data(), any_max.data(), n);
  for (int64_t r = 0; r < n; ++r) {
    EXPECT_TRUE(std::isinf(pad_max[r]) && pad_max[r] < 0);
    EXPECT_EQ(pad_sum[r], 0.0);
    EXPECT_EQ(pad_t[r], 0.0);
  }
}

TEST(ReferenceForward, Elementwise) {
  const std::vector<float> a = {1, 2, 3}, b = {0.5f, -2, 4};
  std::vector<float> out(3);
  Add(out.data(), a.data(), b.data(), 3);
  EXPECT_EQ(out, (std::vector<float>{1.5f, 0, 7}));
  Mul(out.data(), a.data(), b.data(), 3);
  EXPECT_EQ(out, (std::vector<float>{0.5f, -4, 12}));
  Accumulate(out.data(), a.data(), 3);
  EXPECT_EQ(out, (std::vector<float>{1.5f, -2, 15}));
  Scale(out.data(), 2.0, 3);
  EXPECT_EQ(out, (std::vector<float>{3, -4, 30}));
  EXPECT_DOUBLE_EQ(SumSquares(a.data(), 3), 14.0);
}

}  // namespace
}  // namespace ptdp::kernels
