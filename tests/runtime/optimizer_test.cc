#include <gtest/gtest.h>

#include <cmath>

#include "runtime/optim/optimizer.h"

namespace ptdp::runtime {
namespace {

TEST(LearningRate, WarmupThenCosineToMin) {
  OptimizerConfig c;
  c.lr = 1.0;
  c.min_lr = 0.1;
  c.warmup_steps = 10;
  c.decay_steps = 110;
  EXPECT_DOUBLE_EQ(LearningRate(c, 1), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(c, 10), 1.0);
  EXPECT_NEAR(LearningRate(c, 60), 0.55, 1e-12);  // half way: the cosine's midpoint
  EXPECT_NEAR(LearningRate(c, 110), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(LearningRate(c, 500), 0.1);
}

TEST(ClipCoefficient, OnlyAboveTheThreshold) {
  OptimizerConfig c;
  c.clip_grad = 1.0;
  EXPECT_EQ(ClipCoefficient(c, 0.5), 1.0);
  EXPECT_NEAR(ClipCoefficient(c, 4.0), 0.25, 1e-6);
  c.clip_grad = 0;
  EXPECT_EQ(ClipCoefficient(c, 100.0), 1.0);
}

}  // namespace
}  // namespace ptdp::runtime
