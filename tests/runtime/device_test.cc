#include <gtest/gtest.h>

#include "runtime/backend/device.h"

namespace ptdp::runtime {
namespace {

TEST(CpuDevice, AccountsCurrentAndPeakPerTag) {
  CpuDevice dev;
  {
    auto w = Tensor::Make(&dev, 100, DType::kFp32, MemTag::kWeights).value();
    auto a = Tensor::Make(&dev, 50, DType::kFp32, MemTag::kActivations).value();
    EXPECT_EQ(dev.stats().current_total, 600);
    float first = 1;
    dev.Copy(&first, a.data(), sizeof(float));
    EXPECT_EQ(first, 0.0f);  // zero-filled
    { auto b = Tensor::Make(&dev, 25, DType::kFp32, MemTag::kActivations).value(); }
    { auto m = Tensor::Make(&dev, 8, DType::kU8, MemTag::kActivations).value(); }
    EXPECT_EQ(dev.stats().peak[static_cast<int>(MemTag::kActivations)], 300);  // u8: 1 byte each
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
