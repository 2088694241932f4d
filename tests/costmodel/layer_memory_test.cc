#include <gtest/gtest.h>

#include "core/model.h"
#include "core/shapes.h"
#include "costmodel/layer_cost.h"
#include "tests/costmodel/test_profile.h"

namespace ptdp::costmodel {
namespace {

ModelSpec Tiny(double dropout = 0.1) {
  ModelSpec m = testing::TinyModel();
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

// The same layer on Transformer Engine (te_layer), from the hand sums above: forward without the
// QKV bias add (384; 8 kernels); backward without the QKV bias gradient (192), each LayerNorm's
// backward 3e not 5e (-2*2*2*32 = -256), and autograd's two residual-gradient adds (+2*3*2*32 =
// 384): 2592 bytes, 13 - 1 + 2 = 14 kernels. With fused attention (the fused 1728 / 2304 bytes,
// 7 / 11 kernels) TE's bshd format adds Q, K, V's transposed copies forward (2*2*4*24 = 384, 3
// kernels: 1728 again, 9 kernels) and the output gradient's copy (2*2*4*8 = 128) and split's cat
// (384) backward: 2304 - 192 - 256 + 384 + 128 + 384 = 2752, 11 - 1 + 2 + 2 = 14 kernels. With
// sequence parallelism at t = 2 the LayerNorm and residual terms act on T h / t = 16.
TEST(LayerCost, TransformerEngineBytesByHand) {
  ModelSpec m;
  m.layers = 1;
  m.hidden = 8;
  m.heads = 2;
  m.seq_len = 4;
  m.vocab = 16;
  const LayerMemoryBytes te =
      LayerMemoryBytesOf(m, 1, 1, 2, false, false, false, false, false, true);
  EXPECT_DOUBLE_EQ(te.forward, 1632.0);
  EXPECT_DOUBLE_EQ(te.backward, 2592.0);
  EXPECT_EQ(te.forward_kernels, 8);
  EXPECT_EQ(te.backward_kernels, 14);
  const LayerMemoryBytes fused =
      LayerMemoryBytesOf(m, 1, 1, 2, false, true, false, false, false, true);
  EXPECT_DOUBLE_EQ(fused.forward, 1728.0);
  EXPECT_DOUBLE_EQ(fused.backward, 2752.0);
  EXPECT_EQ(fused.forward_kernels, 9);
  EXPECT_EQ(fused.backward_kernels, 14);
  const LayerMemoryBytes sp =
      LayerMemoryBytesOf(m, 2, 1, 2, true, false, false, false, false, true);
  EXPECT_DOUBLE_EQ(sp.forward, 128 + 64 + 80 + 64 + 224 + 256);
  EXPECT_DOUBLE_EQ(sp.backward, 320 - 128 + 192 + 96 + 80 + 224 + 512);
  // The layer's cost charges those bytes (the round profile: 1000 GB/s, no launch cost).
  const PieceCost c = TransformerLayerCost(m, testing::RoundProfile(), Precision::kFp16, 1, 1, 0,
                                           false, true, false, true);
  EXPECT_NEAR(c.forward.memory, 1728.0 / 1e12, 1e-18);
  EXPECT_NEAR(c.backward.memory, 2752.0 / 1e12, 1e-18);
}

// Flat 100 TFLOP/s and no launch cost: the forward GEMM time is the layer's forward FLOPs per
// tensor rank / 100e12, the backward twice that; 1000 GB/s for the memory-bound bytes; 2
// all-reduces each way. Tiny's layer forward for b = 2 sequences (s = 32, h = 64, f = 4h):
// 24 b s h^2 + 4 b s^2 h = 24*2*32*4096 + 4*2*1024*64 = 6291456 + 524288 = 6815744 FLOPs.
TEST(LayerCost, ForwardBackwardByHand) {
  const HardwareProfile hw = testing::RoundProfile();
  const ModelSpec m = Tiny();
  for (int t : {1, 2, 4}) {
    const PieceCost c = TransformerLayerCost(m, hw, Precision::kFp16, t, 2, 1e-3);
    const double flops = 6815744.0 / t;
    EXPECT_NEAR(c.forward.gemm, flops / 100e12, 1e-15) << t;
    EXPECT_NEAR(c.backward.gemm, 2 * flops / 100e12, 1e-15) << t;
    const LayerMemoryBytes b = LayerMemoryBytesOf(m, t, 2, 2);
    EXPECT_NEAR(c.forward.memory, b.forward / 1e12, 1e-15);
    EXPECT_NEAR(c.backward.memory, b.backward / 1e12, 1e-15);
    EXPECT_DOUBLE_EQ(c.forward.tp_comm, 2e-3);
    EXPECT_DOUBLE_EQ(c.backward.tp_comm, 2e-3);
  }
}

// Fused attention on the hand-made layer above: the softmax (128 forward, 192 backward) and
// attention-dropout (160 each way) passes go, and with them two kernels each way:
// forward 2016 - 288 = 1728 in 7 kernels, backward 2656 - 352 = 2304 in 11.
TEST(LayerCost, FusedAttentionDropsTheScorePasses) {
  ModelSpec m;
  m.layers = 1;
  m.hidden = 8;
  m.heads = 2;
  m.seq_len = 4;
  m.vocab = 16;
  const LayerMemoryBytes b = LayerMemoryBytesOf(m, 1, 1, 2, false, /*fused_attention=*/true);
  EXPECT_DOUBLE_EQ(b.forward, 1728.0);
  EXPECT_DOUBLE_EQ(b.backward, 2304.0);
  EXPECT_EQ(b.forward_kernels, 7);
  EXPECT_EQ(b.backward_kernels, 11);
}

// The fused kernel's time on the flat 100 TFLOP/s table: forward the unfused GEMMs' 4 b s^2 h / t
// = 524288 / t FLOPs, backward 2.5x that (the unfused backward's 2x plus one more Q K^T). With
// attention_tflops = 50: half those FLOPs (causal) at 50 TFLOP/s, the same times here. The rest
// of the layer is unchanged: the layer's GEMM time moves by exactly the recomputed Q K^T.
TEST(LayerCost, FusedAttentionTimeByHand) {
  HardwareProfile hw = testing::RoundProfile();
  const ModelSpec m = Tiny();
  for (int t : {1, 2, 4}) {
    const double core = 524288.0 / t;
    const PieceCost f = FusedAttentionCost(m, hw, t, 2);
    EXPECT_NEAR(f.forward.gemm, core / 100e12, 1e-15) << t;
    EXPECT_NEAR(f.backward.gemm, 2.5 * core / 100e12, 1e-15) << t;
    const PieceCost unfused = TransformerLayerCost(m, hw, Precision::kFp16, t, 2, 1e-3);
    const PieceCost fused = TransformerLayerCost(m, hw, Precision::kFp16, t, 2, 1e-3, false, true);
    EXPECT_NEAR(fused.forward.gemm, unfused.forward.gemm, 1e-15);
    EXPECT_NEAR(fused.backward.gemm - unfused.backward.gemm, 0.5 * core / 100e12, 1e-15);
    EXPECT_LT(fused.forward.memory, unfused.forward.memory);
  }
  hw.attention_tflops = {40.0, "test"};
  const PieceCost f = FusedAttentionCost(m, hw, 1, 2);
  EXPECT_NEAR(f.forward.gemm, 0.5 * 524288.0 / 40e12, 1e-15);
  EXPECT_NEAR(f.backward.gemm, 0.5 * 2.5 * 524288.0 / 40e12, 1e-15);
}

// The fused-attention rate follows the model's dropout: with attention_dropout_tflops = 25 a model
// with dropout 0.1 runs the kernel at 25 TFLOP/s and one without at attention_tflops (40); a
// profile without the key prices both at 40, and one with neither at the GEMM table (100).
TEST(LayerCost, FusedAttentionRateFollowsDropout) {
  HardwareProfile hw = testing::RoundProfile();
  const ModelSpec dropout = Tiny(0.1), none = Tiny(0.0);
  const double causal_forward = 0.5 * 524288.0;  // half of 4 b s^2 h FLOPs at b = 2, t = 1
  EXPECT_EQ(FusedAttentionTflops(dropout, hw), 0.0);
  EXPECT_NEAR(FusedAttentionCost(dropout, hw, 1, 2).forward.gemm, 524288.0 / 100e12, 1e-15);
  hw.attention_tflops = {40.0, "test"};
  EXPECT_EQ(FusedAttentionTflops(dropout, hw), 40.0);
  EXPECT_EQ(FusedAttentionTflops(none, hw), 40.0);
  EXPECT_NEAR(FusedAttentionCost(dropout, hw, 1, 2).forward.gemm, causal_forward / 40e12, 1e-15);
  hw.attention_dropout_tflops = {25.0, "test with dropout"};
  EXPECT_EQ(FusedAttentionTflops(dropout, hw), 25.0);
  EXPECT_EQ(FusedAttentionTflops(none, hw), 40.0);
  const PieceCost with = FusedAttentionCost(dropout, hw, 1, 2);
  EXPECT_NEAR(with.forward.gemm, causal_forward / 25e12, 1e-15);
  EXPECT_NEAR(with.backward.gemm, 2.5 * causal_forward / 25e12, 1e-15);
  const PieceCost without = FusedAttentionCost(none, hw, 1, 2);
  EXPECT_NEAR(without.forward.gemm, causal_forward / 40e12, 1e-15);
  EXPECT_NEAR(without.backward.gemm, 2.5 * causal_forward / 40e12, 1e-15);
  // The layer charges it: the dropout model's fused layer is slower by exactly the kernel's time.
  const PieceCost layer = TransformerLayerCost(dropout, hw, Precision::kFp16, 1, 2, 0, false, true);
  hw.attention_dropout_tflops = {};
  const PieceCost plain = TransformerLayerCost(dropout, hw, Precision::kFp16, 1, 2, 0, false, true);
  EXPECT_NEAR(layer.forward.gemm - plain.forward.gemm,
              causal_forward / 25e12 - causal_forward / 40e12, 1e-15);
}

// Logits: 2 T h V/t FLOPs forward (T = b s = 64, h = 64, V = 256 padded to 256 at t = 1).
TEST(LayerCost, HeadLogitsGemm) {
  const HardwareProfile hw = testing::RoundProfile();
  const PieceCost c = HeadCost(Tiny(), hw, Precision::kFp16, 1, 2, 0, 0);
  EXPECT_NEAR(c.forward.gemm, 2.0 * 64 * 64 * 256 / 100e12, 1e-15);
  EXPECT_NEAR(c.backward.gemm, 2 * c.forward.gemm, 1e-15);
  EXPECT_DOUBLE_EQ(c.forward.tp_comm, 0.0);
  // Cross-entropy over L = 64 * 256 logits: forward final LayerNorm 2*2*64*64 plus (2 + 4 + 4 + 8
  // + 8 + 4 + 8) L; backward (8 + 4 + 2) L plus the LayerNorm's 5*2*64*64 (1000 GB/s).
  const double L = 64.0 * 256, Th = 64.0 * 64;
  EXPECT_NEAR(c.forward.memory, (4 * Th + 38 * L) / 1e12, 1e-15);
  EXPECT_NEAR(c.backward.memory, (10 * Th + 14 * L) / 1e12, 1e-15);
  // fp32 training has no cast: (4 + 8 + 8 + 4 + 8) L forward, 8 L backward.
  const PieceCost f =
      HeadCost(Tiny(), testing::RoundProfile(Precision::kFp32), Precision::kFp32, 1, 2, 0, 0);
  EXPECT_NEAR(f.forward.memory, (8 * Th + 32 * L) / 1e12, 1e-15);
  EXPECT_NEAR(f.backward.memory, (20 * Th + 8 * L) / 1e12, 1e-15);
}

// A measured cross-entropy rate (2e9 logits/s) replaces the cross-entropy's bytes: L / 2e9 s,
// half forward and half backward; the final LayerNorm and (16-bit training) the casts stay bytes:
// forward the cast's 2 + 4 bytes per logit, backward the cast back's 4 + 2.
TEST(LayerCost, HeadCrossEntropyAtAMeasuredRate) {
  const double L = 64.0 * 256, Th = 64.0 * 64, half = 0.5 * L / 2e9;
  HardwareProfile fp32 = testing::RoundProfile(Precision::kFp32);
  fp32.cross_entropy_Glogits_per_s = {2.0, "test"};
  const PieceCost f = HeadCost(Tiny(), fp32, Precision::kFp32, 1, 2, 0, 0);
  EXPECT_NEAR(f.forward.memory, 8 * Th / 1e12 + half, 1e-15);
  EXPECT_NEAR(f.backward.memory, 20 * Th / 1e12 + half, 1e-15);
  HardwareProfile fp16 = testing::RoundProfile();
  fp16.cross_entropy_Glogits_per_s = {2.0, "test"};
  const PieceCost c = HeadCost(Tiny(), fp16, Precision::kFp16, 1, 2, 0, 0);
  EXPECT_NEAR(c.forward.memory, (4 * Th + 6 * L) / 1e12 + half, 1e-15);
  EXPECT_NEAR(c.backward.memory, (10 * Th + 6 * L) / 1e12 + half, 1e-15);
  // The GEMMs do not move.
  EXPECT_DOUBLE_EQ(
      c.forward.gemm,
      HeadCost(Tiny(), testing::RoundProfile(), Precision::kFp16, 1, 2, 0, 0).forward.gemm);
}

// A fused cross-entropy (the ptdp stack's, SoftwareProfile::fused_cross_entropy) reads the fp32
// logits once each way: 4 bytes per logit forward, 4 + e backward, no cast in 16-bit training;
// with a measured rate the casts' bytes are gone too and the rate's halves stay.
TEST(LayerCost, HeadFusedCrossEntropyReadsTheLogitsOnceEachWay) {
  const double L = 64.0 * 256, Th = 64.0 * 64;
  const HardwareProfile hw = testing::RoundProfile();
  const PieceCost c = HeadCost(Tiny(), hw, Precision::kFp16, 1, 2, 0, 0, false, 0, true);
  EXPECT_NEAR(c.forward.memory, (4 * Th + 4 * L) / 1e12, 1e-15);
  EXPECT_NEAR(c.backward.memory, (10 * Th + 6 * L) / 1e12, 1e-15);
  const PieceCost f = HeadCost(Tiny(), testing::RoundProfile(Precision::kFp32), Precision::kFp32, 1,
                               2, 0, 0, false, 0, true);
  EXPECT_NEAR(f.forward.memory, (8 * Th + 4 * L) / 1e12, 1e-15);
  EXPECT_NEAR(f.backward.memory, (20 * Th + 8 * L) / 1e12, 1e-15);
  HardwareProfile rated = hw;
  rated.cross_entropy_Glogits_per_s = {2.0, "test"};
  const double half = 0.5 * L / 2e9;
  const PieceCost r = HeadCost(Tiny(), rated, Precision::kFp16, 1, 2, 0, 0, false, 0, true);
  EXPECT_NEAR(r.forward.memory, 4 * Th / 1e12 + half, 1e-15);
  EXPECT_NEAR(r.backward.memory, 10 * Th / 1e12 + half, 1e-15);
  // The logits' GEMMs are the same either way.
  EXPECT_DOUBLE_EQ(c.forward.gemm, HeadCost(Tiny(), hw, Precision::kFp16, 1, 2, 0, 0).forward.gemm);
}

// Measured GeLU rates (2e9 elements/s forward, 1e9 backward) replace the bias-GeLU's bytes: tiny's
// layer at b = 2, t = 1 or 2 runs the GeLU over T f/t = 64 * 256 / t elements, 2e T f/t bytes
// forward and 4e T f/t backward (e = 2) leave the bytes, the elements' time joins them, and the
// GEMMs, the communication and every other byte stay as they were. Without the rates (every
// shipped profile) the layer is priced by bytes, bit for bit what it was.
TEST(LayerCost, GeluPricedByItsElementsWithMeasuredRates) {
  const ModelSpec m = Tiny();
  const HardwareProfile bytes_hw = testing::RoundProfile();
  HardwareProfile hw = bytes_hw;
  hw.gelu_forward_Gelems_per_s = {2.0, "test"};
  hw.gelu_backward_Gelems_per_s = {1.0, "test"};
  EXPECT_FALSE(GeluPricedByElements(m, bytes_hw));
  ASSERT_TRUE(GeluPricedByElements(m, hw));
  for (int t : {1, 2}) {
    const double elements = 64.0 * 256 / t;
    const GeluPass g = GeluPassTime(m, hw, t, 2);
    EXPECT_DOUBLE_EQ(g.forward, elements / 2e9) << t;
    EXPECT_DOUBLE_EQ(g.backward, elements / 1e9) << t;
    const LayerMemoryBytes all = LayerMemoryBytesOf(m, t, 2, 2);
    const LayerMemoryBytes rest = LayerMemoryBytesOf(m, t, 2, 2, false, false, true);
    EXPECT_DOUBLE_EQ(all.forward - rest.forward, 2 * 2 * elements) << t;
    EXPECT_DOUBLE_EQ(all.backward - rest.backward, 4 * 2 * elements) << t;
    EXPECT_EQ(rest.forward_kernels, all.forward_kernels);  // the GeLU is still a kernel
    const PieceCost by_bytes = TransformerLayerCost(m, bytes_hw, Precision::kFp16, t, 2, 1e-3);
    const PieceCost by_elements = TransformerLayerCost(m, hw, Precision::kFp16, t, 2, 1e-3);
    EXPECT_EQ(by_bytes.forward.memory, MemoryBoundTime(bytes_hw, all.forward, 9)) << t;
    EXPECT_EQ(by_bytes.backward.memory, MemoryBoundTime(bytes_hw, all.backward, 13)) << t;
    EXPECT_NEAR(by_elements.forward.memory, rest.forward / 1e12 + elements / 2e9, 1e-18) << t;
    EXPECT_NEAR(by_elements.backward.memory, rest.backward / 1e12 + elements / 1e9, 1e-18) << t;
    EXPECT_EQ(by_elements.forward.gemm, by_bytes.forward.gemm);
    EXPECT_EQ(by_elements.backward.gemm, by_bytes.backward.gemm);
    EXPECT_EQ(by_elements.forward.tp_comm, by_bytes.forward.tp_comm);
  }
}

// SwiGLU has no measured rate: a Llama-style layer keeps its activation bytes (3e T f/t forward,
// 5e T f/t backward) at memory_bound_GBps with the GeLU rates in the profile, to the bit.
TEST(LayerCost, SwigluKeepsItsBytesWithGeluRates) {
  ModelSpec m = *LoadModel("llama3-8b");
  HardwareProfile hw = testing::RoundProfile(Precision::kBf16);
  const PieceCost by_bytes = TransformerLayerCost(m, hw, Precision::kBf16, 8, 1, 1e-3);
  hw.gelu_forward_Gelems_per_s = {2.0, "test"};
  hw.gelu_backward_Gelems_per_s = {1.0, "test"};
  EXPECT_FALSE(GeluPricedByElements(m, hw));
  const PieceCost with_rates = TransformerLayerCost(m, hw, Precision::kBf16, 8, 1, 1e-3);
  EXPECT_EQ(with_rates.forward.memory, by_bytes.forward.memory);
  EXPECT_EQ(with_rates.backward.memory, by_bytes.backward.memory);
  const LayerMemoryBytes b = LayerMemoryBytesOf(m, 8, 1, 2);
  EXPECT_EQ(by_bytes.forward.memory, MemoryBoundTime(hw, b.forward, b.forward_kernels));
}

// Squared ReLU (Nemotron-4) has no measured rate and no GEMM epilogue: its layer keeps the
// activation's bytes with the GeLU rates in the profile, to the bit, where the same layer with
// GeLU takes the rates.
TEST(LayerCost, SquaredReluKeepsItsBytesWithGeluRates) {
  ModelSpec m = *LoadModel("nemotron4-15b");
  ASSERT_TRUE(m.squared_relu);
  HardwareProfile hw = testing::RoundProfile(Precision::kBf16);
  const PieceCost by_bytes = TransformerLayerCost(m, hw, Precision::kBf16, 4, 1, 1e-3);
  hw.gelu_forward_Gelems_per_s = {2.0, "test"};
  hw.gelu_backward_Gelems_per_s = {1.0, "test"};
  hw.gelu_epilogue_Gelems_per_s = {2.0, "test"};
  hw.dgelu_epilogue_Gelems_per_s = {1.0, "test"};
  EXPECT_FALSE(GeluPricedByElements(m, hw));
  EXPECT_FALSE(GeluPricedByEpilogue(m, hw, /*gelu_gemm_epilogue=*/true));
  const PieceCost with_rates = TransformerLayerCost(m, hw, Precision::kBf16, 4, 1, 1e-3);
  EXPECT_EQ(with_rates.forward.memory, by_bytes.forward.memory);
  EXPECT_EQ(with_rates.backward.memory, by_bytes.backward.memory);
  ModelSpec gelu = m;
  gelu.squared_relu = false;
  EXPECT_TRUE(GeluPricedByElements(gelu, hw));
  EXPECT_NE(TransformerLayerCost(gelu, hw, Precision::kBf16, 4, 1, 1e-3).forward.memory,
            by_bytes.forward.memory);
}

}  // namespace
}  // namespace ptdp::costmodel
