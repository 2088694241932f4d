// Selective recomputation's modules (ParallelConfig::recompute_modules; Megatron-Core's
// --recompute-modules; docs/plan-file.md): their text and JSON forms and refusals, what each drops
// from a layer's stash and redoes (bytes and FLOPs worked by hand from the shapes), their price in
// the cost table, --fix and --emit megatron.
#include <gtest/gtest.h>

#include <string>

#include "core/cluster.h"
#include "core/experts.h"
#include "core/ledger.h"
#include "core/model.h"
#include "core/shapes.h"
#include "core/software.h"
#include "costmodel/estimate.h"
#include "costmodel/layer_cost.h"
#include "costmodel/recompute_cost.h"
#include "planner/fix.h"
#include "planner/recompute_choices.h"
#include "planner/report.h"
#include "planner/search.h"

namespace ptdp {
namespace {

ModelSpec Preset(const std::string& name) {
  auto m = LoadModel(name);
  EXPECT_TRUE(m.ok()) << name;
  return *m;
}

Bytes Stash(const ModelSpec& m, const ParallelConfig& c) {
  return ActivationBytes(LayerActivations(m, c, m.dropout > 0), ComputeBytes(c.precision),
                         LinearInputBytes(c.precision));
}

// DeepSeek-V3's published layout as far as one layer cares: t 2, sequence parallelism, bf16.
ParallelConfig Dsv3Layer() {
  ParallelConfig c;
  c.tp = 2;
  c.dp = 32;
  c.ep = 64;
  c.etp = 1;
  c.sequence_parallel = true;
  c.fused_attention = true;
  c.precision = Precision::kBf16;
  c.global_batch = 512;
  return c;
}

TEST(RecomputeModules, TextJsonAndRefusals) {
  auto parsed = ParseRecomputeModules("mla_up_proj+mlp", "f");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, kRecomputeMlaUpProj | kRecomputeMlp);
  EXPECT_EQ(RecomputeModulesText(*parsed), "mla_up_proj+mlp");
  EXPECT_EQ(*ParseRecomputeModules("", "f"), 0);
  EXPECT_FALSE(ParseRecomputeModules("mlp+", "f").ok());
  EXPECT_FALSE(ParseRecomputeModules("+mlp", "f").ok());
  const auto unknown = ParseRecomputeModules("mlp+router", "layout.recompute_modules");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("layout.recompute_modules: 'router' is not one of"),
            std::string::npos);

  const ModelSpec dsv3 = Preset("deepseek-v3");
  ParallelConfig c = Dsv3Layer();
  c.recompute = Recompute::kSelective;
  c.recompute_modules = *parsed;
  ASSERT_TRUE(c.Validate(dsv3).ok()) << c.Validate(dsv3).message();
  EXPECT_NE(c.ToString().find(",recompute=selective,recompute_modules=mla_up_proj+mlp,"),
            std::string::npos);
  auto back = LayoutFromJson(Json::parse(LayoutToJson(c).dump()), "layout");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->recompute_modules, c.recompute_modules);
  const auto bad_json = LayoutFromJson(
      Json::parse(R"({"tp":1,"pp":1,"dp":1,"mbs":1,"recompute_modules":"x"})"), "layout");
  ASSERT_FALSE(bad_json.ok());
  EXPECT_NE(bad_json.status().message().find("layout.recompute_modules: 'x'"), std::string::npos)
      << bad_json.status().message();

  auto refused = [](const ParallelConfig& bad, const ModelSpec& m) {
    const Status s = bad.Validate(m);
    EXPECT_FALSE(s.ok()) << bad.ToString();
    return s.message();
  };
  ParallelConfig full = c;
  full.recompute = Recompute::kFull;
  EXPECT_NE(refused(full, dsv3).find("recompute_modules: needs recompute=selective, not full"),
            std::string::npos);
  ParallelConfig core = c;
  core.recompute_modules = kRecomputeCoreAttn;  // with fused attention: the kernel's forward again
  EXPECT_TRUE(core.Validate(dsv3).ok()) << core.Validate(dsv3).message();
  core.recompute_modules = 0;  // Megatron-Core's default is core_attn too
  EXPECT_TRUE(core.Validate(dsv3).ok()) << core.Validate(dsv3).message();
  const ModelSpec gpt = Preset("gpt-1.7b");
  ParallelConfig dense;
  dense.recompute = Recompute::kSelective;
  dense.recompute_modules = kRecomputeMlaUpProj;
  EXPECT_NE(refused(dense, gpt).find("mla_up_proj needs multi-latent attention"),
            std::string::npos);
  dense.recompute_modules = kRecomputeMoeAct;
  EXPECT_NE(refused(dense, gpt).find("moe_act needs a mixture of experts"), std::string::npos);
  ParallelConfig fp8 = c;
  fp8.recompute_modules = kRecomputeMoeAct;
  fp8.precision = Precision::kFp8;
  EXPECT_NE(refused(fp8, dsv3).find("moe_act with precision fp8"), std::string::npos);
}

// What each module drops from a layer's stash, by hand: mla_up_proj q and k (T a dqk / t each) and
// v (T a dv / t); moe_act the experts' SwiGLU output (N f / etp); mlp, on a dense layer, the
// norm's statistics and the MLP's three inside tensors, its input kept. The working set rebuilt in
// the backward is the larger side's.
TEST(RecomputeModules, EachDropsItsTensorsFromTheStash) {
  const ModelSpec dsv3 = Preset("deepseek-v3");
  const ParallelConfig keep = Dsv3Layer();
  const int64_t T = 4096, a = 128, t = 2, e = 2;
  ParallelConfig up = keep;
  up.recompute = Recompute::kSelective;
  up.recompute_modules = kRecomputeMlaUpProj;
  const Bytes qkv = e * (2 * T * a * 192 / t + T * a * 128 / t);
  EXPECT_EQ(Stash(dsv3, keep) - Stash(dsv3, up), qkv);
  EXPECT_EQ(ActivationBytes(RecomputeWorkingSet(dsv3, up, true), e, e), qkv);

  ParallelConfig act = up;
  act.recompute_modules = kRecomputeMoeAct;
  const int64_t copies = T / t * 8;  // routed tokens (s / t with sequence parallelism) times k
  EXPECT_EQ(ExpertTokens(dsv3, act), copies);
  EXPECT_EQ(Stash(dsv3, keep) - Stash(dsv3, act), e * copies * 2048);
  ParallelConfig both = up;
  both.recompute_modules = kRecomputeMlaUpProj | kRecomputeMoeAct;
  EXPECT_EQ(Stash(dsv3, keep) - Stash(dsv3, both), qkv + e * copies * 2048);
  // The up projections' outputs are larger than the SwiGLU output: they are the working set.
  EXPECT_GT(qkv, e * copies * 2048);
  EXPECT_EQ(ActivationBytes(RecomputeWorkingSet(dsv3, both, true), e, e), qkv);

  const ModelSpec gpt = Preset("gpt-1.7b");  // h 2304, f 9216, s 2048, LayerNorm, dropout
  ParallelConfig plain;
  plain.tp = 2;
  plain.mbs = 2;
  plain.precision = Precision::kBf16;
  ParallelConfig mlp = plain;
  mlp.recompute = Recompute::kSelective;
  mlp.recompute_modules = kRecomputeMlp;
  const int64_t rows = 2 * 2048, h = 2304, f = 9216;
  const Bytes inside = 4 * rows * 2 + e * rows * h + e * rows * f / 2 + e * rows * f / 2;
  EXPECT_EQ(Stash(gpt, plain) - Stash(gpt, mlp), inside);
  EXPECT_EQ(ActivationBytes(RecomputeWorkingSet(gpt, mlp, true), e, e), inside);
  // Megatron-Core's default, core_attn alone, drops what it always did.
  ParallelConfig core = plain;
  core.recompute = Recompute::kSelective;
  EXPECT_EQ(Stash(gpt, plain) - Stash(gpt, core),
            ActivationBytes(AttentionCoreActivations(gpt, core, true), e, e));
}

// The FLOPs redone, by hand: mla_up_proj 2 B s (q_lora a dqk + kv_lora a (dqk_nope + dv)) per
// layer, the prediction depth's included; mlp 2 B s (h 2f + f h) on the three dense layers only.
TEST(RecomputeModules, FlopsRedoneByHand) {
  const ModelSpec dsv3 = Preset("deepseek-v3");
  ParallelConfig c = Dsv3Layer();
  const double base = HardwareIterationFlops(dsv3, c);
  c.recompute = Recompute::kSelective;
  c.recompute_modules = kRecomputeMlaUpProj;
  const double B = 512, s = 4096, layers = 61 + 1;
  const double up = layers * 2 * B * s * (1536.0 * 128 * 192 + 512.0 * 128 * (128 + 128));
  EXPECT_NEAR(HardwareIterationFlops(dsv3, c) - base, up, 1e-9 * up);
  c.recompute_modules = kRecomputeMlp;
  const double mlp = 3 * 2 * B * s * (7168.0 * 2 * 18432 + 18432.0 * 7168);
  EXPECT_NEAR(HardwareIterationFlops(dsv3, c) - base, mlp, 1e-9 * mlp);
  c.recompute_modules = kRecomputeMoeAct;  // elementwise
  EXPECT_EQ(HardwareIterationFlops(dsv3, c), base);
}

// In the cost table each chunk redoes its layers' modules: mixture layers the mixture layer's
// price, dense ones the dense layer's (the MLP only there); the iteration is slower, the peak
// memory lower.
TEST(RecomputeModules, PricedPerLayerKind) {
  const ModelSpec dsv3 = Preset("deepseek-v3");
  auto cluster = LoadCluster("dgx-h100", 64);
  ASSERT_TRUE(cluster.ok());
  cluster->software = *LoadSoftware("megatron-core");
  ParallelConfig c = Dsv3Layer();  // one pipeline stage on 64 GPUs
  c.distributed_optimizer = true;
  ParallelConfig redo = c;
  redo.recompute = Recompute::kSelective;
  redo.recompute_modules = kRecomputeMlaUpProj | kRecomputeMlp;
  ASSERT_TRUE(redo.Validate(dsv3).ok()) << redo.Validate(dsv3).message();
  const costmodel::CostTable t = costmodel::BuildCostTable(dsv3, *cluster, redo);
  const costmodel::ComputeBreakdown moe_layer =
      costmodel::SelectiveRecomputeCost(dsv3, cluster->profile, redo, 0);
  EXPECT_GT(moe_layer.gemm, 0);
  EXPECT_EQ(moe_layer.tp_comm, 0);  // no dense MLP in a mixture layer
  const costmodel::ComputeBreakdown dense_layer =
      costmodel::SelectiveRecomputeCost(DenseLayerModel(dsv3), cluster->profile, redo, 1e-3);
  EXPECT_GT(dense_layer.gemm, moe_layer.gemm);  // the up projections and the MLP's GEMMs
  EXPECT_EQ(dense_layer.tp_comm, 1e-3);
  // The one rank holds the three dense layers, 58 mixture layers and the prediction depth's.
  const costmodel::ChunkCost& first = t.Chunk(0, 0);
  EXPECT_EQ(ChunkDenseLayers(dsv3, redo, 0, 0), 3);
  const int moe = int(ChunkLayers(dsv3, redo, 0, 0).size()) - 3 + dsv3.mtp_layers;
  EXPECT_EQ(moe, 59);
  EXPECT_NEAR(first.recompute.gemm, moe * moe_layer.gemm + 3 * dense_layer.gemm,
              1e-12 + 1e-9 * first.recompute.gemm);
  const costmodel::Prediction plain =
      costmodel::Predict(dsv3, *cluster, c, costmodel::BuildCostTable(dsv3, *cluster, c));
  const costmodel::Prediction redone = costmodel::Predict(dsv3, *cluster, redo, t);
  EXPECT_GT(redone.iteration_s, plain.iteration_s);
  EXPECT_LT(redone.peak_memory, plain.peak_memory);
}

TEST(RecomputeModules, FixAndEmit) {
  auto f = planner::ParseFix("tp=2,recompute_modules=mla_up_proj+mlp");
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(*f->recompute, Recompute::kSelective);
  EXPECT_EQ(*f->recompute_modules, kRecomputeMlaUpProj | kRecomputeMlp);
  auto clash = planner::ParseFix("recompute=full,recompute_modules=mlp");
  ASSERT_FALSE(clash.ok());
  EXPECT_NE(clash.status().message().find("--fix: recompute_modules: needs recompute=selective"),
            std::string::npos);
  EXPECT_FALSE(planner::ParseFix("recompute_modules=attn").ok());

  const ModelSpec dsv3 = Preset("deepseek-v3");
  ParallelConfig c = Dsv3Layer();
  c.recompute = Recompute::kSelective;
  c.recompute_modules = kRecomputeMlaUpProj | kRecomputeMlp;
  EXPECT_NE(planner::MegatronArgs(dsv3, c).find(
                " --recompute-granularity selective --recompute-modules mla_up_proj mlp"),
            std::string::npos);
  c.recompute_modules = 0;
  c.fused_attention = false;
  const std::string plain = planner::MegatronArgs(dsv3, c);
  EXPECT_NE(plain.find(" --recompute-granularity selective"), std::string::npos);
  EXPECT_EQ(plain.find("--recompute-modules"), std::string::npos);
}

// The search tries the modules only when asked (SearchOptions::recompute_modules): each non-empty
// set of those the model has, fused attention too, moe never beside moe_act or shared_experts
// (whose tensors it drops already). DeepSeek-V3 with every other choice fixed: none and full, then
// the 31 sets of mla_up_proj, mlp, moe_act, moe and shared_experts less the 12 with moe and one of
// those two (in FP8, which refuses moe_act, 15 less 4).
TEST(RecomputeModules, SearchedWhenAsked) {
  const ModelSpec dsv3 = Preset("deepseek-v3");
  auto cluster = LoadCluster("dgx-h100", 1024);
  ASSERT_TRUE(cluster.ok());
  cluster->software = *LoadSoftware("megatron-core");
  const std::string layers = "1" + [] {
    std::string s;
    for (int i = 0; i < 30; ++i) s += "/2";
    return s;
  }() + "/0";
  planner::SearchOptions o;
  o.global_batch = 8192;
  o.selective_recompute = true;
  auto fix = planner::ParseFix(
      "tp=2,pp=8,dp=64,vp=4,schedule=interleaved,ep=64,etp=1,mbs=1,sequence_parallel=on,"
      "scatter_gather=on,fused_attention=on,distributed_optimizer=on,grad_accumulation_fusion=on,"
      "moe_a2a_overlap=off,precision=bf16,stage_layers=" +
      layers);
  ASSERT_TRUE(fix.ok()) << fix.status().message();
  o.fix = *fix;
  auto plain = planner::Search(dsv3, *cluster, o);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->considered, 2);  // selective of core_attn has nothing to drop when fused
  o.recompute_modules = true;
  auto searched = planner::Search(dsv3, *cluster, o);
  ASSERT_TRUE(searched.ok()) << searched.status().message();
  EXPECT_EQ(searched->considered, 2 + 19);
  for (const planner::Candidate& cand : searched->top) {
    EXPECT_EQ(cand.layout.recompute_modules & kRecomputeCoreAttn, 0) << cand.layout.ToString();
    // No set kept beside a strict subset of it that fits (RecomputesMoreThanAFit).
    for (const planner::Candidate& other : searched->top) {
      if (cand.layout.recompute != Recompute::kSelective ||
          other.layout.recompute != Recompute::kSelective) {
        continue;
      }
      // Every other choice is fixed; 0 would be core_attn, which fused attention leaves out.
      const uint8_t a = cand.layout.recompute_modules, b = other.layout.recompute_modules;
      EXPECT_FALSE(a != b && (a & b) == a)
          << RecomputeModulesText(a) << " beside " << RecomputeModulesText(b);
    }
  }
  EXPECT_GT(searched->rejected["recomputes_more_than_a_fit"], 0);
  o.fix.precision = Precision::kFp8;
  auto fp8 = planner::Search(dsv3, *cluster, o);
  ASSERT_TRUE(fp8.ok()) << fp8.status().message();
  EXPECT_EQ(fp8->considered, 2 + 11);
}

}  // namespace
}  // namespace ptdp

namespace ptdp {
namespace {

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

// layernorm (Megatron-Core's output-discarding checkpoint of the pre-MLP norm): a mixture layer's
// router input, [s b / t, h] under sequence parallelism, leaves the stash and is rebuilt with
// SwiGLU's output when both are redone; the backward pays a read and a write of it. Qwen3-30B-A3B
// at t 2, b 1, s 4096, h 2048, bf16: 2 x 4096 / 2 x 2048 bytes.
TEST(RecomputeModules, LayernormDropsTheRouterInput) {
  const ModelSpec qwen = Preset("qwen3-30b-a3b");
  const ParallelConfig keep = QwenLayer(0), norm = QwenLayer(kRecomputeLayernorm);
  ASSERT_TRUE(norm.Validate(qwen).ok()) << norm.Validate(qwen).message();
  const Bytes router_input = 2 * (4096 / 2) * 2048;
  EXPECT_EQ(Stash(qwen, keep) - Stash(qwen, norm), router_input);
  EXPECT_EQ(ActivationBytes(RecomputeWorkingSet(qwen, norm, true), 2, 2), router_input);
  ParallelConfig both = norm;
  both.recompute_modules = kRecomputeLayernorm | kRecomputeMoeAct;
  EXPECT_EQ(RecomputeModulesText(both.recompute_modules), "moe_act+layernorm");
  EXPECT_EQ(ActivationBytes(RecomputeWorkingSet(qwen, both, true), 2, 2),
            router_input + ActivationBytes({ExpertActOutput(qwen, both)}, 2, 2));
  auto cluster = LoadCluster("dgx-h100", 8);
  ASSERT_TRUE(cluster.ok());
  EXPECT_NEAR(costmodel::SelectiveRecomputeCost(qwen, cluster->profile, norm, 0).memory,
              costmodel::MemoryBoundTime(cluster->profile, 2.0 * double(router_input), 1), 1e-15);
  // A dense model's norms (and an MLA model's) are not modelled as separate outputs: refused.
  ParallelConfig dense;
  dense.recompute = Recompute::kSelective;
  dense.recompute_modules = kRecomputeLayernorm;
  EXPECT_NE(dense.Validate(Preset("gpt-1.7b"))
                .message()
                .find("recompute_modules: layernorm is "
                      "modelled for a mixture of experts"),
            std::string::npos);
}

// recompute_modules moe and shared_experts: Megatron-Core's normal checkpoints of a mixture
// layer's whole MoE block and of its shared expert (megatron/core/transformer/moe/moe_layer.py at
// d98e8a64): their names, Megatron-Core's refusals, what each drops from a layer's stash and
// rebuilds (bytes worked by hand from the shapes), the FLOPs and the price they add; and the
// search's rule for sets that redo more than one that fits.
TEST(RecomputeMoe, NamesAreMegatronCores) {
  auto parsed = ParseRecomputeModules("moe+shared_experts", "f");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, kRecomputeMoe | kRecomputeSharedExperts);
  EXPECT_EQ(RecomputeModulesText(kRecomputeSharedExperts | kRecomputeMoeAct | kRecomputeMoe),
            "moe_act+moe+shared_experts");
  const ModelSpec dsv3 = Preset("deepseek-v3");
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
  const ModelSpec qwen = Preset("qwen3-30b-a3b"), dsv3 = Preset("deepseek-v3");
  ParallelConfig dense;
  dense.recompute = Recompute::kSelective;
  dense.recompute_modules = kRecomputeMoe;
  EXPECT_NE(message(Preset("gpt-1.7b"), dense).find("recompute_modules: moe needs a mixture"),
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
  const ModelSpec qwen = Preset("qwen3-30b-a3b");
  const ParallelConfig keep = QwenLayer(0), block = QwenLayer(kRecomputeMoe);
  const Bytes T0 = 2048, N = T0 * 8, E = 128, k = 8, h = 2048, f = 768;
  const Bytes inside = T0 * E * 4 + T0 * k * 4 + N * h * 2 + N * 2 * f * 2 + N * f * 2;
  EXPECT_EQ(Stash(qwen, keep) - Stash(qwen, block), inside);
  EXPECT_EQ(ActivationBytes(RecomputeWorkingSet(qwen, block, true), 2, 2), inside);
  // With layernorm too the input goes as well, and is rebuilt with the rest.
  const ParallelConfig both = QwenLayer(kRecomputeMoe | kRecomputeLayernorm);
  EXPECT_EQ(Stash(qwen, block) - Stash(qwen, both), T0 * h * 2);
  EXPECT_EQ(ActivationBytes(RecomputeWorkingSet(qwen, both, true), 2, 2), inside + T0 * h * 2);
}

// shared_experts: DeepSeek-V3's shared expert (f_s 2048, over t 2: 1024 a rank) on all 4096 tokens
// of the microbatch: its SwiGLU input [4096, 2048] and fc2's input [4096, 1024], bf16.
TEST(RecomputeMoe, SharedExpertsDropsItsInside) {
  const ModelSpec dsv3 = Preset("deepseek-v3");
  ParallelConfig keep = QwenLayer(0), shared = QwenLayer(kRecomputeSharedExperts);
  keep.ep = shared.ep = 4;
  ASSERT_TRUE(shared.Validate(dsv3).ok()) << shared.Validate(dsv3).message();
  const Bytes inside = 4096 * 2048 * 2 + 4096 * 1024 * 2;
  const ModelSpec layer = LayerModel(dsv3, dsv3.layers - 1);  // a mixture layer
  EXPECT_EQ(Stash(layer, keep) - Stash(layer, shared), inside);
  EXPECT_EQ(ActivationBytes(RecomputeWorkingSet(layer, shared, true), 2, 2), inside);
}

// The FLOPs: moe redoes each mixture layer's MLP forward, 2 B s h (E + 3 k f) without a shared
// expert; layernorm adds none, so it is the baseline.
TEST(RecomputeMoe, FlopsAddTheBlocksForward) {
  const ModelSpec qwen = Preset("qwen3-30b-a3b");
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
  const ModelSpec dsv3 = Preset("deepseek-v3");
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
