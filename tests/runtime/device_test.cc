#include <cmath>

#include <gtest/gtest.h>

#include "runtime/backend/device.h"
#include "runtime/backend/guard_device.h"

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
    EXPECT_TRUE(std::isnan(first));  // poisoned: Device::Alloc promises no contents
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

// The guard device must fault on host access outside its calls, and allow it inside them.
TEST(GuardDeviceDeathTest, HostAccessOutsideOpsFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  GuardDevice dev;
  auto t = Tensor::Make(&dev, 16, DType::kFp32, MemTag::kActivations).value();
  ASSERT_TRUE(dev.ops()->Fill(t.ref(), 2.0).ok());  // inside an op: fine
  float host = 0;
  dev.Copy(&host, t.data(), sizeof(float));  // through the device's copy: fine
  EXPECT_EQ(host, 2.0f);
  EXPECT_DEATH({ host = static_cast<volatile float*>(t.data())[3]; }, "");
  EXPECT_DEATH({ static_cast<volatile float*>(t.data())[0] = 1.0f; }, "");
}

}  // namespace
}  // namespace ptdp::runtime
