// The weight-gradient part of the backward (CostTable::weight_grad), what a split backward's W
// runs (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): the weight-gradient GEMMs of
// the layers' four Linears and the logits, and the accumulation of the weight gradients.
#include <gtest/gtest.h>

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
  ParallelConfig c;
  c.precision = Precision::kFp16;
  c.tp = 2;
  c.pp = 2;
  c.dp = 2;
  c.mbs = 1;
  c.global_batch = 8;
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
  ParallelConfig c;
  c.precision = Precision::kFp16;
  c.tp = 2;
  c.pp = 2;
  c.dp = 2;
  c.mbs = 1;
  c.global_batch = 8;
  const CostTable a = BuildCostTable(Small(), plain, c), b = BuildCostTable(Small(), unfused, c);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(a.Chunk(r, 0).weight_grad.memory, 0.0);
    EXPECT_GT(b.Chunk(r, 0).weight_grad.memory, 0.0);
    EXPECT_NEAR(b.Chunk(r, 0).weight_grad.memory,
                b.Chunk(r, 0).backward.memory - a.Chunk(r, 0).backward.memory, 1e-15);
  }
}

}  // namespace
}  // namespace ptdp::costmodel
