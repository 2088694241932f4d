#include <gtest/gtest.h>

#include "core/shapes.h"
#include "costmodel/flops.h"
#include "costmodel/layer_cost.h"
#include "costmodel/memory.h"
#include "tests/costmodel/test_profile.h"

namespace ptdp::costmodel {
namespace {

ModelSpec Tiny(double dropout = 0.1) {
  ModelSpec m;
  m.name = "tiny";
  m.layers = 8;
  m.hidden = 64;
  m.heads = 4;
  m.seq_len = 32;
  m.vocab = 256;
  m.dropout = dropout;
  return m;
}

// s = 4, b = 1, h = 8, a = 2, f = 32, t = 1, e = 2; T = 4 tokens, T h = 32, S = b a s^2 = 32:
// forward  LayerNorms 2*2*2*32 = 256, QKV bias 2*2*4*24 = 384, softmax 2*2*32 = 128, attention
//          dropout 5*32 = 160, context copy 2*2*32 = 128, bias-dropout-add 2*7*32 = 448,
//          bias-GeLU 2*2*4*32 = 512: 2016 bytes, 9 kernels;
// backward LayerNorms 2*5*2*32 = 640, QKV bias grad 2*4*24 = 192, softmax 3*2*32 = 192, dropout
//          5*32 = 160, bias-dropout-add 2*7*32 = 448, bias-GeLU 4*2*4*32 = 1024: 2656 bytes, 13.
// At t = 2: the T f/t, T 3h/t, T h/t and S terms halve.
TEST(LayerCost, MemoryBoundBytesByHand) {
  ModelSpec m;
  m.layers = 1;
  m.hidden = 8;
  m.heads = 2;
  m.seq_len = 4;
  m.vocab = 16;
  const LayerMemoryBytes b = LayerMemoryBytesOf(m, 1, 1, 2);
  EXPECT_DOUBLE_EQ(b.forward, 2016.0);
  EXPECT_DOUBLE_EQ(b.backward, 2656.0);
  EXPECT_EQ(b.forward_kernels, 9);
  EXPECT_EQ(b.backward_kernels, 13);
  const LayerMemoryBytes b2 = LayerMemoryBytesOf(m, 2, 1, 2);
  EXPECT_DOUBLE_EQ(b2.forward, 256 + 192 + 64 + 80 + 64 + 448 + 256);
  EXPECT_DOUBLE_EQ(b2.backward, 640 + 96 + 96 + 80 + 448 + 512);
  // Sequence parallelism at t = 2: the LayerNorm and bias-dropout-add terms act on T h / t too.
  const LayerMemoryBytes sp = LayerMemoryBytesOf(m, 2, 1, 2, /*sequence_parallel=*/true);
  EXPECT_DOUBLE_EQ(sp.forward, 128 + 192 + 64 + 80 + 64 + 224 + 256);
  EXPECT_DOUBLE_EQ(sp.backward, 320 + 96 + 96 + 80 + 224 + 512);
}

// Flat 100 TFLOP/s and no launch cost: the forward GEMM time is the layer's forward FLOPs per
// tensor rank / 100e12, the backward twice that; 1000 GB/s for the memory-bound bytes; 2
// all-reduces each way.
TEST(LayerCost, ForwardBackwardByHand) {
  const HardwareProfile hw = testing::RoundProfile();
  const ModelSpec m = Tiny();
  for (int t : {1, 2, 4}) {
    const PieceCost c = TransformerLayerCost(m, hw, t, 2, 1e-3);
    const double flops = LayerForwardFlops(m, 2) / t;
    EXPECT_NEAR(c.forward.gemm, flops / 100e12, 1e-15) << t;
    EXPECT_NEAR(c.backward.gemm, 2 * flops / 100e12, 1e-15) << t;
    const LayerMemoryBytes b = LayerMemoryBytesOf(m, t, 2, 2);
    EXPECT_NEAR(c.forward.memory, b.forward / 1e12, 1e-15);
    EXPECT_NEAR(c.backward.memory, b.backward / 1e12, 1e-15);
    EXPECT_DOUBLE_EQ(c.forward.tp_comm, 2e-3);
    EXPECT_DOUBLE_EQ(c.backward.tp_comm, 2e-3);
  }
}

// Logits: 2 T h V/t FLOPs forward (T = b s = 64, h = 64, V = 256 padded to 256 at t = 1).
TEST(LayerCost, HeadLogitsGemm) {
  const HardwareProfile hw = testing::RoundProfile();
  const PieceCost c = HeadCost(Tiny(), hw, 1, 2, 0, 0);
  EXPECT_NEAR(c.forward.gemm, 2.0 * 64 * 64 * 256 / 100e12, 1e-15);
  EXPECT_NEAR(c.backward.gemm, 2 * c.forward.gemm, 1e-15);
  EXPECT_DOUBLE_EQ(c.forward.tp_comm, 0.0);
  // Cross-entropy over L = 64 * 256 logits: forward final LayerNorm 2*2*64*64 plus (2 + 4 + 4 + 8
  // + 8 + 4 + 8) L; backward (8 + 4 + 2) L plus the LayerNorm's 5*2*64*64 (1000 GB/s).
  const double L = 64.0 * 256, Th = 64.0 * 64;
  EXPECT_NEAR(c.forward.memory, (4 * Th + 38 * L) / 1e12, 1e-15);
  EXPECT_NEAR(c.backward.memory, (10 * Th + 14 * L) / 1e12, 1e-15);
  // fp32 training has no cast: (4 + 8 + 8 + 4 + 8) L forward, 8 L backward.
  const PieceCost f = HeadCost(Tiny(), testing::RoundProfile(TrainingPrecision::kFp32), 1, 2, 0, 0);
  EXPECT_NEAR(f.forward.memory, (8 * Th + 32 * L) / 1e12, 1e-15);
  EXPECT_NEAR(f.backward.memory, (20 * Th + 8 * L) / 1e12, 1e-15);
}

// In flight on rank r: GPipe m; 1F1B min(m, p - r); interleaved (units of one chunk)
// min(m v, 2 (p - r - 1) + (v - 1) p + 1). p = 4, v = 2, m = 8: rank 0 holds 2*3 + 4 + 1 = 11
// chunk-microbatches = 11 * l/8 layers = (l/4) (4 + 3/2): Korthikanti's p (1 + (p-1)/(p v)).
TEST(Memory, InFlightMicrobatches) {
  ParallelConfig c;
  c.pp = 4;
  c.dp = 1;
  c.mbs = 1;
  c.global_batch = 8;
  c.schedule = ScheduleKind::kGPipe;
  EXPECT_EQ(InFlightChunkMicrobatches(c, 3), 8);
  c.schedule = ScheduleKind::k1F1B;
  EXPECT_EQ(InFlightChunkMicrobatches(c, 0), 4);
  EXPECT_EQ(InFlightChunkMicrobatches(c, 3), 1);
  c.global_batch = 2;
  EXPECT_EQ(InFlightChunkMicrobatches(c, 0), 2);
  c.global_batch = 8;
  c.schedule = ScheduleKind::kInterleaved;
  c.vp = 2;
  EXPECT_EQ(InFlightChunkMicrobatches(c, 0), 11);
  EXPECT_EQ(InFlightChunkMicrobatches(c, 3), 5);
  const double layers_per_chunk = 8.0 / 8, l_over_p = 8.0 / 4;
  EXPECT_DOUBLE_EQ(11 * layers_per_chunk, l_over_p * 4 * (1 + 3.0 / 8));
}

// Korthikanti et al.: with dropout and no parallelism a layer keeps s b h (34 + 5 a s / h) bytes:
// s = 32, b = 2, h = 64, a = 4: 4096 * (34 + 5*4*32/64) = 4096 * 44 = 180224 per layer; the chunk
// of rank 1 (layers 4..7 of 8 with p = 2) without the head keeps 4 of them.
TEST(Memory, StashMatchesKorthikanti) {
  const HardwareProfile hw = testing::RoundProfile();
  ParallelConfig c;
  c.pp = 2;
  c.mbs = 2;
  c.global_batch = 2;
  EXPECT_EQ(ChunkStashBytes(Tiny(), c, hw, 0, 0), 4 * 180224);
  // With full recomputation only the layer input s b h in 16-bit: 2 * 4096 bytes per layer.
  c.recompute = Recompute::kFull;
  EXPECT_EQ(ChunkStashBytes(Tiny(), c, hw, 0, 0), 4 * 8192);
}

// p = 4, v = 2, m = 8 on the last rank: 0 + 4 + 1 = 5 chunk-microbatches in flight; chunk 1 holds
// the head, whose extra stash counts for max(1, 5 - 4) = 1 of them: 5 * 100 + 1 * 30.
TEST(Memory, HeadStashCountsOnlyItsChunk) {
  ParallelConfig c;
  c.pp = 4;
  c.vp = 2;
  c.global_batch = 8;
  c.schedule = ScheduleKind::kInterleaved;
  EXPECT_EQ(InFlightActivationBytes(c, 3, {100, 130}), 5 * 100 + 30);
  c.vp = 1;
  c.schedule = ScheduleKind::k1F1B;
  EXPECT_EQ(InFlightActivationBytes(c, 3, {130}), 130);
  EXPECT_EQ(InFlightActivationBytes(c, 0, {100}), 400);
}

// Mixed precision: 2 + 2 + 12 = 16 bytes per parameter; fp32: 4 + 4 + 8 = 16.
TEST(Memory, BytesPerParameter) {
  const BytesPerParam mixed = BytesPerParameter(TrainingPrecision::kMixed);
  EXPECT_EQ(mixed.weight + mixed.grad + mixed.optimizer, 16);
  EXPECT_EQ(mixed.weight, 2);
  const BytesPerParam fp32 = BytesPerParameter(TrainingPrecision::kFp32);
  EXPECT_EQ(fp32.weight, 4);
  EXPECT_EQ(fp32.grad, 4);
  EXPECT_EQ(fp32.optimizer, 8);
}

// Stage memory counts the shapes of core/shapes.h: one GPU of rank 0 with p = 1 holds the whole
// model's parameters (tied embeddings), 16 bytes each, plus the workspace and the activations of
// min(m, p) = 1 microbatch.
TEST(Memory, StageMemoryByHand) {
  const HardwareProfile hw = testing::RoundProfile();
  const ModelSpec m = Tiny(0.0);
  ParallelConfig c;
  c.mbs = 1;
  c.global_batch = 4;
  const auto counts = StageParameterCounts(m, c);
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts[0], ParameterCount(m, 1));
  const StageMemory s = StageMemoryOf(m, c, hw, 0, counts[0]);
  EXPECT_EQ(s.weights + s.grads + s.optimizer, 16 * counts[0]);
  EXPECT_EQ(s.workspace, Bytes(1) << 30);
  EXPECT_EQ(s.activations, ChunkStashBytes(m, c, hw, 0, 0));
}

}  // namespace
}  // namespace ptdp::costmodel
