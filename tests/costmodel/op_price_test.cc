#include "costmodel/op_price.h"

#include <gtest/gtest.h>

#include "costmodel/gemm.h"
#include "costmodel/layer_cost.h"
#include "tests/costmodel/test_profile.h"

namespace ptdp::costmodel {
namespace {

// A profile whose backward GEMMs are slower than its forward ones, so that a data or weight
// gradient priced from the wrong table shows.
HardwareProfile WithBackwardEfficiency(double efficiency) {
  HardwareProfile hw = testing::RoundProfile();
  hw.kernel_launch_us = testing::S(3);
  hw.gemm_backward_efficiency = testing::S(efficiency);
  return hw;
}

// A backward is its input gradient plus its weight gradient, each priced alone (bit for bit).
TEST(OpPrice, BackwardIsDataPlusWeight) {
  for (const double efficiency : {1.0, 0.5}) {
    const HardwareProfile hw = WithBackwardEfficiency(efficiency);
    EXPECT_EQ(
        GemmBackwardTime(hw, 4096, 768, 3072),
        GemmBackwardDataTime(hw, 4096, 768, 3072) + GemmBackwardWeightTime(hw, 4096, 768, 3072));
  }
}

// "LinearForward 4096x3072x768" is n x c x oc: the GEMM (n, oc, c); its backward ops the two
// halves; the fused GeLU ops and a weight gradient with a bias are marked partial.
TEST(OpPrice, LinearOpsAreTheLayersGemms) {
  const HardwareProfile hw = WithBackwardEfficiency(0.5);
  const ModelSpec model = testing::TinyModel();
  const std::vector<int64_t> dims = {4096, 3072, 768};
  const auto forward = PriceOp("LinearForward", dims, model, hw);
  ASSERT_TRUE(forward);
  EXPECT_EQ(forward->seconds, GemmTime(hw, 4096, 768, 3072));
  EXPECT_FALSE(forward->partial);
  EXPECT_TRUE(PriceOp("LinearForward+GeLU", dims, model, hw)->partial);
  EXPECT_EQ(PriceOp("LinearBackwardData", dims, model, hw)->seconds,
            GemmBackwardDataTime(hw, 4096, 768, 3072));
  EXPECT_TRUE(PriceOp("LinearBackwardData+dGeLU", dims, model, hw)->partial);
  const auto weight = PriceOp("LinearBackwardWeight", dims, model, hw);
  EXPECT_EQ(weight->seconds, GemmBackwardWeightTime(hw, 4096, 768, 3072));
  EXPECT_TRUE(weight->partial);  // tiny has biases: the op sums the bias gradient too
  ModelSpec no_bias = model;
  no_bias.linear_bias = false;
  EXPECT_FALSE(PriceOp("LinearBackwardWeight", dims, no_bias, hw)->partial);
}

// Attention "b x s x heads x d" is FusedAttentionCost of that shape, forward and backward.
TEST(OpPrice, AttentionIsTheFusedCost) {
  HardwareProfile hw = testing::RoundProfile();
  hw.attention_tflops = testing::S(40);
  ModelSpec model = testing::TinyModel();
  model.seq_len = 128;
  model.heads = 2;  // local heads of the op below
  model.hidden = 2 * 32;
  const PieceCost c = FusedAttentionCost(model, hw, 1, 4);
  EXPECT_EQ(PriceOp("AttentionForward", {4, 128, 2, 32}, testing::TinyModel(), hw)->seconds,
            c.forward.gemm);
  EXPECT_EQ(PriceOp("AttentionBackward", {4, 128, 2, 32}, testing::TinyModel(), hw)->seconds,
            c.backward.gemm);
}

// Ops without a per-op price, and shapes that do not fit the op, have none.
TEST(OpPrice, OthersAreNotPriced) {
  const HardwareProfile hw = testing::RoundProfile();
  const ModelSpec model = testing::TinyModel();
  EXPECT_FALSE(PriceOp("LayerNormForward", {4096, 768}, model, hw));
  EXPECT_FALSE(PriceOp("AdamW", {}, model, hw));
  EXPECT_FALSE(PriceOp("LinearForward", {4096, 768}, model, hw));
  EXPECT_FALSE(PriceOp("LinearForward", {4096, 0, 768}, model, hw));
  EXPECT_FALSE(PriceOp("AttentionForward", {4, 128, 2}, model, hw));
}

}  // namespace
}  // namespace ptdp::costmodel
