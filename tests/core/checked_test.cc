#include "core/checked.h"

#include <gtest/gtest.h>

namespace ptdp {
namespace {

TEST(CheckedTest, MulAndAdd) {
  int64_t r = 0;
  EXPECT_TRUE(CheckedMul(65536, 65536, &r));
  EXPECT_EQ(r, int64_t(1) << 32);
  EXPECT_FALSE(CheckedMul(int64_t(1) << 32, int64_t(1) << 31, &r));
  EXPECT_FALSE(CheckedAdd(std::numeric_limits<int64_t>::max(), 1, &r));
  EXPECT_TRUE(CheckedAdd(2, 3, &r));
  EXPECT_EQ(r, 5);
}

TEST(CheckedTest, ProductNamesFactors) {
  auto r = CheckedProduct({4000000000000000000, 4}, "model.ffn_hidden");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "model.ffn_hidden: 4000000000000000000 x 4 overflows a 64-bit integer");
  EXPECT_EQ(*CheckedProduct({2, 3, 4}, "x"), 24);
}

TEST(CheckedTest, DoubleToInt64) {
  int64_t r = 0;
  EXPECT_TRUE(DoubleToInt64(1e18, &r));
  EXPECT_EQ(r, 1000000000000000000);
  EXPECT_FALSE(DoubleToInt64(1e19, &r));
  EXPECT_FALSE(DoubleToInt64(9223372036854775808.0, &r));
  EXPECT_FALSE(DoubleToInt64(0.5, &r));
  EXPECT_FALSE(DoubleToInt64(std::nan(""), &r));
}

TEST(CheckedTest, RangeMessages) {
  EXPECT_EQ(CheckRange("tp", int64_t(0), 1, 4096).message(), "tp: 0 is outside [1, 4096]");
  EXPECT_EQ(CheckRange("dropout", 1.0, 0.0, 1.0, true).message(), "dropout: 1 is outside [0, 1)");
  EXPECT_TRUE(CheckRange("dropout", 0.1, 0.0, 1.0, true).ok());
}

}  // namespace
}  // namespace ptdp
