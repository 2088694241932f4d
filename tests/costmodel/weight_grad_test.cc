// The weight-gradient part of the backward (CostTable::weight_grad), what a split backward's W
// runs (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): the weight-gradient GEMMs of
// the layers' four Linears and the logits, and the accumulation of the weight gradients.
#include <gtest/gtest.h>

#include "costmodel/calibrate.h"
#include "costmodel/estimate.h"
#include "costmodel/gemm.h"
#include "tests/costmodel/test_profile.h"

namespace ptdp::costmodel {
namespace {

ModelSpec Small() {
  ModelSpec m = testing::TinyModel();
  m.name = "small";
  return m;
}

// The layout the cost-table tests build: fp16, t 2, p 2, d 2, microbatches of 1, global batch 8.
ParallelConfig Fp16T2P2D2() {
  ParallelConfig c;
  c.precision = Precision::kFp16;
  c.tp = 2;
  c.pp = 2;
  c.dp = 2;
  c.mbs = 1;
  c.global_batch = 8;
  return c;
}

TEST(WeightGradient, IsTheBackwardsWeightGemm) {
  const HardwareProfile hw = testing::RoundProfile();
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{64, 96, 32}, {2048, 4096, 1024}}) {
    // Without measured backward tables: input gradient [m,k] = dC B^T, then weight [k,n].
    EXPECT_EQ(GemmBackwardTime(hw, m, n, k),
              GemmTime(hw, m, k, n) + GemmBackwardWeightTime(hw, m, n, k));
    EXPECT_GT(GemmBackwardWeightTime(hw, m, n, k), 0.0);
  }
}

TEST(WeightGradient, ChunksCarryTheLinearsWeightGemms) {
  const ClusterSpec cl = testing::RoundCluster(8);
  const ModelSpec m = Small();
  const ParallelConfig c = Fp16T2P2D2();
  const CostTable t = BuildCostTable(m, cl, c);
  const HardwareProfile& hw = cl.profile;
  const int64_t T = m.seq_len, h = m.hidden, f = m.FfnHidden(), tp = c.tp;
  const double layer =
      GemmBackwardWeightTime(hw, T, 3 * h / tp, h) + GemmBackwardWeightTime(hw, T, h, h / tp) +
      GemmBackwardWeightTime(hw, T, f / tp, h) + GemmBackwardWeightTime(hw, T, h, f / tp);
  const double logits = GemmBackwardWeightTime(hw, T, PaddedVocab(m, tp) / tp, h);
  const double layers = m.layers / c.pp;
  EXPECT_NEAR(t.Chunk(0, 0).weight_grad.gemm, layers * layer, 1e-18);
  EXPECT_NEAR(t.Chunk(1, 0).weight_grad.gemm, layers * layer + logits, 1e-18);
  for (const ChunkCost& cc : t.chunks) {
    EXPECT_GT(cc.weight_grad.Total(), 0.0);
    EXPECT_LT(cc.weight_grad.Total(), cc.backward.Total());
    EXPECT_EQ(cc.weight_grad.tp_comm, 0.0);  // the tensor-parallel all-reduces carry inputs' grads
  }
}

// Unfused accumulation (Megatron-LM 2021) adds each backward's weight gradients to the
// accumulated ones: W's work.
TEST(WeightGradient, HoldsTheUnfusedAccumulation) {
  ClusterSpec plain = testing::RoundCluster(8);
  ClusterSpec unfused = plain;
  unfused.software.grad_accumulate_bytes_per_param = testing::S(6);
  const ParallelConfig c = Fp16T2P2D2();
  const CostTable a = BuildCostTable(Small(), plain, c), b = BuildCostTable(Small(), unfused, c);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(a.Chunk(r, 0).weight_grad.memory, 0.0);
    EXPECT_GT(b.Chunk(r, 0).weight_grad.memory, 0.0);
    EXPECT_NEAR(b.Chunk(r, 0).weight_grad.memory,
                b.Chunk(r, 0).backward.memory - a.Chunk(r, 0).backward.memory, 1e-15);
  }
}

// `ptdp calibrate` and `ptdp train --adapt-calibrate` fit gemm_forward and gemm_backward apart;
// on a profile without backward tables (the `cpu` placeholder) their ratio becomes
// gemm_backward_efficiency, which the reader accepts up to 100. W is the backward's
// weight-gradient GEMM, so it takes the same efficiency: never more than the whole backward,
// which the simulator refuses ("weight-gradient time is more than its whole backward time"; a
// noisy step under load fitted the backward GEMMs 3x faster than the forward ones).
TEST(WeightGradient, TakesTheBackwardEfficiencyTheFitReturns) {
  HardwareProfile start = testing::RoundProfile();
  start.kernel_launch_us = testing::S(5);  // a launch term that the efficiency does not divide
  const Seconds launch = 5e-6;
  for (double ratio : {0.25, 1.0, 2.5, 4.0, 100.0}) {
    CalibrationParams x;
    x.gemm_forward = 0.5;
    x.gemm_backward = 0.5 * ratio;
    const HardwareProfile hw = ApplyCalibration(start, x, "test fit");
    // Both GEMM directions at the forward's fitted rate: efficiency 1.
    const HardwareProfile forward_rate =
        ApplyCalibration(start, {.gemm_forward = 0.5, .gemm_backward = 0.5}, "test fit");
    for (auto [m, n, k] :
         {std::tuple<int64_t, int64_t, int64_t>{64, 96, 32}, {2048, 4096, 1024}, {512, 64, 8192}}) {
      const Seconds w = GemmBackwardWeightTime(hw, m, n, k);
      EXPECT_LE(w, GemmBackwardTime(hw, m, n, k)) << "ratio " << ratio;
      // The FLOP time moves with the efficiency, the launch does not.
      const Seconds w_forward_rate = GemmBackwardWeightTime(forward_rate, m, n, k);
      EXPECT_NEAR(w - launch, (w_forward_rate - launch) / ratio, 1e-12 * w_forward_rate)
          << "ratio " << ratio;
    }
    ClusterSpec cl = testing::RoundCluster(8);
    cl.profile = hw;
    const ParallelConfig c = Fp16T2P2D2();
    for (const ChunkCost& cc : BuildCostTable(Small(), cl, c).chunks) {
      EXPECT_LE(cc.weight_grad.Total(), cc.backward.Total()) << "ratio " << ratio;
    }
  }
}

}  // namespace
}  // namespace ptdp::costmodel
