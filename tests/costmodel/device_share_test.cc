// A rank on a share of the device (HardwareProfile::device_share, MPS clients or MIG slices): its
// kernels cost what the whole device takes for 1 / share copies of them side by side.
#include <gtest/gtest.h>

#include "core/cluster.h"
#include "core/model.h"
#include "core/software.h"
#include "costmodel/estimate.h"
#include "costmodel/gemm.h"
#include "costmodel/layer_cost.h"
#include "tests/costmodel/test_profile.h"

namespace ptdp::costmodel {
namespace {

HardwareProfile Quarter(HardwareProfile p) {
  p.device_share = {0.25, "test: four ranks on one device"};
  return p;
}

// A GEMM on a quarter is four of it on the whole device (one batched call: 4 m rows), each
// backward GEMM likewise, and a memory-bound pass moves its bytes at a quarter of the bandwidth.
TEST(DeviceShare, AKernelIsItsCopiesOnTheWholeDevice) {
  HardwareProfile whole = testing::RoundProfile();
  // A table that rises with m, so that the copies' larger GEMM runs at a higher rate.
  whole.gemm.tflops = {10, 10, 10, 10, 100, 100, 100, 100};
  whole.kernel_launch_us = testing::S(3);
  const HardwareProfile quarter = Quarter(whole);
  const int64_t m = 512, n = 768, k = 768;
  const double launch = 3e-6;
  EXPECT_NEAR(GemmTime(quarter, m, n, k), GemmTime(whole, m, n, k, /*batch=*/4), 1e-15);
  // Longer than one on the whole device, shorter than four one after the other (the copies' larger
  // GEMM runs at the table's higher rate).
  EXPECT_GT(GemmTime(quarter, m, n, k), GemmTime(whole, m, n, k));
  EXPECT_LT(GemmTime(quarter, m, n, k) - launch, 4 * (GemmTime(whole, m, n, k) - launch));
  EXPECT_NEAR(GemmBackwardTime(quarter, m, n, k), GemmBackwardTime(whole, m, n, k, 4), 1e-15);
  EXPECT_NEAR(MemoryBoundTime(quarter, 1e9, 2) - 2 * launch,
              4 * (MemoryBoundTime(whole, 1e9, 2) - 2 * launch), 1e-15);
}

// The measured backward tables: the input gradient's copies add rows, the weight gradient's add
// output columns (its rows are the reduction): the whole device's time for 4 m and for 4 n.
TEST(DeviceShare, BackwardTablesGrowTheOutputTiles) {
  HardwareProfile whole = testing::RoundProfile();
  whole.gemm_backward_data = whole.gemm;
  whole.gemm_backward_weight = whole.gemm;
  whole.gemm_backward_data.tflops = {10, 10, 10, 10, 100, 100, 100, 100};    // rises with m
  whole.gemm_backward_weight.tflops = {10, 10, 100, 100, 10, 10, 100, 100};  // rises with n
  const HardwareProfile quarter = Quarter(whole);
  const int64_t m = 512, n = 768, k = 768;
  EXPECT_NEAR(GemmBackwardDataTime(quarter, m, n, k), GemmBackwardDataTime(whole, 4 * m, n, k),
              1e-15);
  EXPECT_NEAR(GemmBackwardWeightTime(quarter, m, n, k), GemmBackwardWeightTime(whole, m, 4 * n, k),
              1e-15);
}

// bench/gpu/adapt_stage.sh's model on the shipped H200 profile, four pipeline stages, the closed
// form: on the whole GPU a microbatch of 2 runs the step 14% faster than 1 (small GEMMs leave SMs
// idle); on a quarter of the GPU the GEMMs of microbatch 1 already fill it and 2 gains nothing
// (-2.4%: more bubble for no faster GEMM).
TEST(DeviceShare, ALargerMicrobatchGainsLessOnAShare) {
  ModelSpec m;
  m.name = "adapt";
  m.layers = 24;
  m.hidden = 768;
  m.heads = 12;
  m.ffn_hidden = 3072;
  m.seq_len = 1024;
  m.vocab = 50257;
  auto whole = LoadCluster("h200-measured", 4);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  whole->software = *LoadSoftware("ptdp");  // the runtime that adapt_stage.sh runs
  ClusterSpec quarter = *whole;
  quarter.profile = Quarter(whole->profile);
  auto step = [&](const ClusterSpec& cluster, int mbs) {
    ParallelConfig c;
    c.pp = 4;
    c.mbs = mbs;
    c.global_batch = 16;
    c.precision = Precision::kBf16;
    c.fused_attention = true;
    return Predict(m, cluster, c, BuildCostTable(m, cluster, c)).iteration_s;
  };
  const double whole_gain = step(*whole, 1) / step(*whole, 2) - 1;
  const double quarter_gain = step(quarter, 1) / step(quarter, 2) - 1;
  EXPECT_GT(whole_gain, 0.10);
  EXPECT_LT(quarter_gain, 0.03);
  EXPECT_GT(step(quarter, 1), 2 * step(*whole, 1));
}

}  // namespace
}  // namespace ptdp::costmodel
