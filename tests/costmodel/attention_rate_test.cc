// The fused-attention rate from a profile's attention table (costmodel/attention_rate.h) and its
// choice in FusedAttentionTflops: on-grid points exact, bilinear in log2 s and log2 d between
// them, the edge rate outside, the dropout column for models with dropout, and the scalar keys
// when the profile has no table.
#include <gtest/gtest.h>

#include <cmath>

#include "costmodel/attention_rate.h"
#include "costmodel/layer_cost.h"
#include "costmodel/op_price.h"
#include "tests/costmodel/test_profile.h"

namespace ptdp::costmodel {
namespace {

// s {1024, 4096} x d {64, 128}; rates chosen so that every corner differs.
AttentionTable Table(bool dropout = true) {
  std::vector<AttentionPoint> points = {
      {1024, 64, 200, 120}, {1024, 128, 300, 180}, {4096, 64, 280, 170}, {4096, 128, 420, 260}};
  if (!dropout) {
    for (AttentionPoint& p : points) p.dropout_tflops = 0;
  }
  auto t = AttentionTableFromPoints("test", points, "t");
  PTDP_CHECK(t.ok());
  return *t;
}

// A GPT of sequence length s and head dimension d (4 heads), with dropout p.
ModelSpec Shape(int64_t s, int64_t d, double p) {
  ModelSpec m = testing::TinyModel();
  m.seq_len = s;
  m.heads = 4;
  m.hidden = 4 * d;
  m.dropout = p;
  return m;
}

TEST(AttentionRate, OnGridPointsAreExact) {
  const AttentionTable t = Table();
  EXPECT_EQ(AttentionTableTflops(t, 1024, 64, false), 200.0);
  EXPECT_EQ(AttentionTableTflops(t, 1024, 128, false), 300.0);
  EXPECT_EQ(AttentionTableTflops(t, 4096, 64, false), 280.0);
  EXPECT_EQ(AttentionTableTflops(t, 4096, 128, false), 420.0);
  EXPECT_EQ(AttentionTableTflops(t, 4096, 128, true), 260.0);
  EXPECT_EQ(AttentionTableTflops(t, 1024, 64, true), 120.0);
}

// 2048 is halfway between 1024 and 4096 in log2, 64 sqrt(2) halfway between 64 and 128.
TEST(AttentionRate, BilinearInLogSizes) {
  const AttentionTable t = Table();
  const double mid_d = 64 * std::sqrt(2.0);
  EXPECT_NEAR(AttentionTableTflops(t, 2048, 64, false), (200 + 280) / 2.0, 1e-12);
  EXPECT_NEAR(AttentionTableTflops(t, 2048, 128, false), (300 + 420) / 2.0, 1e-12);
  EXPECT_NEAR(AttentionTableTflops(t, 1024, mid_d, false), (200 + 300) / 2.0, 1e-12);
  EXPECT_NEAR(AttentionTableTflops(t, 2048, mid_d, false), (200 + 300 + 280 + 420) / 4.0, 1e-12);
  EXPECT_NEAR(AttentionTableTflops(t, 2048, mid_d, true), (120 + 180 + 170 + 260) / 4.0, 1e-12);
  // A quarter of the way in log2 s: 1024 -> 4096 is 2 octaves, 1448.15 is half an octave up.
  EXPECT_NEAR(AttentionTableTflops(t, 1024 * std::sqrt(2.0), 64, false), 200 + 0.25 * 80, 1e-12);
}

// Outside the grid the edge rate holds, never an extrapolation.
TEST(AttentionRate, ClampedAtTheEdges) {
  const AttentionTable t = Table();
  EXPECT_EQ(AttentionTableTflops(t, 128, 64, false), 200.0);
  EXPECT_EQ(AttentionTableTflops(t, 1024, 16, false), 200.0);
  EXPECT_EQ(AttentionTableTflops(t, 128, 16, false), 200.0);
  EXPECT_EQ(AttentionTableTflops(t, 32768, 256, false), 420.0);
  EXPECT_EQ(AttentionTableTflops(t, 32768, 64, true), 170.0);
  EXPECT_NEAR(AttentionTableTflops(t, 2048, 256, false), (300 + 420) / 2.0, 1e-12);
  // A one-point axis is that point at every size.
  auto one = AttentionTableFromPoints("test", {{2048, 128, 400, 0}, {4096, 128, 450, 0}}, "t");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(AttentionTableTflops(*one, 2048, 64, false), 400.0);
  EXPECT_EQ(AttentionTableTflops(*one, 2048, 256, false), 400.0);
}

// FusedAttentionTflops reads the table at the model's own s and d, and prefers it to the scalar
// keys; the fused kernel's time follows.
TEST(AttentionRate, ModelsArePricedAtTheirOwnShape) {
  HardwareProfile hw = testing::RoundProfile();
  hw.attention_tflops = testing::S(40);
  hw.attention_dropout_tflops = testing::S(25);
  hw.attention_table = Table();
  EXPECT_EQ(FusedAttentionTflops(Shape(1024, 64, 0.0), hw), 200.0);
  EXPECT_EQ(FusedAttentionTflops(Shape(4096, 128, 0.0), hw), 420.0);
  EXPECT_NEAR(FusedAttentionTflops(Shape(2048, 64, 0.0), hw), 240.0, 1e-12);
  EXPECT_EQ(FusedAttentionTflops(Shape(1024, 64, 0.1), hw), 120.0);
  EXPECT_EQ(FusedAttentionTflops(Shape(4096, 128, 0.1), hw), 260.0);
  // The kernel's time: half of 2 x 2 b h s^2 d FLOPs forward (b 2, 4 heads, t 1) at the rate.
  const ModelSpec m = Shape(1024, 64, 0.0);
  const double causal_forward = 0.5 * 2 * 2.0 * 2 * 4 * 1024.0 * 1024.0 * 64;
  const PieceCost c = FusedAttentionCost(m, hw, 1, 2);
  EXPECT_NEAR(c.forward.gemm, causal_forward / 200e12, 1e-18);
  EXPECT_NEAR(c.backward.gemm, 2.5 * causal_forward / 200e12, 1e-18);
  // An op of the op table is priced at its own shape's rate (d from the op, not the model).
  const auto op = PriceOp("AttentionForward", {2, 4096, 4, 128}, m, hw);
  ASSERT_TRUE(op);
  EXPECT_EQ(op->seconds, FusedAttentionCost(Shape(4096, 128, 0.0), hw, 1, 2).forward.gemm);
}

// The dropout column only where every point has it; else a dropout model takes the scalar
// dropout figure where the profile has one, else the table's rates without dropout.
TEST(AttentionRate, DropoutRatesWhenEveryPointHasOne) {
  HardwareProfile hw = testing::RoundProfile();
  hw.attention_tflops = testing::S(40);
  std::vector<AttentionPoint> points = Table().Points();
  points[3].dropout_tflops = 0;  // one point without a dropout rate
  auto partial = AttentionTableFromPoints("test", points, "t");
  ASSERT_TRUE(partial.ok());
  EXPECT_FALSE(partial->HasDropout());
  EXPECT_TRUE(Table().HasDropout());
  EXPECT_FALSE(Table(false).HasDropout());
  hw.attention_table = *partial;
  EXPECT_EQ(FusedAttentionTflops(Shape(1024, 64, 0.1), hw), 200.0);
  hw.attention_dropout_tflops = testing::S(25);
  EXPECT_EQ(FusedAttentionTflops(Shape(1024, 64, 0.1), hw), 25.0);
  EXPECT_EQ(FusedAttentionTflops(Shape(1024, 64, 0.0), hw), 200.0);
  hw.attention_table = Table();
  EXPECT_EQ(FusedAttentionTflops(Shape(1024, 64, 0.1), hw), 120.0);
}

// Without a table the scalar keys choose as before, whatever the shape.
TEST(AttentionRate, WithoutATableTheScalarKeys) {
  HardwareProfile hw = testing::RoundProfile();
  EXPECT_EQ(FusedAttentionTflops(Shape(1024, 64, 0.1), hw), 0.0);
  hw.attention_tflops = testing::S(40);
  EXPECT_EQ(FusedAttentionTflops(Shape(1024, 64, 0.1), hw), 40.0);
  EXPECT_EQ(FusedAttentionTflops(Shape(4096, 128, 0.0), hw), 40.0);
  hw.attention_dropout_tflops = testing::S(25);
  EXPECT_EQ(FusedAttentionTflops(Shape(1024, 64, 0.1), hw), 25.0);
  EXPECT_EQ(FusedAttentionTflops(Shape(4096, 128, 0.0), hw), 40.0);
}

}  // namespace
}  // namespace ptdp::costmodel
