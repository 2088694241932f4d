// Selective recomputation of a mixture layer's whole MoE block and of its shared expert
// (recompute_modules moe and shared_experts, Megatron-Core's normal checkpoints of
// megatron/core/transformer/moe/moe_layer.py at d98e8a64): their names, Megatron-Core's
// refusals, what each drops from a layer's stash and rebuilds (bytes worked by hand from the
// shapes), the FLOPs and the price they add, and the search.
#include <gtest/gtest.h>

#include <string>

#include "core/cluster.h"
#include "core/experts.h"
#include "core/ledger.h"
#include "core/model.h"
#include "core/shapes.h"
#include "costmodel/recompute_cost.h"
#include "planner/recompute_choices.h"
#include "planner/report.h"

namespace ptdp {
namespace {

ModelSpec MoePreset(const std::string& name) {
  auto m = LoadModel(name);
  EXPECT_TRUE(m.ok()) << name;
  return *m;
}

Bytes LayerStashBytes(const ModelSpec& m, const ParallelConfig& c) {
  return ActivationBytes(LayerActivations(m, c, m.dropout > 0), ComputeBytes(c.precision),
                         LinearInputBytes(c.precision));
}

// Qwen3-30B-A3B (h 2048, 128 experts of 768, top 8, s 4096) at t 2 with sequence parallelism,
// ep 8, b 1, bf16.
ParallelConfig QwenLayer(uint8_t modules) {
  ParallelConfig c;
  c.tp = 2;
  c.dp = 4;
  c.ep = 8;
  c.etp = 1;
  c.mbs = 1;
  c.global_batch = 8;
  c.sequence_parallel = c.fused_attention = true;
  c.precision = Precision::kBf16;
  c.recompute = modules != 0 ? Recompute::kSelective : Recompute::kNone;
  c.recompute_modules = modules;
  return c;
}

TEST(RecomputeMoe, NamesAreMegatronCores) {
  auto parsed = ParseRecomputeModules("moe+shared_experts", "f");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, kRecomputeMoe | kRecomputeSharedExperts);
  EXPECT_EQ(RecomputeModulesText(kRecomputeSharedExperts | kRecomputeMoeAct | kRecomputeMoe),
            "moe_act+moe+shared_experts");
  const ModelSpec dsv3 = MoePreset("deepseek-v3");
  ParallelConfig c = QwenLayer(kRecomputeMoe | kRecomputeSharedExperts);
  c.ep = 4;
  EXPECT_NE(planner::MegatronArgs(dsv3, c).find(" --recompute-granularity selective "
                                                "--recompute-modules moe shared_experts"),
            std::string::npos);
}

// Each refusal names the module and its reason: Megatron-Core raises on the last two.
TEST(RecomputeMoe, RefusalsNameTheRule) {
  auto message = [](const ModelSpec& m, const ParallelConfig& c) {
    return c.Validate(m).message();
  };
  const ModelSpec qwen = MoePreset("qwen3-30b-a3b"), dsv3 = MoePreset("deepseek-v3");
  ParallelConfig dense;
  dense.recompute = Recompute::kSelective;
  dense.recompute_modules = kRecomputeMoe;
  EXPECT_NE(message(MoePreset("gpt-1.7b"), dense).find("recompute_modules: moe needs a mixture"),
            std::string::npos);
  EXPECT_NE(message(qwen, QwenLayer(kRecomputeSharedExperts))
                .find("recompute_modules: shared_experts needs a shared expert"),
            std::string::npos);
  ParallelConfig beside = QwenLayer(kRecomputeSharedExperts);
  beside.moe_shared_expert_overlap = true;
  EXPECT_NE(message(dsv3, beside).find("shared_experts with moe_shared_expert_overlap"),
            std::string::npos);
  ParallelConfig combined = QwenLayer(kRecomputeMoe);
  combined.moe_a2a_overlap = true;
  EXPECT_NE(message(qwen, combined).find("moe with moe_a2a_overlap: Megatron-Core refuses it"),
            std::string::npos);
  EXPECT_TRUE(QwenLayer(kRecomputeMoe).Validate(qwen).ok())
      << QwenLayer(kRecomputeMoe).Validate(qwen).message();
}

// moe keeps the block's input only (the router's input, [s b / t, h]); the router's fp32 logits
// [T0, E] and probabilities [T0, k], the dispatched tokens [N, h], SwiGLU's input [N, 2f] and
// output [N, f] leave the stash and make the backward's working set. T0 = 4096 / 2 = 2048 routed
// tokens, N = T0 k = 16384 copies.
TEST(RecomputeMoe, TheBlockKeepsItsInputOnly) {
  const ModelSpec qwen = MoePreset("qwen3-30b-a3b");
  const ParallelConfig keep = QwenLayer(0), block = QwenLayer(kRecomputeMoe);
  const Bytes T0 = 2048, N = T0 * 8, E = 128, k = 8, h = 2048, f = 768;
  const Bytes inside = T0 * E * 4 + T0 * k * 4 + N * h * 2 + N * 2 * f * 2 + N * f * 2;
  EXPECT_EQ(LayerStashBytes(qwen, keep) - LayerStashBytes(qwen, block), inside);
  EXPECT_EQ(ActivationBytes(RecomputeWorkingSet(qwen, block, true), 2, 2), inside);
  // With layernorm too the input goes as well, and is rebuilt with the rest.
  const ParallelConfig both = QwenLayer(kRecomputeMoe | kRecomputeLayernorm);
  EXPECT_EQ(LayerStashBytes(qwen, block) - LayerStashBytes(qwen, both), T0 * h * 2);
  EXPECT_EQ(ActivationBytes(RecomputeWorkingSet(qwen, both, true), 2, 2), inside + T0 * h * 2);
}

// shared_experts: DeepSeek-V3's shared expert (f_s 2048, over t 2: 1024 a rank) on all 4096 tokens
// of the microbatch: its SwiGLU input [4096, 2048] and fc2's input [4096, 1024], bf16.
TEST(RecomputeMoe, SharedExpertsDropsItsInside) {
  const ModelSpec dsv3 = MoePreset("deepseek-v3");
  ParallelConfig keep = QwenLayer(0), shared = QwenLayer(kRecomputeSharedExperts);
  keep.ep = shared.ep = 4;
  ASSERT_TRUE(shared.Validate(dsv3).ok()) << shared.Validate(dsv3).message();
  const Bytes inside = 4096 * 2048 * 2 + 4096 * 1024 * 2;
  const ModelSpec layer = LayerModel(dsv3, dsv3.layers - 1);  // a mixture layer
  EXPECT_EQ(LayerStashBytes(layer, keep) - LayerStashBytes(layer, shared), inside);
  EXPECT_EQ(ActivationBytes(RecomputeWorkingSet(layer, shared, true), 2, 2), inside);
}

// The FLOPs: moe redoes each mixture layer's MLP forward, 2 B s h (E + 3 k f) without a shared
// expert; layernorm adds none, so it is the baseline.
TEST(RecomputeMoe, FlopsAddTheBlocksForward) {
  const ModelSpec qwen = MoePreset("qwen3-30b-a3b");
  ParallelConfig base = QwenLayer(kRecomputeLayernorm), block = QwenLayer(kRecomputeMoe);
  base.global_batch = block.global_batch = 64;
  const double B = 64, s = 4096, h = 2048;
  const double want = 48 * 2 * B * s * h * (128 + 3 * 8 * 768.0);
  EXPECT_NEAR(HardwareIterationFlops(qwen, block) - HardwareIterationFlops(qwen, base), want,
              1e-9 * want);
}

// The price: the block's and the shared expert's forwards as the caller gives them, the shared
// expert's twice with both modules (its checkpoint nests inside the block's).
TEST(RecomputeMoe, PriceIsTheForwardsGiven) {
  const ModelSpec dsv3 = MoePreset("deepseek-v3");
  const ModelSpec layer = LayerModel(dsv3, dsv3.layers - 1);
  auto cluster = LoadCluster("dgx-h100", 8);
  ASSERT_TRUE(cluster.ok());
  costmodel::MixtureForward forward;
  forward.block = {0.004, 0.002, 0.003, 0};
  forward.shared = {0.001, 0.0005, 0.0002, 0};
  auto price = [&](uint8_t modules) {
    ParallelConfig c = QwenLayer(modules);
    c.ep = 4;
    return costmodel::SelectiveRecomputeCost(layer, cluster->profile, c, 0, forward);
  };
  EXPECT_DOUBLE_EQ(price(kRecomputeMoe).Total(), 0.009 + 0.0017);
  EXPECT_DOUBLE_EQ(price(kRecomputeSharedExperts).Total(), 0.0017);
  EXPECT_DOUBLE_EQ(price(kRecomputeMoe | kRecomputeSharedExperts).tp_comm, 0.003 + 2 * 0.0002);
  EXPECT_DOUBLE_EQ(price(0).Total(), 0.0);
}

// The search skips a selective set that redoes a strict superset of one that fits with every other
// choice the same: it only adds time. Core_attn is the default set's (0).
TEST(RecomputeMoe, TheSearchSkipsMoreThanAFit) {
  using planner::RecomputeChoice;
  using planner::RecomputesMoreThanAFit;
  const Recompute sel = Recompute::kSelective;
  const uint8_t mla = kRecomputeMlaUpProj, mlp = kRecomputeMlp, moe = kRecomputeMoe;
  EXPECT_TRUE(RecomputesMoreThanAFit(RecomputeChoice{sel, uint8_t(mla | mlp)}, {mla}));
  EXPECT_TRUE(RecomputesMoreThanAFit(RecomputeChoice{sel, uint8_t(mla | moe)}, {moe, mlp}));
  EXPECT_FALSE(RecomputesMoreThanAFit(RecomputeChoice{sel, mla}, {mla}));
  EXPECT_FALSE(RecomputesMoreThanAFit(RecomputeChoice{sel, uint8_t(mla | mlp)}, {moe}));
  EXPECT_FALSE(RecomputesMoreThanAFit(RecomputeChoice{Recompute::kFull, 0}, {mla}));
  EXPECT_EQ(planner::ModuleSet(RecomputeChoice{sel, 0}), kRecomputeCoreAttn);
  EXPECT_TRUE(RecomputesMoreThanAFit(RecomputeChoice{sel, uint8_t(kRecomputeCoreAttn | mlp)},
                                     {planner::ModuleSet(RecomputeChoice{sel, 0})}));
}

}  // namespace
}  // namespace ptdp
