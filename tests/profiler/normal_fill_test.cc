// The profiler's GEMM operand values (profiler/normal_fill.h): standard normals, deterministic per
// (key, index), different per key. The CUDA fill kernel runs this same function.
#include "profiler/normal_fill.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ptdp::profiler {
namespace {

TEST(NormalFill, MomentsOfAStandardNormal) {
  constexpr int kCount = 200000;
  double sum = 0, sum_sq = 0, sum_4 = 0;
  int beyond_two = 0;
  for (int i = 0; i < kCount; ++i) {
    const double x = StandardNormal(7, uint64_t(i));
    ASSERT_TRUE(std::isfinite(x)) << i;
    sum += x;
    sum_sq += x * x;
    sum_4 += x * x * x * x;
    beyond_two += std::fabs(x) > 2.0;
  }
  const double mean = sum / kCount, var = sum_sq / kCount - mean * mean;
  // Standard errors at n = 2e5: mean 0.0022, variance 0.0032, fourth moment ~0.011; bounds at
  // about 5 standard errors. P(|x| > 2) = 0.0455 (standard error 0.00047).
  EXPECT_NEAR(mean, 0.0, 0.011);
  EXPECT_NEAR(var, 1.0, 0.016);
  EXPECT_NEAR(sum_4 / kCount, 3.0, 0.06);  // a uniform or constant fill has 1.8 or 1
  EXPECT_NEAR(double(beyond_two) / kCount, 0.0455, 0.0025);
}

TEST(NormalFill, DeterministicPerKeyAndIndex) {
  EXPECT_EQ(StandardNormal(3, 12345), StandardNormal(3, 12345));
  int equal = 0;
  for (uint64_t i = 0; i < 1000; ++i) equal += StandardNormal(1, i) == StandardNormal(2, i);
  EXPECT_LT(equal, 5);  // two operands filled under different keys are different tensors
}

}  // namespace
}  // namespace ptdp::profiler
