#include "costmodel/estimate.h"

#include <gtest/gtest.h>

#include "core/cluster.h"
#include "core/ledger.h"
#include "core/software.h"
#include "costmodel/layer_cost.h"
#include "tests/costmodel/test_profile.h"

namespace ptdp::costmodel {
namespace {

CostTable Uniform(int pp, int vp, double f, double b) {
  CostTable t;
  t.pp = pp;
  t.vp = vp;
  t.chunks.resize(pp * vp);
  for (auto& c : t.chunks) {
    c.forward.gemm = f;
    c.backward.gemm = b;
  }
  t.p2p_link.assign(pp, LinkCost{0, 1e9, false});
  t.dp_allreduce.assign(pp, 0.0);
  t.embedding_allreduce.assign(pp, 0.0);
  t.optimizer.assign(pp, 0.0);
  t.param_elements.assign(pp, 0);
  return t;
}

// p = 4, m = 8, t_f = 1, t_b = 2, no communication: ideal 8 * 3 = 24, bubble (p-1)/m = 3/8 of it
// = 9, total 33 = (m + p - 1)(t_f + t_b), the paper's eq. (1).
TEST(Pipeline, ClosedFormBubble) {
  ParallelConfig c;
  c.pp = 4;
  c.global_batch = 8;
  const PipelineTime pt = ClosedFormPipeline().Time(Uniform(4, 1, 1, 2), c);
  EXPECT_DOUBLE_EQ(pt.bubble, 9.0);
  EXPECT_DOUBLE_EQ(pt.total, 33.0);
  // Interleaved, v = 2 chunks of half the work: the bubble shrinks by v: 3/(2*8) * 24 = 4.5.
  c.vp = 2;
  c.schedule = ScheduleKind::kInterleaved;
  const PipelineTime pi = ClosedFormPipeline().Time(Uniform(4, 2, 0.5, 1), c);
  EXPECT_DOUBLE_EQ(pi.bubble, 4.5);
  EXPECT_DOUBLE_EQ(pi.total, 28.5);
}

// The zero-bubble closed forms (Qi et al. 2024, Table 1) with T_F = 1, T_B = 2 of which T_W = 0.5
// is the weight half (so the input half is 1.5): ZB-H1 (p-1)(T_F + T_B_input - T_W) = 3 * 2 = 6,
// ZB-H2 (p-1)(T_F + T_B_input - 2 T_W) = 3 * 1.5 = 4.5; with T_W = T_F = T_B_input = 1 (T_B = 2)
// ZB-H2 has no bubble. The ideal is 1F1B's, m (T_F + T_B) = 24.
TEST(Pipeline, ZeroBubbleClosedForms) {
  ParallelConfig c;
  c.pp = 4;
  c.global_batch = 8;
  CostTable t = Uniform(4, 1, 1, 2);
  for (auto& chunk : t.chunks) chunk.weight_grad.gemm = 0.5;
  c.schedule = ScheduleKind::kZbH1;
  EXPECT_DOUBLE_EQ(ClosedFormPipeline().Time(t, c).bubble, 6.0);
  EXPECT_DOUBLE_EQ(ClosedFormPipeline().Time(t, c).total, 30.0);
  c.schedule = ScheduleKind::kZbH2;
  EXPECT_DOUBLE_EQ(ClosedFormPipeline().Time(t, c).bubble, 4.5);
  for (auto& chunk : t.chunks) chunk.weight_grad.gemm = 1.0;
  EXPECT_DOUBLE_EQ(ClosedFormPipeline().Time(t, c).bubble, 0.0);
  c.schedule = ScheduleKind::kZbH1;  // (p-1)(1 + 1 - 1)
  EXPECT_DOUBLE_EQ(ClosedFormPipeline().Time(t, c).bubble, 3.0);
}

// Each microbatch crosses 2 v messages on the critical path of every rank: with 1 MB at 1 GB/s
// (1 ms each) and no latency, T_r = 3 + 2 * 1e-3.
TEST(Pipeline, P2PCountsTwoTransfersPerChunk) {
  CostTable t = Uniform(2, 1, 1, 2);
  t.p2p_bytes = 1000000;
  const auto per = StageMicrobatchTimes(t);
  EXPECT_NEAR(per[0], 3.002, 1e-12);
}

// Throughput follows the iteration time: eq. (3) FLOPs / (iteration x GPUs), with B = 16, s = 32,
// l = 8, h = 64, V = 256: 96 B s l h^2 (1 + s/6h + V/16lh). The iteration is the closed form's
// (1 + (p - 1)/m) m max_r T_r plus the slowest rank's tail (m = 16 / (2 x 2) = 4, p = 2).
TEST(Predict, ThroughputFromIterationTime) {
  const ClusterSpec cl = testing::RoundCluster(8);
  ParallelConfig c;
  c.precision = Precision::kFp16;
  c.tp = 2;
  c.pp = 2;
  c.dp = 2;
  c.mbs = 2;
  c.global_batch = 16;
  c.recompute = Recompute::kFull;
  const CostTable t = BuildCostTable(testing::TinyModel(), cl, c);
  const Prediction p = Predict(testing::TinyModel(), cl, c, t);
  const double B = 16, s = 32, l = 8, h = 64, V = 256;
  const double eq3 = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  EXPECT_NEAR(p.tflops_per_gpu, eq3 / p.iteration_s / 8 / 1e12, 1e-9);
  EXPECT_LT(p.model_tflops_per_gpu, p.tflops_per_gpu);
  EXPECT_NEAR(p.tokens_per_s, 16 * 32 / p.iteration_s, 1e-6);
  const std::vector<Seconds> per = StageMicrobatchTimes(t);
  const double tmax = std::max(per[0], per[1]);
  double tail = 0;
  for (int r = 0; r < 2; ++r) {
    tail = std::max(tail, t.dp_allreduce[r] + t.embedding_allreduce[r] + t.optimizer[r]);
  }
  EXPECT_NEAR(p.iteration_s, (1 + 1.0 / 4) * 4 * tmax + tail, 1e-12);
  ASSERT_EQ(p.memory.size(), 2u);
}

// The planner's memory per rank is the ledger's MemoryOf with the runtime's transient workspace
// plus the profile's workspace (1 GiB on the round profile): fp16 without fusion, 2 + 2 + 12 = 16
// bytes per parameter; bf16, 2 + 4 + 12.
TEST(Predict, MemoryIsTheLedgersPlusWorkspace) {
  const ClusterSpec cl = testing::RoundCluster(8);
  for (Precision precision : {Precision::kFp16, Precision::kBf16}) {
    for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kInterleaved}) {
      ParallelConfig c;
      c.precision = precision;
      c.tp = 2;
      c.pp = 2;
      c.dp = 2;
      c.mbs = 1;
      c.global_batch = 8;
      c.schedule = kind;
      c.vp = kind == ScheduleKind::kInterleaved ? 2 : 1;
      c.recompute = Recompute::kFull;
      const CostTable t = BuildCostTable(testing::TinyModel(), cl, c);
      const Prediction p = Predict(testing::TinyModel(), cl, c, t);
      ASSERT_EQ(p.memory.size(), 2u);
      const int per_param = precision == Precision::kFp16 ? 16 : 18;
      for (int r = 0; r < 2; ++r) {
        const MemoryLedger l = MemoryOf(testing::TinyModel(), c, r);
        const StageMemory& s = p.memory[size_t(r)];
        EXPECT_EQ(s.weights, l.weights);
        EXPECT_EQ(s.grads, l.grads);
        EXPECT_EQ(s.optimizer, l.optimizer);
        EXPECT_EQ(s.activations, l.activations);
        EXPECT_EQ(s.transient, l.workspace);
        EXPECT_GT(s.transient, 0);
        EXPECT_EQ(s.workspace, Bytes(1) << 30);
        EXPECT_EQ(s.Total(), l.TotalWithWorkspace() + (Bytes(1) << 30));
        EXPECT_EQ(s.weights + s.grads + s.optimizer, per_param * t.param_elements[size_t(r)]);
      }
    }
  }
}

// Unfused gradient accumulation (Megatron-LM of 2021): after the first microbatch each backward
// adds its weight gradients in place, `bytes` per parameter element at the memory-bound bandwidth
// plus a launch per tensor. Per microbatch the table charges (m-1)/m of that, so that an iteration
// pays m-1 accumulations. Hand derivation for tiny (8 layers), t = 2, p = 2, v = 2 (two layers per
// chunk), m = 4.
TEST(CostTableTest, UnfusedGradientAccumulation) {
  ClusterSpec plain = testing::RoundCluster(8);
  ClusterSpec unfused = plain;
  unfused.software.grad_accumulate_bytes_per_param = testing::S(6);
  unfused.profile.kernel_launch_us = testing::S(2);
  plain.profile.kernel_launch_us = testing::S(2);
  ParallelConfig c;
  c.precision = Precision::kFp16;  // the round profile's 16-bit GEMM table
  c.tp = 2;
  c.pp = 2;
  c.dp = 2;
  c.vp = 2;
  c.mbs = 1;
  c.global_batch = 8;  // m = 8 / (1 * 2) = 4
  c.schedule = ScheduleKind::kInterleaved;
  ASSERT_EQ(c.Microbatches(), 4);
  const CostTable a = BuildCostTable(testing::TinyModel(), plain, c);
  const CostTable b = BuildCostTable(testing::TinyModel(), unfused, c);
  // tiny, t = 2: a layer holds 3*32*64 + 96 + 64*32 + 64 + 256 + 128*64 + 128 + 64*128 + 64
  // elements.
  const double layer = 3 * 32 * 64 + 96 + 64 * 32 + 64 + 256 + 128 * 64 + 128 + 64 * 128 + 64;
  const double word = 256.0 / 2 * 64, pos = 32.0 * 64;
  const double share = 3.0 / 4.0;
  auto expect = [&](int r, int k, double elements, int kernels) {
    const double want = share * (elements * 6 / 1e12 + kernels * 2e-6);
    EXPECT_NEAR(b.Chunk(r, k).backward.memory - a.Chunk(r, k).backward.memory, want, 1e-15)
        << r << "," << k;
    EXPECT_EQ(b.Chunk(r, k).forward.memory, a.Chunk(r, k).forward.memory);
  };
  expect(0, 0, 2 * layer + word + pos, 24 + 2);  // embedding chunk
  expect(0, 1, 2 * layer, 24);
  expect(1, 0, 2 * layer, 24);
  expect(1, 1, 2 * layer + 2 * 64 + word, 24 + 2);  // head chunk: final LayerNorm, tied word copy
  // One microbatch: nothing to accumulate.
  c.global_batch = 2;
  c.vp = 1;
  c.schedule = ScheduleKind::k1F1B;
  ASSERT_EQ(c.Microbatches(), 1);
  const CostTable a1 = BuildCostTable(testing::TinyModel(), plain, c),
                  b1 = BuildCostTable(testing::TinyModel(), unfused, c);
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(b1.Chunk(r, 0).backward.memory, a1.Chunk(r, 0).backward.memory);
}

// Uneven stages (tiny's 8 layers as 3 / 5): each rank accumulates its own layers' gradients and,
// on the first and last, the embedding's or the head's, whatever the even share would be.
TEST(CostTableTest, UnfusedGradientAccumulationUnevenStages) {
  ClusterSpec plain = testing::RoundCluster(8);
  ClusterSpec unfused = plain;
  unfused.software.grad_accumulate_bytes_per_param = testing::S(6);
  unfused.profile.kernel_launch_us = testing::S(2);
  plain.profile.kernel_launch_us = testing::S(2);
  ParallelConfig c;
  c.precision = Precision::kFp16;
  c.tp = 2;
  c.pp = 2;
  c.dp = 2;
  c.global_batch = 8;  // m = 4
  c.first_stage_layers = 3;
  c.last_stage_layers = 5;
  ASSERT_TRUE(c.Validate(testing::TinyModel()).ok());
  const CostTable a = BuildCostTable(testing::TinyModel(), plain, c);
  const CostTable b = BuildCostTable(testing::TinyModel(), unfused, c);
  const double layer = 3 * 32 * 64 + 96 + 64 * 32 + 64 + 256 + 128 * 64 + 128 + 64 * 128 + 64;
  const double word = 256.0 / 2 * 64, pos = 32.0 * 64;
  auto accumulated = [&](int r) {
    return b.Chunk(r, 0).backward.memory - a.Chunk(r, 0).backward.memory;
  };
  EXPECT_NEAR(accumulated(0), 0.75 * ((3 * layer + word + pos) * 6 / 1e12 + 38 * 2e-6), 1e-15);
  EXPECT_NEAR(accumulated(1), 0.75 * ((5 * layer + 2 * 64 + word) * 6 / 1e12 + 62 * 2e-6), 1e-15);
  // The compute follows the layers too: rank 1's forward is rank 0's less the embedding's, plus
  // two layers and the head.
  EXPECT_GT(a.Chunk(1, 0).forward.Total(), a.Chunk(0, 0).forward.Total());
}

// With uneven stages a rank between the ends may hold the most (more layers than rank 0): the
// search's short memory check (first, last and, uneven, rank 1) finds the same peak as all ranks.
TEST(Predict, UnevenPeakMayBeOnAMiddleStage) {
  const ClusterSpec cl = testing::RoundCluster(4);
  ParallelConfig c;
  c.precision = Precision::kBf16;
  c.pp = 4;
  c.global_batch = 8;
  c.first_stage_layers = 1;
  c.last_stage_layers = 1;  // tiny's 8 layers as 1 / 3 / 3 / 1
  ASSERT_TRUE(c.Validate(testing::TinyModel()).ok());
  const CostTable t = BuildCostTable(testing::TinyModel(), cl, c);
  const Prediction all = Predict(testing::TinyModel(), cl, c, t, nullptr, /*all_stages=*/true);
  const Prediction some = Predict(testing::TinyModel(), cl, c, t, nullptr, /*all_stages=*/false);
  EXPECT_EQ(all.peak_memory_stage, 1);
  EXPECT_EQ(some.peak_memory, all.peak_memory);
  EXPECT_EQ(some.peak_memory_stage, 1);
}

// A tensor group of 8 on nodes of 4 GPUs crosses nodes, so its all-reduces are slower than on
// nodes of 8.
TEST(CostTableTest, TensorGroupAcrossNodesIsSlower) {
  ParallelConfig c;
  c.precision = Precision::kFp16;  // the round profile's 16-bit GEMM table
  c.tp = 4;
  c.pp = 1;
  c.dp = 2;
  c.global_batch = 2;
  ModelSpec m = testing::TinyModel();
  const CostTable in_node = BuildCostTable(m, testing::RoundCluster(8, 8), c);
  const CostTable across = BuildCostTable(m, testing::RoundCluster(8, 2), c);
  EXPECT_GT(across.Chunk(0, 0).forward.tp_comm, in_node.Chunk(0, 0).forward.tp_comm);
  EXPECT_EQ(in_node.chunks.size(), 1u);
}

// Scatter/gather: b s h / t elements per message in 16-bit (2 * 32 * 64 / 2 * 2 bytes), else b s h.
TEST(CostTableTest, ScatterGatherShrinksMessages) {
  ParallelConfig c;
  c.precision = Precision::kFp16;  // the round profile's 16-bit GEMM table
  c.tp = 2;
  c.pp = 2;
  c.dp = 2;
  c.mbs = 2;
  c.global_batch = 4;
  const CostTable sg = BuildCostTable(testing::TinyModel(), testing::RoundCluster(8), c);
  EXPECT_EQ(sg.p2p_bytes, 2 * 32 * 64 / 2 * 2);
  EXPECT_GT(sg.p2p_allgather, 0.0);
  c.scatter_gather = false;
  const CostTable full = BuildCostTable(testing::TinyModel(), testing::RoundCluster(8), c);
  EXPECT_EQ(full.p2p_bytes, 2 * 32 * 64 * 2);
  EXPECT_EQ(full.p2p_allgather, 0.0);
  ASSERT_EQ(full.embedding_allreduce.size(), 2u);
  EXPECT_GT(full.embedding_allreduce[0], 0.0);  // tied embeddings on first and last stage
  EXPECT_GT(full.dp_allreduce[1], 0.0);
  EXPECT_GT(full.optimizer[0], 0.0);
}

// Sequence parallelism: each layer's two all-reduces per direction become a reduce-scatter plus
// an all-gather each (same bus bytes, one more latency), LayerNorm/dropout work shrinks by t, and
// pipeline messages go split with no all-gather on receipt.
TEST(CostTableTest, SequenceParallel) {
  const ClusterSpec cl = testing::RoundCluster(8);
  ParallelConfig c;
  c.precision = Precision::kFp16;  // the round profile's 16-bit GEMM table
  c.tp = 4;
  c.pp = 2;
  c.dp = 1;
  c.mbs = 2;
  c.global_batch = 4;
  const CostTable off = BuildCostTable(testing::TinyModel(), cl, c);
  c.sequence_parallel = true;
  const CostTable on = BuildCostTable(testing::TinyModel(), cl, c);
  // b s h = 2*32*64 elements of 2 bytes on NVSwitch (200 GB/s busbw, 10 us latency), t = 4.
  const double bytes = 2 * 32 * 64 * 2;
  const double ar = 10e-6 + bytes * 2 * 3 / 4 / 200e9, half = 10e-6 + bytes * 3 / 4 / 200e9;
  const double layers = 4;  // tiny: 8 layers over pp = 2
  // The last rank's head adds the cross-entropy's 3 all-reduces of T floats (and, with sequence
  // parallelism, the all-gather of the final LayerNorm's output).
  const double ce = 3 * (10e-6 + 2 * 32 * 4 * 2.0 * 3 / 4 / 200e9);
  EXPECT_NEAR(off.Chunk(1, 0).forward.tp_comm, layers * 2 * ar + ce, 1e-15);
  EXPECT_NEAR(on.Chunk(1, 0).forward.tp_comm, layers * 2 * 2 * half + half + ce, 1e-15);
  EXPECT_LT(on.Chunk(0, 0).forward.memory, off.Chunk(0, 0).forward.memory);
  EXPECT_EQ(on.p2p_bytes, off.p2p_bytes);  // scatter/gather already split the message
  EXPECT_GT(off.p2p_allgather, 0.0);
  EXPECT_EQ(on.p2p_allgather, 0.0);
}

// Selective recomputation charges each layer's attention core forward in the backward, nothing
// else.
TEST(CostTableTest, SelectiveRecomputeIsTheAttentionCore) {
  const ClusterSpec cl = testing::RoundCluster(8);
  ParallelConfig c;
  c.precision = Precision::kFp16;  // the round profile's 16-bit GEMM table
  c.tp = 2;
  c.pp = 2;
  c.dp = 2;
  c.mbs = 2;
  c.global_batch = 4;
  c.recompute = Recompute::kSelective;
  const CostTable t = BuildCostTable(testing::TinyModel(), cl, c);
  const ComputeBreakdown core =
      AttentionCoreForwardCost(testing::TinyModel(), cl.profile, Precision::kFp16, 2, 2);
  // 100 TFLOP/s flat: the two GEMMs are 4 b s^2 h / t FLOPs; softmax and dropout (4 + 5) bytes per
  // score at 1000 GB/s.
  EXPECT_NEAR(core.gemm, 4.0 * 2 * 32 * 32 * 64 / 2 / 100e12, 1e-18);
  EXPECT_NEAR(core.memory, 9.0 * 2 * 2 * 32 * 32 / 1e12, 1e-18);
  EXPECT_NEAR(t.Chunk(0, 0).recompute.gemm, 4 * core.gemm, 1e-18);
  EXPECT_NEAR(t.Chunk(0, 0).recompute.memory, 4 * core.memory, 1e-18);
  EXPECT_EQ(t.Chunk(0, 0).recompute.tp_comm, 0.0);
}

// The distributed optimizer: optimizer state and step on a d-th of the parameters; gradients
// reduce-scattered and weights all-gathered instead of all-reduced.
TEST(CostTableTest, DistributedOptimizer) {
  const ClusterSpec cl = testing::RoundCluster(8);
  ParallelConfig c;
  c.precision = Precision::kFp16;
  c.tp = 1;
  c.pp = 2;
  c.dp = 4;
  c.mbs = 1;
  c.global_batch = 8;
  const CostTable a = BuildCostTable(testing::TinyModel(), cl, c);
  const Prediction pa = Predict(testing::TinyModel(), cl, c, a);
  c.distributed_optimizer = true;
  const CostTable b = BuildCostTable(testing::TinyModel(), cl, c);
  const Prediction pb = Predict(testing::TinyModel(), cl, c, b);
  for (int r = 0; r < 2; ++r) {
    const int64_t n = a.param_elements[r];
    EXPECT_EQ(pa.memory[r].optimizer - pb.memory[r].optimizer, 12 * n - (12 * n + 3) / 4) << r;
    EXPECT_NEAR(b.optimizer[r], a.optimizer[r] * double((n + 3) / 4) / double(n), 1e-15) << r;
    const double bus = n * 2.0 * 3 / 4 / 200e9;  // (d-1)/d of the 16-bit gradients or weights
    EXPECT_NEAR(b.dp_allreduce[r], 2 * (10e-6 + bus), 1e-15) << r;
    EXPECT_NEAR(a.dp_allreduce[r], 10e-6 + 2 * bus, 1e-15) << r;
  }
}

// The layout's precision sets the element sizes: pipeline messages of b s h = 2 x 32 x 64 elements
// (no scatter/gather) take 2 bytes in fp16 and bf16, 4 in fp32; bf16 all-reduces fp32 main
// gradients (4 bytes per parameter: 10 us + 2 (d-1)/d 4n / 200 GB/s), fp16 unfused 16-bit ones;
// the fp16 optimizer step moves 52 bytes per parameter, fp32's 32 (1000 GB/s).
TEST(CostTableTest, PrecisionSetsElementSizes) {
  ClusterSpec cl = testing::RoundCluster(8);
  ParallelConfig c;
  c.tp = 1;
  c.pp = 2;
  c.dp = 4;
  c.mbs = 2;
  c.global_batch = 8;
  c.scatter_gather = false;
  c.precision = Precision::kFp16;
  const CostTable half = BuildCostTable(testing::TinyModel(), cl, c);
  c.precision = Precision::kBf16;
  const CostTable bf16 = BuildCostTable(testing::TinyModel(), cl, c);
  EXPECT_EQ(half.p2p_bytes, 2 * 32 * 64 * 2);
  EXPECT_EQ(bf16.p2p_bytes, 2 * 32 * 64 * 2);
  for (int r = 0; r < 2; ++r) {
    const double n = double(half.param_elements[r]);
    EXPECT_NEAR(half.dp_allreduce[r], 10e-6 + 2 * 0.75 * 2 * n / 200e9, 1e-15) << r;
    EXPECT_NEAR(bf16.dp_allreduce[r], 10e-6 + 2 * 0.75 * 4 * n / 200e9, 1e-15) << r;
    EXPECT_NEAR(half.optimizer[r], 52 * n / 1e12, 1e-15) << r;
  }
  cl.profile = testing::RoundProfile(Precision::kFp32);
  c.precision = Precision::kFp32;
  const CostTable fp32 = BuildCostTable(testing::TinyModel(), cl, c);
  EXPECT_EQ(fp32.p2p_bytes, 2 * 32 * 64 * 4);
  EXPECT_NEAR(fp32.optimizer[0], 32 * double(fp32.param_elements[0]) / 1e12, 1e-15);
  // A fused step (the ptdp stack's fused_optimizer_step): norm 4 + Adam 28 + the 16-bit copy 2 =
  // 34 bytes in 16 bits, the same 32 in fp32.
  cl.software.fused_optimizer_step = {true, "test"};
  const CostTable fused32 = BuildCostTable(testing::TinyModel(), cl, c);
  EXPECT_EQ(fused32.optimizer[0], fp32.optimizer[0]);
  cl.profile = testing::RoundProfile();
  c.precision = Precision::kBf16;
  const CostTable fused = BuildCostTable(testing::TinyModel(), cl, c);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(fused.optimizer[r], 34 * double(fused.param_elements[r]) / 1e12, 1e-15) << r;
  }
  // Main gradients taken in place (megatron-core's optimizer_main_grads_in_place): norm 4, Adam
  // 28, the copy back 4 + 2: 38 bytes in bf16; fp16 keeps the unscale pass's 8: 46 (with fused
  // accumulation, whose main gradients are fp32). A 16-bit gradient buffer is cast to fp32 first
  // (read 2, write 4): 44 in bf16 with grad_reduce_bf16, 52 in fp16 unfused.
  cl.software.fused_optimizer_step = {false, "test"};
  cl.software.optimizer_main_grads_in_place = {true, "test"};
  const CostTable in_place = BuildCostTable(testing::TinyModel(), cl, c);
  c.grad_reduce_bf16 = true;
  const CostTable in_place_bf16_grads = BuildCostTable(testing::TinyModel(), cl, c);
  c.grad_reduce_bf16 = false;
  c.precision = Precision::kFp16;
  const CostTable in_place16 = BuildCostTable(testing::TinyModel(), cl, c);
  c.grad_accumulation_fusion = true;
  const CostTable in_place16_fused = BuildCostTable(testing::TinyModel(), cl, c);
  for (int r = 0; r < 2; ++r) {
    const double n = double(in_place.param_elements[r]);
    EXPECT_NEAR(in_place.optimizer[r], 38 * n / 1e12, 1e-15) << r;
    EXPECT_NEAR(in_place_bf16_grads.optimizer[r], 44 * n / 1e12, 1e-15) << r;
    EXPECT_NEAR(in_place16_fused.optimizer[r], 46 * n / 1e12, 1e-15) << r;
    EXPECT_NEAR(in_place16.optimizer[r], 52 * n / 1e12, 1e-15) << r;
  }
}

// A profile with the optimizer step's measured rate (optimizer_Gparams_per_s) prices the step by
// its parameters, whatever memory_bound_GBps and the precision's bytes per parameter; the
// distributed optimizer's step covers a d-th of them. Without the key: the bytes (above).
TEST(CostTableTest, OptimizerStepByParametersWithMeasuredRate) {
  ClusterSpec cl = testing::RoundCluster(8);
  cl.profile = testing::RoundProfile(Precision::kFp32);
  cl.profile.optimizer_Gparams_per_s = {0.125, "test: 0.125 G parameters/s"};
  ParallelConfig c;
  c.tp = 1;
  c.pp = 2;
  c.dp = 4;
  c.mbs = 2;
  c.global_batch = 8;
  c.precision = Precision::kFp32;
  const CostTable rate = BuildCostTable(testing::TinyModel(), cl, c);
  cl.profile.memory_bound_GBps.value *= 7;  // the bytes' rate no longer enters the step
  const CostTable faster_bytes = BuildCostTable(testing::TinyModel(), cl, c);
  c.distributed_optimizer = true;
  const CostTable sharded = BuildCostTable(testing::TinyModel(), cl, c);
  for (int r = 0; r < 2; ++r) {
    const int64_t n = rate.param_elements[r];
    EXPECT_NEAR(rate.optimizer[r], double(n) / 0.125e9, 1e-15) << r;
    EXPECT_EQ(faster_bytes.optimizer[r], rate.optimizer[r]) << r;
    EXPECT_NEAR(sharded.optimizer[r], double((n + 3) / 4) / 0.125e9, 1e-15) << r;
    // The layers' elementwise bytes still move at memory_bound_GBps.
    EXPECT_LT(faster_bytes.Chunk(r, 0).forward.memory, rate.Chunk(r, 0).forward.memory) << r;
  }
}

// A memo shared by layouts of several keys gives every layout the table it gets without one: the
// key holds all that the layer, embedding and head prices read (megatron-core's stack, so that
// the hidden tensor-parallel share is exercised too).
TEST(CostTable, PieceCostMemoGivesTheSameTables) {
  auto m = LoadModel("gpt-1t");
  auto cluster = LoadCluster("selene", 3072);
  auto sw = LoadSoftware(kDefaultSoftware);
  ASSERT_TRUE(m.ok() && cluster.ok() && sw.ok());
  cluster->software = *sw;
  PieceCostMemo memo;
  int layouts = 0;
  for (int tp : {4, 8}) {
    for (int mbs : {1, 2}) {
      for (int combo = 0; combo < 4; ++combo) {
        for (Recompute rc : {Recompute::kNone, Recompute::kFull, Recompute::kSelective}) {
          ParallelConfig c;
          c.tp = tp;
          c.pp = 16;
          c.dp = 3072 / (tp * 16);
          c.mbs = mbs;
          c.global_batch = 3072;
          c.precision = cluster->profile.precision;
          c.sequence_parallel = (combo & 1) != 0;
          c.fused_attention = (combo & 2) != 0;
          c.recompute = rc;
          if (!c.Validate(*m).ok()) continue;
          ++layouts;
          const CostTable with = BuildCostTable(*m, *cluster, c, nullptr, nullptr, &memo);
          const CostTable without = BuildCostTable(*m, *cluster, c);
          ASSERT_EQ(with.chunks.size(), without.chunks.size());
          for (size_t i = 0; i < with.chunks.size(); ++i) {
            const ChunkCost &a = with.chunks[i], &b = without.chunks[i];
            EXPECT_EQ(a.forward.Total(), b.forward.Total()) << c.ToString() << " chunk " << i;
            EXPECT_EQ(a.forward.tp_comm, b.forward.tp_comm) << c.ToString();
            EXPECT_EQ(a.backward.Total(), b.backward.Total()) << c.ToString();
            EXPECT_EQ(a.weight_grad.Total(), b.weight_grad.Total()) << c.ToString();
            EXPECT_EQ(a.recompute.Total(), b.recompute.Total()) << c.ToString();
          }
        }
      }
    }
  }
  EXPECT_GT(layouts, 20);
  // No recomputation and full recomputation share a key: most layouts above were memo hits.
  EXPECT_LT(memo.pieces.size(), size_t(layouts));
}

}  // namespace
}  // namespace ptdp::costmodel
