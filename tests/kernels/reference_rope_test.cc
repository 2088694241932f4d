// YaRN's frequencies and concentration (kernels/reference/rope.h) against numbers worked out by
// hand from DeepSeek-V3's and Kimi K2's config.json, and the rotation's scaling and its transpose.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/reference/ops.h"
#include "kernels/reference/qkv_layout.h"
#include "kernels/reference/rope.h"
#include "tests/kernels/test_util.h"

namespace ptdp::kernels {
namespace {

RopeFreqs Yarn(double base, double factor, double original, double beta_fast, double beta_slow) {
  RopeFreqs r{base, factor, 1, 4, original};
  r.yarn = true;
  r.beta_fast = beta_fast;
  r.beta_slow = beta_slow;
  return r;
}

// DeepSeek-V3 (64 rotated features, base 10000, factor 40, original 4096, betas 32 and 1): the
// ramp's ends are 64 ln(4096 / (2 pi 32)) / (2 ln 10000) = 10.47, floored to 10, and
// 64 ln(4096 / 2 pi) / (2 ln 10000) = 22.51, raised to 23. Pairs up to 10 keep their frequency,
// pairs from 23 on are divided by 40, and pair e between takes (1 - r) f + r f / 40 with
// r = (e - 10) / 13.
TEST(ReferenceRope, YarnKeepsFastPairsDividesSlowOnesAndRampsBetween) {
  const RopeFreqs yarn = Yarn(10000, 40, 4096, 32, 1);
  const RopeFreqs plain{10000};
  for (int64_t e = 0; e < 32; ++e) {
    const double f = RopeInvFreq<double>(e, 64, plain);
    const double g = RopeInvFreq<double>(e, 64, yarn);
    const double r = e <= 10 ? 0.0 : e >= 23 ? 1.0 : double(e - 10) / 13.0;
    EXPECT_NEAR(g, (1 - r) * f + r * f / 40, 1e-15 * f) << e;
    // The float form (the GPU's) within float rounding of the double one.
    EXPECT_NEAR(RopeInvFreq<float>(e, 64, yarn), g, 1e-5 * g) << e;
  }
  EXPECT_EQ(RopeInvFreq<double>(10, 64, yarn), RopeInvFreq<double>(10, 64, plain));
  EXPECT_EQ(RopeInvFreq<double>(23, 64, yarn), RopeInvFreq<double>(23, 64, plain) / 40);
}

// Kimi K2's equal betas (1 and 1, base 50000): both ends are 64 ln(4096 / 2 pi) / (2 ln 50000) =
// 19.16, so the ramp is one pair wide, 19 to 20: 19 and below kept, 20 and above divided by 32.
TEST(ReferenceRope, YarnWithEqualBetasStepsBetweenTwoPairs) {
  const RopeFreqs yarn = Yarn(50000, 32, 4096, 1, 1);
  const RopeFreqs plain{50000};
  for (int64_t e = 0; e < 32; ++e) {
    const double f = RopeInvFreq<double>(e, 64, plain);
    EXPECT_EQ(RopeInvFreq<double>(e, 64, yarn), e <= 19 ? f : f / 32) << e;
  }
}

// The concentration scales each turned pair's length by attention_factor and leaves the features
// RoPE does not turn; the inverse is the transpose, so forward then inverse scales the turned
// features by its square.
TEST(ReferenceRope, AttentionFactorScalesTurnedPairsAndTheInverseIsTheTranspose) {
  RotaryDims dims;
  dims.b = 2;
  dims.s = 5;
  dims.h = 2;
  dims.d = 8;
  dims.group = 1;
  dims.rope = Yarn(100, 8, 16, 32, 1);
  dims.rope.percent = 0.5;  // the first 4 features of each head, in pairs (0, 2) and (1, 3)
  dims.rope.attention_factor = 1.25;
  const QkvLayout row{dims.h, dims.d, dims.group};
  const std::vector<double> x = testing::RandomVector(dims.b * dims.s * row.Width(), 71);
  std::vector<double> y = x;
  RotaryEmbedding(y.data(), dims, false);
  for (int64_t n = 0; n < dims.b * dims.s; ++n) {
    for (int64_t head = 0; head < 2 * dims.h; ++head) {  // the queries, then the keys
      const int64_t at = n * row.Width() + (head < dims.h ? row.Q(head) : row.KvOf(head - dims.h));
      for (int64_t e = 0; e < 2; ++e) {
        const double before = std::hypot(x[at + e], x[at + e + 2]);
        EXPECT_NEAR(std::hypot(y[at + e], y[at + e + 2]), 1.25 * before, 1e-12) << n << head;
      }
      for (int64_t e = 4; e < 8; ++e) EXPECT_EQ(y[at + e], x[at + e]) << n << head << e;
    }
  }
  RotaryEmbedding(y.data(), dims, true);
  for (int64_t n = 0; n < dims.b * dims.s; ++n) {
    for (int64_t part = 0; part < 3; ++part) {
      for (int64_t hh = 0; hh < dims.h; ++hh) {
        const int64_t at = n * row.Width() + (part == 0 ? row.Q(hh) : row.KvOf(hh)) +
                           (part == 2 ? dims.d : 0);  // the value follows the key
        for (int64_t e = 0; e < 8; ++e) {
          const double scale = part < 2 && e < 4 ? 1.25 * 1.25 : 1.0;
          EXPECT_NEAR(y[at + e], scale * x[at + e], 1e-12) << n << part << hh << e;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ptdp::kernels
