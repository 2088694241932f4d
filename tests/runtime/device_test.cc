#include <gtest/gtest.h>

#include "runtime/backend/device.h"

namespace ptdp::runtime {
namespace {

TEST(CpuDevice, AccountsCurrentAndPeakPerTag) {
  CpuDevice dev;
  {
    auto w = Buffer<float>::Make(&dev, 100, MemTag::kWeights).value();
    auto a = Buffer<float>::Make(&dev, 50, MemTag::kActivations).value();
    EXPECT_EQ(dev.stats().current_total, 600);
    EXPECT_EQ(a[0], 0.0f);  // zero-filled
    { auto b = Buffer<float>::Make(&dev, 25, MemTag::kActivations).value(); }
    EXPECT_EQ(dev.stats().peak[static_cast<int>(MemTag::kActivations)], 300);
    EXPECT_EQ(dev.stats().peak_total, 700);
    EXPECT_EQ(dev.stats().current_total, 600);
  }
  EXPECT_EQ(dev.stats().current_total, 0);
  EXPECT_EQ(dev.stats().peak_total, 700);
  dev.ResetPeak();
  EXPECT_EQ(dev.stats().peak_total, 0);
}

}  // namespace
}  // namespace ptdp::runtime
