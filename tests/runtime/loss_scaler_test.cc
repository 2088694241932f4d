// The fp16 loss scaler the trainer uses (runtime/optim/loss_scaler.h): an overflow skips the step
// and halves the scale (not below 1), `window` clean steps in a row double it, an overflow resets
// the count; bf16 and fp32 keep a fixed scale of 1 and never skip a finite step.
#include "runtime/optim/loss_scaler.h"

#include <gtest/gtest.h>

namespace ptdp::runtime {
namespace {

TEST(LossScaler, HalvesOnOverflowAndDoublesAfterTheWindow) {
  LossScaler s(1024, /*window=*/3, /*dynamic=*/true);
  EXPECT_FALSE(s.Update(true));  // skipped, halved
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_TRUE(s.Update(false));
  EXPECT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_TRUE(s.Update(false));  // third clean step in a row: doubled
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_TRUE(s.Update(false));
  EXPECT_FALSE(s.Update(true));  // resets the clean count
  EXPECT_EQ(s.scale(), 512);
  EXPECT_TRUE(s.Update(false));
  EXPECT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.skipped_steps(), 2);
}

TEST(LossScaler, NeverBelowOne) {
  LossScaler s(4, 1000, true);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(s.Update(true));
  EXPECT_EQ(s.scale(), 1);
}

TEST(LossScaler, FixedScaleWithoutDynamicScaling) {
  LossScaler s(65536, 2, /*dynamic=*/false);
  EXPECT_EQ(s.scale(), 1);
  EXPECT_TRUE(s.Update(false));
  EXPECT_TRUE(s.Update(false));
  EXPECT_TRUE(s.Update(false));
  EXPECT_EQ(s.scale(), 1);
  EXPECT_FALSE(s.Update(true));  // a non-finite gradient still skips the step
  EXPECT_EQ(s.scale(), 1);
}

}  // namespace
}  // namespace ptdp::runtime
