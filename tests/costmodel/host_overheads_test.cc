// The per-iteration costs of 2021 Megatron-LM's bookkeeping that the software profile states
// (core/software.h): host-sync gaps around each pass, the local DDP's gradient copies, the
// optimizer's one-float model-parallel all-reduces and the per-microbatch loss all-reduce. Each
// is checked against a hand derivation on the round profile (tests/costmodel/test_profile.h:
// 1000 GB/s memory-bound, here a 2 us launch).
#include <gtest/gtest.h>

#include "core/model.h"
#include "costmodel/collectives.h"
#include "costmodel/estimate.h"
#include "tests/costmodel/test_profile.h"

namespace ptdp::costmodel {
namespace {

// t = 2, p = 2, d = 4 on 16 GPUs (8 per node), m = 2: ranks are tensor-innermost, then data, then
// pipeline, so stage 0 is ranks 0..7 (node 0) and stage 1 ranks 8..15 (node 1).
ParallelConfig Layout() {
  ParallelConfig c;
  c.precision = Precision::kFp16;
  c.tp = 2;
  c.pp = 2;
  c.dp = 4;
  c.mbs = 1;
  c.global_batch = 8;
  c.schedule = ScheduleKind::k1F1B;
  return c;
}

struct Clusters {
  ClusterSpec plain, with;
};
Clusters Pair() {
  Clusters c{testing::RoundCluster(16), testing::RoundCluster(16)};
  c.plain.profile.kernel_launch_us = testing::S(2);
  c.with.profile.kernel_launch_us = testing::S(2);
  return c;
}

// One gap of a launch (2 us) before every forward and every backward pass, and one more before
// the pipeline exchange after it when p > 1; without a pipeline one.
TEST(HostOverheads, SyncGapPerPass) {
  Clusters k = Pair();
  k.with.software.host_sync_gaps_per_pass = testing::S(1);
  ParallelConfig c = Layout();
  const CostTable a = BuildCostTable(testing::TinyModel(), k.plain, c),
                  b = BuildCostTable(testing::TinyModel(), k.with, c);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(b.Chunk(r, 0).forward.memory - a.Chunk(r, 0).forward.memory, 4e-6, 1e-15);
    EXPECT_NEAR(b.Chunk(r, 0).backward.memory - a.Chunk(r, 0).backward.memory, 4e-6, 1e-15);
    EXPECT_EQ(b.optimizer[r], a.optimizer[r]);
  }
  c.pp = 1;
  c.dp = 8;
  c.global_batch = 16;
  const CostTable a1 = BuildCostTable(testing::TinyModel(), k.plain, c),
                  b1 = BuildCostTable(testing::TinyModel(), k.with, c);
  EXPECT_NEAR(b1.Chunk(0, 0).forward.memory - a1.Chunk(0, 0).forward.memory, 2e-6, 1e-15);
}

// Local DDP flattens, divides and copies back: 12 bytes per parameter element of the rank at
// 1000 GB/s plus a launch per tensor (tiny at t = 2: 12 tensors a layer, 4 layers a stage, and the
// embedding's two or the head's LayerNorm and word copy counted as 2). None with fused
// accumulation (contiguous main-gradient buffers).
TEST(HostOverheads, LocalDdpGradientCopies) {
  Clusters k = Pair();
  k.with.software.ddp_grad_copy_bytes_per_param = testing::S(12);
  ParallelConfig c = Layout();
  const CostTable a = BuildCostTable(testing::TinyModel(), k.plain, c),
                  b = BuildCostTable(testing::TinyModel(), k.with, c);
  for (int r = 0; r < 2; ++r) {
    const double want = double(a.param_elements[r]) * 12 / 1e12 + (4 * 12 + 2) * 2e-6;
    EXPECT_NEAR(b.optimizer[r] - a.optimizer[r], want, 1e-15) << r;
    EXPECT_EQ(b.Chunk(r, 0).BackwardTime(), a.Chunk(r, 0).BackwardTime());
  }
  c.grad_accumulation_fusion = true;
  const CostTable af = BuildCostTable(testing::TinyModel(), k.plain, c),
                  bf = BuildCostTable(testing::TinyModel(), k.with, c);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(bf.optimizer[r], af.optimizer[r]);
}

// The inf check and the gradient norm: two 4-byte all-reduces over the model-parallel group of
// replica 0 (tensor ranks 0, 1 of stage 0 and 8, 9 of stage 1: two nodes), each followed by a
// host read and a launch gap.
TEST(HostOverheads, OptimizerModelParallelAllReduces) {
  Clusters k = Pair();
  k.with.software.optimizer_small_allreduces = testing::S(2);
  const ParallelConfig c = Layout();
  const CostTable a = BuildCostTable(testing::TinyModel(), k.plain, c),
                  b = BuildCostTable(testing::TinyModel(), k.with, c);
  const Seconds one =
      CollectiveTime(k.with.profile, Collective::kAllReduce, 4, SpanOf({0, 1, 8, 9}, 8), 8);
  EXPECT_GT(one, 20e-6);  // crosses nodes: at least the inter-node latency
  for (int r = 0; r < 2; ++r) EXPECT_NEAR(b.optimizer[r] - a.optimizer[r], 2 * (one + 2e-6), 1e-15);
}

// The loss averaged over the data-parallel group (ranks 0, 2, 4, 6: one node) once per
// microbatch, on the chunk that holds the head only; nothing without data parallelism.
TEST(HostOverheads, LossAllReducePerMicrobatch) {
  Clusters k = Pair();
  k.with.software.loss_dp_allreduces_per_microbatch = testing::S(1);
  ParallelConfig c = Layout();
  const CostTable a = BuildCostTable(testing::TinyModel(), k.plain, c),
                  b = BuildCostTable(testing::TinyModel(), k.with, c);
  const Seconds one =
      CollectiveTime(k.with.profile, Collective::kAllReduce, 4, SpanOf({0, 2, 4, 6}, 8), 8);
  EXPECT_GT(one, 0);
  EXPECT_EQ(b.Chunk(0, 0).forward.tp_comm, a.Chunk(0, 0).forward.tp_comm);
  EXPECT_NEAR(b.Chunk(1, 0).forward.tp_comm - a.Chunk(1, 0).forward.tp_comm, one, 1e-15);
  EXPECT_EQ(b.Chunk(1, 0).backward.Total(), a.Chunk(1, 0).backward.Total());
  c.dp = 1;
  c.global_batch = 2;
  const CostTable a1 = BuildCostTable(testing::TinyModel(), k.plain, c),
                  b1 = BuildCostTable(testing::TinyModel(), k.with, c);
  EXPECT_EQ(b1.Chunk(1, 0).forward.tp_comm, a1.Chunk(1, 0).forward.tp_comm);
}

// Megatron-Core's passes over the whole gradient buffer (zero_, the NaN check's norm: 2) and its
// scaling by 1/d (read and write: 2): fp16 with fused accumulation keeps fp32 main gradients, so
// 4 passes x 4 bytes per parameter of the rank at 1000 GB/s plus a launch (2 us) per pass, with
// the step. With d = 1 there is no scaling (Megatron-Core's factor is 1): 2 passes.
TEST(HostOverheads, GradientBufferPasses) {
  Clusters k = Pair();
  k.with.software.grad_buffer_passes = testing::S(2);
  k.with.software.grad_scale_passes = testing::S(2);
  ParallelConfig c = Layout();
  c.grad_accumulation_fusion = true;
  const CostTable a = BuildCostTable(testing::TinyModel(), k.plain, c),
                  b = BuildCostTable(testing::TinyModel(), k.with, c);
  for (int r = 0; r < 2; ++r) {
    const double want = double(a.param_elements[r]) * 4 * 4 / 1e12 + 4 * 2e-6;
    EXPECT_NEAR(b.optimizer[r] - a.optimizer[r], want, 1e-15) << r;
    EXPECT_EQ(b.Chunk(r, 0).BackwardTime(), a.Chunk(r, 0).BackwardTime());
  }
  c.dp = 1;
  c.global_batch = 2;
  const CostTable a1 = BuildCostTable(testing::TinyModel(), k.plain, c),
                  b1 = BuildCostTable(testing::TinyModel(), k.with, c);
  const double want1 = double(a1.param_elements[0]) * 2 * 4 / 1e12 + 2 * 2e-6;
  EXPECT_NEAR(b1.optimizer[0] - a1.optimizer[0], want1, 1e-15);
}

}  // namespace
}  // namespace ptdp::costmodel
