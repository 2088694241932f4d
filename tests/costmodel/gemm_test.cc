#include "costmodel/gemm.h"

#include <gtest/gtest.h>

#include "tests/costmodel/test_profile.h"

namespace ptdp::costmodel {
namespace {

GemmTable MVarying() {
  // Throughput 100 at m = 128 and 200 at m = 512, flat in n and k.
  GemmTable t;
  t.dtype = "fp16";
  t.source = "test";
  t.m = {128, 512};
  t.n = {64, 4096};
  t.k = {64, 4096};
  t.tflops = {100, 100, 100, 100, 200, 200, 200, 200};
  return t;
}

// log2(256) is halfway between log2(128) and log2(512): (100 + 200) / 2.
TEST(Gemm, InterpolatesInLogSpace) {
  EXPECT_NEAR(GemmTflops(MVarying(), 256, 1000, 1000), 150.0, 1e-9);
  EXPECT_NEAR(GemmTflops(MVarying(), 128, 64, 64), 100.0, 1e-9);
}

// Above the grid the edge holds; below it the time of the smallest size holds: m = 64 runs in the
// time of m = 128, so at half the throughput.
TEST(Gemm, ClampsAboveAndScalesBelow) {
  EXPECT_NEAR(GemmTflops(MVarying(), 1 << 20, 1 << 20, 1 << 20), 200.0, 1e-9);
  EXPECT_NEAR(GemmTflops(MVarying(), 64, 64, 64), 50.0, 1e-9);
}

// 2 m n k / rate: 2 * 1024 * 2048 * 4096 / 100e12 = 1.718e-4 s; batch multiplies the work.
TEST(Gemm, TimeIsFlopsOverRate) {
  const HardwareProfile hw = testing::RoundProfile();
  EXPECT_NEAR(GemmTime(hw, 1024, 2048, 4096), 2.0 * 1024 * 2048 * 4096 / 100e12, 1e-12);
  EXPECT_NEAR(GemmTime(hw, 1024, 2048, 4096, 3), 3 * 2.0 * 1024 * 2048 * 4096 / 100e12, 1e-12);
  // Backward: input gradient and weight gradient, each as many FLOPs as the forward.
  EXPECT_NEAR(GemmBackwardTime(hw, 1024, 2048, 4096), 2 * GemmTime(hw, 1024, 2048, 4096), 1e-12);
}

// With measured backward tables a Linear's backward is priced from them at the forward's (m, n, k):
// input gradient at 50 TFLOP/s (MVarying halved) and weight gradient at 25 (quartered); the batched
// GEMMs of unfused attention still come from the forward table at the transposed shapes.
TEST(Gemm, BackwardFromItsOwnTablesWhenMeasured) {
  HardwareProfile hw = testing::RoundProfile();
  hw.kernel_launch_us = testing::S(0);
  const Seconds from_forward = GemmBackwardTime(hw, 1024, 2048, 4096);
  hw.gemm_backward_data = MVarying();
  hw.gemm_backward_weight = MVarying();
  for (double& t : hw.gemm_backward_data.tflops) t /= 2;
  for (double& t : hw.gemm_backward_weight.tflops) t /= 4;
  const double flops = 2.0 * 256 * 1000 * 1000;  // MVarying: 150 at m = 256, so 75 and 37.5
  EXPECT_NEAR(GemmBackwardTime(hw, 256, 1000, 1000), flops / 75e12 + flops / 37.5e12, 1e-15);
  EXPECT_DOUBLE_EQ(GemmBackwardTime(hw, 1024, 2048, 4096, 2),
                   GemmTime(hw, 1024, 4096, 2048, 2) + GemmTime(hw, 4096, 2048, 1024, 2));
  // One table alone is not used (both or neither).
  hw.gemm_backward_weight = GemmTable{};
  EXPECT_DOUBLE_EQ(GemmBackwardTime(hw, 1024, 2048, 4096), from_forward);
}

// 108 SMs, 256 x 128 tiles; m = 2048, n = 9600: 8 x 75 = 600 tiles in ceil(600/108) = 6 waves of
// 108: 600 / 648 = 0.9259 of the machine works on average.
TEST(Gemm, WaveQuantisation) {
  HardwareProfile hw = testing::RoundProfile();
  EXPECT_DOUBLE_EQ(WaveEfficiency(hw, 2048, 9600), 1.0);  // off by default
  hw.sm_count = testing::S(108);
  hw.gemm_tile_m = testing::S(256);
  hw.gemm_tile_n = testing::S(128);
  EXPECT_NEAR(WaveEfficiency(hw, 2048, 9600), 600.0 / 648.0, 1e-12);
  EXPECT_NEAR(WaveEfficiency(hw, 256 * 108, 128), 1.0, 1e-12);
  EXPECT_NEAR(GemmTime(hw, 2048, 9600, 1000), 2.0 * 2048 * 9600 * 1000 / (100e12 * 600 / 648),
              1e-12);
}

// A derived table (wave quantisation on) has no memory traffic in it: a GEMM takes at least A, B
// and C once at memory_bound_GBps. Attention's scores, m = n = 2048, k = 16, 8 heads: 2 x 2048^2 x
// 16 x 8 FLOPs in 21.5 us at the flat 100 TFLOP/s (every wave full: 8 x 16 x 8 = 1024 tiles on
// 128 SMs), but 2 bytes x 8 x (2 x 2048 x 16 + 2048^2) = 68.2 MB, 68.2 us at 1000 GB/s. A GEMM
// of high intensity keeps its FLOP time; a measured table (no wave quantisation) has no floor.
TEST(Gemm, ADerivedTableHasAMemoryFloor) {
  HardwareProfile hw = testing::RoundProfile();
  const double flop_s = 2.0 * 2048 * 2048 * 16 * 8 / 100e12;
  EXPECT_NEAR(GemmTime(hw, 2048, 2048, 16, 8), flop_s, 1e-15);
  hw.sm_count = testing::S(128);
  hw.gemm_tile_m = testing::S(256);
  hw.gemm_tile_n = testing::S(128);
  EXPECT_NEAR(GemmTime(hw, 2048, 2048, 16, 8), 2.0 * 8 * (2 * 2048 * 16 + 2048.0 * 2048) / 1000e9,
              1e-15);
  EXPECT_NEAR(GemmTime(hw, 2048, 2048, 4096), 2.0 * 2048 * 2048 * 4096 / 100e12, 1e-15);
}

}  // namespace
}  // namespace ptdp::costmodel
