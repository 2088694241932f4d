// The GeLU in the GEMMs' epilogues and the bias gradients at their measured rates
// (costmodel/layer_cost.h GeluPricedByEpilogue, GeluEpilogueTime, BiasGradSeconds): the terms by
// hand, with and without the profile keys and the software fact, and the same prices per op
// (PriceOp) as per layer.
#include <gtest/gtest.h>

#include <vector>

#include "core/model.h"
#include "costmodel/estimate.h"
#include "costmodel/gemm.h"
#include "costmodel/layer_cost.h"
#include "costmodel/op_price.h"
#include "tests/costmodel/test_profile.h"

namespace ptdp::costmodel {
namespace {

// 4e9 GeLU elements/s added forward, 2e9 backward, bias gradients at 0.5e9 elements/s; memory-
// bound bytes at 1e12 B/s, no launch cost (RoundProfile).
HardwareProfile Measured(bool epilogues, bool bias) {
  HardwareProfile hw = testing::RoundProfile();
  if (epilogues) {
    hw.gelu_epilogue_Gelems_per_s = {4.0, "test"};
    hw.dgelu_epilogue_Gelems_per_s = {2.0, "test"};
  }
  if (bias) hw.bias_grad_Gelems_per_s = {0.5, "test"};
  return hw;
}

// tiny (h 64, f 256, s 32) at b = 2: T = 64 tokens, T f/t = 16384 / t GeLU elements. Run in the
// epilogues, the bias-GeLU's 2e T f/t bytes forward and its kernel leave, and backward its
// 3e T f/t (dy, x in, dx out), the fc1 bias gradient's e T f/t staying; the epilogues' added time
// joins them. The GEMMs and the communication do not move.
TEST(EpilogueCost, GeluInTheEpiloguesByHand) {
  const ModelSpec m = testing::TinyModel();
  const HardwareProfile hw = Measured(true, false);
  ASSERT_TRUE(GeluPricedByEpilogue(m, hw, true));
  EXPECT_FALSE(GeluPricedByEpilogue(m, hw, false));  // a stack that runs a separate pass
  EXPECT_FALSE(GeluPricedByEpilogue(m, testing::RoundProfile(), true));  // nothing measured
  for (int t : {1, 2}) {
    const double elements = 64.0 * 256 / t;
    const GeluPass g = GeluEpilogueTime(m, hw, t, 2);
    EXPECT_DOUBLE_EQ(g.forward, elements / 4e9) << t;
    EXPECT_DOUBLE_EQ(g.backward, elements / 2e9) << t;
    const LayerMemoryBytes all = LayerMemoryBytesOf(m, t, 2, 2);
    const LayerMemoryBytes rest = LayerMemoryBytesOf(m, t, 2, 2, false, false, false, true);
    EXPECT_DOUBLE_EQ(all.forward - rest.forward, 2 * 2 * elements) << t;
    EXPECT_DOUBLE_EQ(all.backward - rest.backward, 3 * 2 * elements) << t;
    EXPECT_EQ(rest.forward_kernels, all.forward_kernels - 1);
    EXPECT_EQ(rest.backward_kernels, all.backward_kernels);  // the bias gradient's kernel
    const PieceCost bytes = TransformerLayerCost(m, hw, Precision::kFp16, t, 2, 1e-3);
    const PieceCost fused =
        TransformerLayerCost(m, hw, Precision::kFp16, t, 2, 1e-3, false, false, true);
    EXPECT_NEAR(fused.forward.memory, rest.forward / 1e12 + elements / 4e9, 1e-18) << t;
    EXPECT_NEAR(fused.backward.memory, rest.backward / 1e12 + elements / 2e9, 1e-18) << t;
    EXPECT_EQ(fused.forward.gemm, bytes.forward.gemm);
    EXPECT_EQ(fused.backward.gemm, bytes.backward.gemm);
    EXPECT_EQ(fused.weight_grad.gemm, bytes.weight_grad.gemm);
    EXPECT_EQ(fused.backward.tp_comm, bytes.backward.tp_comm);
  }
}

// Without the keys, or without the software fact, the layer is priced by bytes to the bit.
TEST(EpilogueCost, BitIdenticalWithoutKeysOrFact) {
  const ModelSpec m = testing::TinyModel();
  const HardwareProfile plain = testing::RoundProfile();
  const PieceCost reference = TransformerLayerCost(m, plain, Precision::kFp16, 2, 2, 1e-3);
  for (const bool fact : {false, true}) {
    const PieceCost no_keys =
        TransformerLayerCost(m, plain, Precision::kFp16, 2, 2, 1e-3, false, false, fact);
    EXPECT_EQ(no_keys.forward.memory, reference.forward.memory);
    EXPECT_EQ(no_keys.backward.memory, reference.backward.memory);
  }
  const PieceCost no_fact = TransformerLayerCost(m, Measured(true, false), Precision::kFp16, 2, 2,
                                                 1e-3, false, false, false);
  EXPECT_EQ(no_fact.forward.memory, reference.forward.memory);
  EXPECT_EQ(no_fact.backward.memory, reference.backward.memory);
}

// The bias gradients tiny's layer sums at b = 2: QKV's T 3h/t = 12288 / t, the projection's and
// fc2's T h = 4096 each (T h / t with sequence parallelism) and fc1's T f/t = 16384 / t. With the
// rate their e = 2 bytes per element leave the backward's bytes and their elements at 0.5e9/s
// join it; the forward does not move.
TEST(EpilogueCost, BiasGradientsAtTheirRateByHand) {
  const ModelSpec m = testing::TinyModel();
  EXPECT_DOUBLE_EQ(LayerBiasGradElements(m, 1, 2, false), 12288 + 2 * 4096 + 16384);
  EXPECT_DOUBLE_EQ(LayerBiasGradElements(m, 2, 2, false), 6144 + 2 * 4096 + 8192);
  EXPECT_DOUBLE_EQ(LayerBiasGradElements(m, 2, 2, true), 6144 + 2 * 2048 + 8192);
  const HardwareProfile hw = Measured(false, true);
  ASSERT_TRUE(BiasGradPricedByRate(hw));
  for (const bool sp : {false, true}) {
    const double elements = LayerBiasGradElements(m, 2, 2, sp);
    const LayerMemoryBytes all = LayerMemoryBytesOf(m, 2, 2, 2, sp);
    const LayerMemoryBytes rest = LayerMemoryBytesOf(m, 2, 2, 2, sp, false, false, false, true);
    EXPECT_DOUBLE_EQ(all.backward - rest.backward, 2 * elements) << sp;
    EXPECT_EQ(rest.forward, all.forward);
    const PieceCost bytes =
        TransformerLayerCost(m, testing::RoundProfile(), Precision::kFp16, 2, 2, 1e-3, sp);
    const PieceCost rated = TransformerLayerCost(m, hw, Precision::kFp16, 2, 2, 1e-3, sp);
    EXPECT_EQ(rated.forward.memory, bytes.forward.memory);
    EXPECT_NEAR(rated.backward.memory, rest.backward / 1e12 + elements / 0.5e9, 1e-18) << sp;
  }
  // Both: the fc1 bias gradient is the rate's, the GeLU the epilogues'.
  const HardwareProfile both = Measured(true, true);
  const LayerMemoryBytes rest = LayerMemoryBytesOf(m, 1, 2, 2, false, false, false, true, true);
  const PieceCost c =
      TransformerLayerCost(m, both, Precision::kFp16, 1, 2, 1e-3, false, false, true);
  const double bias = LayerBiasGradElements(m, 1, 2, false);
  EXPECT_NEAR(c.backward.memory, rest.backward / 1e12 + 16384 / 2e9 + bias / 0.5e9, 1e-18);
  EXPECT_DOUBLE_EQ(LayerMemoryBytesOf(m, 1, 2, 2).backward - rest.backward,
                   3 * 2 * 16384 + 2 * bias);
}

// A Llama-style layer (SwiGLU, no biases) has neither: the keys and the fact change nothing.
TEST(EpilogueCost, SwigluWithoutBiasesUnchanged) {
  const ModelSpec m = *LoadModel("llama3-8b");
  EXPECT_EQ(LayerBiasGradElements(m, 8, 1, false), 0.0);
  const HardwareProfile plain = testing::RoundProfile(Precision::kBf16);
  HardwareProfile hw = plain;
  hw.gelu_epilogue_Gelems_per_s = {4.0, "test"};
  hw.dgelu_epilogue_Gelems_per_s = {2.0, "test"};
  hw.bias_grad_Gelems_per_s = {0.5, "test"};
  EXPECT_FALSE(GeluPricedByEpilogue(m, hw, true));
  const PieceCost a = TransformerLayerCost(m, plain, Precision::kBf16, 8, 1, 1e-3);
  const PieceCost b = TransformerLayerCost(m, hw, Precision::kBf16, 8, 1, 1e-3, false, false, true);
  EXPECT_EQ(a.forward.memory, b.forward.memory);
  EXPECT_EQ(a.backward.memory, b.backward.memory);
}

// The cost table takes the fact from the cluster's software profile: with it each layer of a
// chunk is the fused layer; without, the bytes' layer, on the same profile.
TEST(EpilogueCost, CostTableFollowsTheSoftwareFact) {
  ClusterSpec cl = testing::RoundCluster(1, 1);
  cl.profile = Measured(true, false);
  ParallelConfig c;
  c.tp = c.pp = c.dp = 1;
  c.mbs = 2;
  c.global_batch = 2;
  c.precision = Precision::kFp16;
  const ModelSpec m = testing::TinyModel();
  const CostTable bytes = BuildCostTable(m, cl, c);
  cl.software.gelu_gemm_epilogue = {true, "test"};
  const CostTable fused = BuildCostTable(m, cl, c);
  const PieceCost by_bytes = TransformerLayerCost(m, cl.profile, Precision::kFp16, 1, 2, 0);
  const PieceCost by_epilogue =
      TransformerLayerCost(m, cl.profile, Precision::kFp16, 1, 2, 0, false, false, true);
  const double layers = m.layers;
  EXPECT_NEAR(bytes.Chunk(0, 0).forward.memory - fused.Chunk(0, 0).forward.memory,
              layers * (by_bytes.forward.memory - by_epilogue.forward.memory), 1e-15);
  EXPECT_NEAR(bytes.Chunk(0, 0).backward.memory - fused.Chunk(0, 0).backward.memory,
              layers * (by_bytes.backward.memory - by_epilogue.backward.memory), 1e-15);
  EXPECT_NE(by_bytes.forward.memory, by_epilogue.forward.memory);
}

// PriceOp prices the fused ops with the layers' functions: the GEMM plus the epilogue over the
// GeLU's elements (fc1's n x oc outputs, fc2's n x c input gradient), the weight gradient plus
// its bias gradient over n x oc; nothing partial once the keys exist.
TEST(EpilogueCost, PriceOpPricesTheFusedOpsFully) {
  const HardwareProfile hw = Measured(true, true);
  const ModelSpec model = testing::TinyModel();
  const auto forward = PriceOp("LinearForward+GeLU", {4096, 768, 3072}, model, hw);
  ASSERT_TRUE(forward);
  EXPECT_FALSE(forward->partial);
  EXPECT_EQ(forward->seconds, GemmTime(hw, 4096, 3072, 768) + 4096.0 * 3072 / 4e9);
  const auto backward = PriceOp("LinearBackwardData+dGeLU", {4096, 3072, 768}, model, hw);
  ASSERT_TRUE(backward);
  EXPECT_FALSE(backward->partial);
  EXPECT_EQ(backward->seconds, GemmBackwardDataTime(hw, 4096, 768, 3072) + 4096.0 * 3072 / 2e9);
  const auto weight = PriceOp("LinearBackwardWeight", {4096, 768, 3072}, model, hw);
  ASSERT_TRUE(weight);
  EXPECT_FALSE(weight->partial);
  EXPECT_EQ(weight->seconds, GemmBackwardWeightTime(hw, 4096, 3072, 768) + 4096.0 * 3072 / 0.5e9);
  ModelSpec no_bias = model;
  no_bias.linear_bias = false;
  EXPECT_EQ(PriceOp("LinearBackwardWeight", {4096, 768, 3072}, no_bias, hw)->seconds,
            GemmBackwardWeightTime(hw, 4096, 3072, 768));
  // The layer's fc1 epilogue is the op's: tiny at b = 2, t = 1 runs fc1 as 64 x 64 -> 256.
  const auto fc1 = PriceOp("LinearForward+GeLU", {64, 64, 256}, model, hw);
  EXPECT_DOUBLE_EQ(fc1->seconds - GemmTime(hw, 64, 256, 64),
                   GeluEpilogueTime(model, hw, 1, 2).forward);
  // Without the keys: the GEMM alone, partial, as before.
  const HardwareProfile plain = testing::RoundProfile();
  const auto unpriced = PriceOp("LinearForward+GeLU", {4096, 768, 3072}, model, plain);
  EXPECT_TRUE(unpriced->partial);
  EXPECT_EQ(unpriced->seconds, GemmTime(plain, 4096, 3072, 768));
  EXPECT_TRUE(PriceOp("LinearBackwardWeight", {4096, 768, 3072}, model, plain)->partial);
}

// Which weight-gradient ops sum a bias (runtime/model/gpt_layers.cc), on gpt-1.3b's op table
// (n x c x oc): QKV's and fc1's; not the projection's or fc2's (output features h: DropoutBackward
// sums their biases) nor the logits' (no bias). Those are priced whole, key or not.
TEST(EpilogueCost, OnlyQkvAndFc1WeightGradientsSumABias) {
  const ModelSpec m = *LoadModel("gpt-1.3b");
  const HardwareProfile plain = testing::RoundProfile(Precision::kBf16);
  HardwareProfile hw = plain;
  hw.bias_grad_Gelems_per_s = {0.5, "test"};
  const HardwareProfile& rated = hw;
  for (const std::vector<int64_t>& dims :
       {std::vector<int64_t>{32768, 2048, 6144}, {32768, 2048, 8192}}) {
    EXPECT_TRUE(PriceOp("LinearBackwardWeight", dims, m, plain)->partial) << dims[2];
    const auto priced = PriceOp("LinearBackwardWeight", dims, m, hw);
    EXPECT_FALSE(priced->partial);
    EXPECT_EQ(priced->seconds,
              GemmBackwardWeightTime(hw, dims[0], dims[2], dims[1]) + 32768.0 * dims[2] / 0.5e9);
  }
  for (const std::vector<int64_t>& dims :
       {std::vector<int64_t>{32768, 2048, 2048}, {32768, 8192, 2048}, {32768, 2048, 50304}}) {
    for (const HardwareProfile* p : {&plain, &rated}) {
      const auto priced = PriceOp("LinearBackwardWeight", dims, m, *p);
      EXPECT_FALSE(priced->partial) << dims[1] << "x" << dims[2];
      EXPECT_EQ(priced->seconds, GemmBackwardWeightTime(*p, dims[0], dims[2], dims[1]));
    }
  }
}

}  // namespace
}  // namespace ptdp::costmodel
