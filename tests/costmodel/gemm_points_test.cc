// The exact GEMM points of a profile (core/gemm_points.h) in the cost model: a Linear GEMM at a
// point's shape is priced from the point (forward and both backward kinds, no wave quantisation),
// every other GEMM from the tables bit for bit, and `ptdp calibrate`'s multiples move a point as
// they move the table entry at the same shape.
#include <gtest/gtest.h>

#include "core/gemm_points.h"
#include "costmodel/calibrate.h"
#include "costmodel/gemm.h"
#include "costmodel/op_price.h"
#include "tests/costmodel/test_profile.h"

namespace ptdp::costmodel {
namespace {

// RoundProfile (forward 100 TFLOP/s) with backward tables at 50 and 25, a launch cost and wave
// quantisation on, so that a point's price differs from the grid's in every term.
HardwareProfile WithBackwardTables() {
  HardwareProfile hw = testing::RoundProfile();
  hw.kernel_launch_us = testing::S(5);
  hw.gemm_backward_data = hw.gemm;
  hw.gemm_backward_weight = hw.gemm;
  for (double& t : hw.gemm_backward_data.tflops) t = 50;
  for (double& t : hw.gemm_backward_weight.tflops) t = 25;
  hw.sm_count = testing::S(132);
  hw.gemm_tile_m = testing::S(128);
  hw.gemm_tile_n = testing::S(256);
  return hw;
}

constexpr int64_t kM = 32768, kN = 2304, kK = 768;  // gpt2-124m's QKV at mbs 32

HardwareProfile WithPoint() {
  HardwareProfile hw = WithBackwardTables();
  hw.gemm_points.source = "test";
  hw.gemm_points.points = {{kM, kN, kK, 400, 300, 200}, {kM, 768, 768, 350, 250, 150}};
  return hw;
}

// 2 m n k FLOPs at the point's rate, plus the launch: the wave quantisation (which would slow
// the grid's price of this shape) is not applied again to a rate timed at the shape.
TEST(GemmPoints, ExactHitPricesEveryKindFromThePoint) {
  const HardwareProfile hw = WithPoint();
  const double flops = 2.0 * kM * kN * kK, launch = 5e-6;
  EXPECT_DOUBLE_EQ(GemmTime(hw, kM, kN, kK), flops / 400e12 + launch);
  EXPECT_DOUBLE_EQ(GemmBackwardDataTime(hw, kM, kN, kK), flops / 300e12 + launch);
  EXPECT_DOUBLE_EQ(GemmBackwardWeightTime(hw, kM, kN, kK), flops / 200e12 + launch);
  EXPECT_DOUBLE_EQ(GemmBackwardTime(hw, kM, kN, kK),
                   GemmBackwardDataTime(hw, kM, kN, kK) + GemmBackwardWeightTime(hw, kM, kN, kK));
  // The grid would price it slower (100, 50, 25 TFLOP/s): the point is what is used.
  const HardwareProfile grid = WithBackwardTables();
  EXPECT_GT(GemmTime(grid, kM, kN, kK), GemmTime(hw, kM, kN, kK));
  // `ptdp compare --op-times` prices a LinearForward (dims tokens, in, out) through the same call.
  const auto op = PriceOp("LinearForward", {kM, kK, kN}, testing::TinyModel(), hw);
  ASSERT_TRUE(op.has_value());
  EXPECT_DOUBLE_EQ(op->gemm, GemmTime(hw, kM, kN, kK));
}

// A shape off every point by one in any coordinate, the point's shape transposed, and a batched
// call at the point's shape (attention's products, not a Linear) are priced as without points.
TEST(GemmPoints, MissFallsBackToTheGridBitForBit) {
  const HardwareProfile with = WithPoint(), without = WithBackwardTables();
  const int64_t shapes[][4] = {{kM + 1, kN, kK, 1}, {kM, kN + 1, kK, 1}, {kM, kN, kK - 1, 1},
                               {kM, kK, kN, 1},     {kN, kM, kK, 1},     {kM, kN, kK, 2}};
  for (const auto& s : shapes) {
    const int64_t m = s[0], n = s[1], k = s[2], b = s[3];
    EXPECT_EQ(GemmTime(with, m, n, k, b), GemmTime(without, m, n, k, b)) << m << " " << n;
    EXPECT_EQ(GemmBackwardTime(with, m, n, k, b), GemmBackwardTime(without, m, n, k, b));
    if (b != 1) continue;
    EXPECT_EQ(GemmBackwardDataTime(with, m, n, k), GemmBackwardDataTime(without, m, n, k));
    EXPECT_EQ(GemmBackwardWeightTime(with, m, n, k), GemmBackwardWeightTime(without, m, n, k));
  }
}

// A point holding the grid's own rates at a grid shape prices as the grid does (no wave
// quantisation here); after calibration with every GEMM multiple moved it still does: the
// points scale with their kind's multiple and gemm_size about their own table's mean.
TEST(GemmPoints, CalibrationScalesPointsAsTheTables) {
  HardwareProfile grid = testing::RoundProfile();
  grid.gemm.m = {1024, 65536};  // both points are entries of every table
  grid.gemm_backward_data = grid.gemm_backward_weight = grid.gemm;
  for (double& t : grid.gemm_backward_data.tflops) t = 60;
  for (double& t : grid.gemm_backward_weight.tflops) t = 30;
  HardwareProfile with = grid;
  with.gemm_points.source = "test";
  with.gemm_points.points = {{65536, 1, 1, 100, 60, 30}, {1024, 1, 1, 100, 60, 30}};
  CalibrationParams x;
  x.gemm_forward = 1.5;
  x.gemm_backward = 0.8;
  x.gemm_size = 1.1;
  const HardwareProfile g = ApplyCalibration(grid, x, "fit"), p = ApplyCalibration(with, x, "fit");
  for (const int64_t m : {int64_t(65536), int64_t(1024)}) {
    EXPECT_DOUBLE_EQ(GemmTime(p, m, 1, 1), GemmTime(g, m, 1, 1)) << m;
    EXPECT_DOUBLE_EQ(GemmBackwardDataTime(p, m, 1, 1), GemmBackwardDataTime(g, m, 1, 1)) << m;
    EXPECT_DOUBLE_EQ(GemmBackwardWeightTime(p, m, 1, 1), GemmBackwardWeightTime(g, m, 1, 1)) << m;
  }
  EXPECT_NE(GemmTime(p, 1024, 1, 1), GemmTime(with, 1024, 1, 1));  // it did move
  EXPECT_NE(p.gemm_points.source.find("(starting points: test)"), std::string::npos);
}

// The shapes the layers and the head of a model run (layer_cost.cc's arguments): tiny at t 2,
// mbs 2.
TEST(GemmPoints, LinearGemmShapesOfAModel) {
  ModelSpec m = testing::TinyModel();  // h 64, 4 heads, s 32, V 256
  const std::vector<GemmShape> want = {
      {64, 96, 64}, {64, 64, 32}, {64, 128, 64}, {64, 64, 128}, {64, PaddedVocab(m, 2) / 2, 64}};
  EXPECT_EQ(LinearGemmShapes(m, /*tp=*/2, /*mbs=*/2), want);
}

}  // namespace
}  // namespace ptdp::costmodel
