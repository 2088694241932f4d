// DeepSeek-V3's parts (docs/moe.md): the shared expert beside the routed ones
// (ModelSpec::moe_shared_ffn_hidden), the leading dense layers (ModelSpec::moe_dense_layers),
// multi-latent attention (ModelSpec::mla_*), multi-token prediction (ModelSpec::mtp_layers) and
// per-virtual-stage layouts. Each is checked against the model it reduces to where there is one
// (a shared expert of f is the dense MLP's work beside the experts; a stage of dense layers is the
// dense model's stage; MLA's core with dv = dqk is ordinary attention's), against the published
// parameter counts, and against Megatron-Core's FLOP count and flags.
#include <gtest/gtest.h>

#include "core/cluster.h"
#include "core/experts.h"
#include "core/ledger.h"
#include "core/model.h"
#include "core/shapes.h"
#include "core/software.h"
#include "costmodel/estimate.h"
#include "costmodel/gemm.h"
#include "costmodel/layer_cost.h"
#include "costmodel/moe_cost.h"
#include "planner/fix.h"
#include "planner/report.h"
#include "planner/search.h"

namespace ptdp::planner {
namespace {

// A small Llama-style mixture: 4 layers, 8 experts of 256, top-2; dense MLP of 1024.
ModelSpec SmallMixture() {
  ModelSpec m;
  m.name = "small-mixture";
  m.layers = 4;
  m.hidden = 512;
  m.heads = 8;
  m.kv_heads = 4;
  m.ffn_hidden = 1024;
  m.seq_len = 256;
  m.vocab = 4096;
  m.swiglu = m.rmsnorm = m.rotary = true;
  m.linear_bias = false;
  m.tied_embeddings = false;
  m.moe_experts = 8;
  m.moe_topk = 2;
  m.moe_ffn_hidden = 256;
  return m;
}

ModelSpec Preset(const std::string& name) {
  auto m = LoadModel(name);
  EXPECT_TRUE(m.ok()) << name;
  return *m;
}

ParallelConfig TwoStages() {
  ParallelConfig c;
  c.pp = 2;
  c.global_batch = 8;
  c.precision = Precision::kBf16;
  c.grad_accumulation_fusion = true;
  return c;
}

TEST(MoeLayers, ValidateNamesTheField) {
  ModelSpec m = SmallMixture();
  m.moe_dense_layers = 4;
  EXPECT_NE(m.Validate().message().find("moe_dense_layers: 4 is outside [0, 3]"), std::string::npos)
      << m.Validate().message();
  ModelSpec dense = DenseLayerModel(SmallMixture());
  dense.moe_shared_ffn_hidden = 512;
  EXPECT_NE(dense.Validate().message().find("moe_shared_ffn_hidden: set without moe_experts"),
            std::string::npos)
      << dense.Validate().message();
  ModelSpec shared = SmallMixture();
  shared.moe_shared_ffn_hidden = 502;
  ParallelConfig c = TwoStages();
  c.pp = 1;
  c.tp = 4;
  c.sequence_parallel = true;
  EXPECT_NE(c.Validate(shared).message().find("tp: 4 does not divide moe_shared_ffn_hidden 502"),
            std::string::npos)
      << c.Validate(shared).message();
}

// The shared expert's weights, FLOPs and GEMMs are a dense SwiGLU MLP's of its size.
TEST(MoeLayers, TheSharedExpertIsADenseMlpBesideTheExperts) {
  const ModelSpec routed = SmallMixture();
  ModelSpec shared = routed;
  shared.moe_shared_ffn_hidden = 1024;  // the dense MLP's size
  const int64_t h = routed.hidden, l = routed.layers;
  EXPECT_EQ(ParameterCount(shared) - ParameterCount(routed), l * 3 * 1024 * h);
  ParallelConfig c = TwoStages();
  const double B = 8, s = double(routed.seq_len);
  EXPECT_NEAR(ModelIterationFlops(shared, c) - ModelIterationFlops(routed, c),
              3 * l * 6 * B * s * h * 1024, 1e-9 * ModelIterationFlops(shared, c));
  // One rank, tp 1: its GEMMs are what the dense layer's MLP adds to the layer without one.
  const HardwareProfile hw = LoadCluster("dgx-h100", 8)->profile;
  const ModelSpec dense = DenseLayerModel(shared);
  const auto with_mlp = costmodel::TransformerLayerCost(dense, hw, c.precision, 1, 1, 0);
  const auto without = costmodel::TransformerLayerCost(shared, hw, c.precision, 1, 1, 0);
  const auto expert = costmodel::SharedExpertCost(shared, hw, c, 0, 0, 0);
  EXPECT_NEAR(without.forward.gemm + expert.forward.gemm, with_mlp.forward.gemm,
              1e-9 * with_mlp.forward.gemm);
  EXPECT_NEAR(without.backward.gemm + expert.backward.gemm, with_mlp.backward.gemm,
              1e-9 * with_mlp.backward.gemm);
  EXPECT_EQ(costmodel::SharedExpertCost(routed, hw, c, 0, 0, 0).forward.Total(), 0.0);
  // It keeps its SwiGLU's and fc2's inputs on every token (b s 2f and b s f in bf16); its fc1's is
  // the router's input.
  const Bytes kept = ListBytes(LayerActivations(shared, c, false), c) -
                     ListBytes(LayerActivations(routed, c, false), c);
  EXPECT_EQ(kept, Bytes(2) * s * (2 * 1024 + 1024));
  // Its weights are dense: reduced over the data-parallel group, not the experts'.
  EXPECT_EQ(StageExpertElements(shared, c, 0), StageExpertElements(routed, c, 0));
}

// A stage of leading dense layers costs, holds and keeps what the dense model's stage does; a
// stage of mixture layers what the all-mixture model's does.
TEST(MoeLayers, LeadingDenseLayersAreTheDenseModelsOnTheirStage) {
  const ModelSpec all = SmallMixture();
  ModelSpec mixed = all;
  mixed.moe_dense_layers = 2;  // rank 0 holds the two dense layers, rank 1 two mixture layers
  const ModelSpec dense = DenseLayerModel(all);
  const ParallelConfig c = TwoStages();
  ASSERT_TRUE(c.Validate(mixed).ok()) << c.Validate(mixed).message();
  EXPECT_EQ(RankDenseLayers(mixed, c, 0), 2);
  EXPECT_EQ(RankDenseLayers(mixed, c, 1), 0);
  EXPECT_EQ(StageParameterElements(mixed, c, 0), StageParameterElements(dense, c, 0));
  EXPECT_EQ(StageParameterElements(mixed, c, 1), StageParameterElements(all, c, 1));
  EXPECT_EQ(StageExpertElements(mixed, c, 0), 0);
  EXPECT_EQ(StageExpertElements(mixed, c, 1), StageExpertElements(all, c, 1));
  EXPECT_EQ(ChunkStashBytes(mixed, c, 0, 0), ChunkStashBytes(dense, c, 0, 0));
  EXPECT_EQ(ChunkStashBytes(mixed, c, 1, 0), ChunkStashBytes(all, c, 1, 0));
  // The parameter count and the named tensors agree.
  int64_t named = 0;
  for (int r = 0; r < c.pp; ++r) {
    for (const ParamTensor& p : StageParameters(mixed, c, r)) named += p.LocalElements();
  }
  EXPECT_EQ(named, ParameterCount(mixed, c.tp));
  EXPECT_EQ(named, StageParameterElements(mixed, c, 0) + StageParameterElements(mixed, c, 1));

  const auto cluster = LoadCluster("dgx-h100", 2);
  ASSERT_TRUE(cluster.ok());
  const costmodel::CostTable t = costmodel::BuildCostTable(mixed, *cluster, c);
  const costmodel::CostTable td = costmodel::BuildCostTable(dense, *cluster, c);
  const costmodel::CostTable ta = costmodel::BuildCostTable(all, *cluster, c);
  EXPECT_DOUBLE_EQ(t.Chunk(0, 0).ForwardTime(), td.Chunk(0, 0).ForwardTime());
  EXPECT_DOUBLE_EQ(t.Chunk(0, 0).BackwardTime(), td.Chunk(0, 0).BackwardTime());
  EXPECT_DOUBLE_EQ(t.Chunk(1, 0).ForwardTime(), ta.Chunk(1, 0).ForwardTime());
  EXPECT_DOUBLE_EQ(t.Chunk(1, 0).BackwardTime(), ta.Chunk(1, 0).BackwardTime());

  // FLOPs: k/l of the way from the all-mixture model's to the dense one's; each rank's share is
  // its kind's, and the shares add up to the iteration's.
  const double fa = ModelIterationFlops(all, c), fd = ModelIterationFlops(dense, c);
  EXPECT_NEAR(ModelIterationFlops(mixed, c), fa + 0.5 * (fd - fa), 1e-12 * fa);
  ParallelConfig full = c;
  full.recompute = Recompute::kFull;
  EXPECT_NEAR(PipelineRankFlops(mixed, full, 0) + PipelineRankFlops(mixed, full, 1),
              HardwareIterationFlops(mixed, full), 1e-9 * HardwareIterationFlops(mixed, full));
  EXPECT_NEAR(PipelineRankFlops(mixed, full, 0), PipelineRankFlops(dense, full, 0),
              1e-9 * PipelineRankFlops(dense, full, 0));
}

// A per-layer pattern is priced as what it places: [0, 0, 1, 1] as two leading dense layers, and
// alternating kinds give each stage its own mixture of them.
TEST(MoeLayers, APatternPlacesTheKindsLayerByLayer) {
  ModelSpec leading = SmallMixture();
  leading.moe_dense_layers = 2;
  ModelSpec pattern = SmallMixture();
  pattern.moe_layer_pattern = {0, 0, 1, 1};
  const ParallelConfig c = TwoStages();
  ASSERT_TRUE(c.Validate(pattern).ok()) << c.Validate(pattern).message();
  EXPECT_EQ(ParameterCount(pattern), ParameterCount(leading));
  EXPECT_EQ(ModelIterationFlops(pattern, c), ModelIterationFlops(leading, c));
  const auto cluster = LoadCluster("dgx-h100", 2);
  ASSERT_TRUE(cluster.ok());
  const costmodel::CostTable a = costmodel::BuildCostTable(pattern, *cluster, c);
  const costmodel::CostTable b = costmodel::BuildCostTable(leading, *cluster, c);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(a.Chunk(r, 0).ForwardTime(), b.Chunk(r, 0).ForwardTime());
    EXPECT_EQ(a.Chunk(r, 0).BackwardTime(), b.Chunk(r, 0).BackwardTime());
    EXPECT_EQ(ChunkStashBytes(pattern, c, r, 0), ChunkStashBytes(leading, c, r, 0));
  }
  ModelSpec alternating = SmallMixture();
  alternating.moe_layer_pattern = {1, 0, 1, 0};
  const ModelSpec all = SmallMixture();
  EXPECT_EQ(StageExpertElements(alternating, c, 0), StageExpertElements(all, c, 0) / 2);
  EXPECT_EQ(RankDenseLayers(alternating, c, 1), 1);
  int64_t named = 0;
  for (int r = 0; r < c.pp; ++r) {
    for (const ParamTensor& p : StageParameters(alternating, c, r)) named += p.LocalElements();
  }
  EXPECT_EQ(named, ParameterCount(alternating));
  ModelSpec bad = SmallMixture();
  bad.moe_layer_pattern = {1, 0, 2};
  EXPECT_NE(bad.Validate().message().find("moe_layer_pattern: expected one 0 (dense) or 1"),
            std::string::npos)
      << bad.Validate().message();
}

// The cost table's per-rank parameter counts (StageParameterCounts) are every rank's own where the
// ranks between the first and the last are unlike: a mixture's dense layers on one of them, or
// per-stage counts. (They had been the second rank's for all of them; the search's own count
// was right.)
TEST(MoeLayers, EveryRanksParametersAreItsOwn) {
  ModelSpec m = SmallMixture();
  m.moe_dense_layers = 2;
  ParallelConfig c = TwoStages();
  c.pp = 4;  // one layer each: rank 1 a dense one, rank 2 a mixture one
  c.global_batch = 8;
  ASSERT_TRUE(c.Validate(m).ok()) << c.Validate(m).message();
  std::vector<int64_t> counts = costmodel::StageParameterCounts(m, c);
  for (int r = 0; r < c.pp; ++r) EXPECT_EQ(counts[size_t(r)], StageParameterElements(m, c, r));
  EXPECT_NE(counts[1], counts[2]);
  ModelSpec tiny = *LoadModel("tiny");
  tiny.layers = 8;
  ParallelConfig split = c;
  split.stage_layers = {3, 1, 2, 2};
  ASSERT_TRUE(split.Validate(tiny).ok()) << split.Validate(tiny).message();
  counts = costmodel::StageParameterCounts(tiny, split);
  for (int r = 0; r < split.pp; ++r) {
    EXPECT_EQ(counts[size_t(r)], StageParameterElements(tiny, split, r));
  }
}

// Qwen/Qwen1.5-MoE-A2.7B's config.json (as its model page lists it): 60 experts of 1408, top-4,
// a gated shared expert of 5632; 14.3B parameters on its model card. Leading mlp_only_layers are
// dense layers; any other list of dense layers is refused by name.
constexpr const char* kQwen2Moe = R"({"architectures": ["Qwen2MoeForCausalLM"],
  "attention_dropout": 0.0, "decoder_sparse_step": 1, "hidden_act": "silu", "hidden_size": 2048,
  "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21,
  "mlp_only_layers": [], "model_type": "qwen2_moe", "moe_intermediate_size": 1408,
  "norm_topk_prob": false, "num_attention_heads": 16, "num_experts": 60,
  "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 16,
  "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 5632,
  "sliding_window": 32768, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

TEST(MoeLayers, HuggingFaceQwen2MoeAndTheEmittedFlags) {
  auto published = ModelFromJson(Json::parse(kQwen2Moe), "model");
  ASSERT_TRUE(published.ok()) << published.status().message();
  EXPECT_NEAR(double(ParameterCount(*published)) / 1e9, 14.3, 0.05);
  EXPECT_EQ(published->moe_dense_layers, 0);
  std::string leading = kQwen2Moe;
  leading.replace(leading.find("\"mlp_only_layers\": []"), 21, "\"mlp_only_layers\": [0, 1]");
  auto m = ModelFromJson(Json::parse(leading), "model");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->moe_experts, 60);
  EXPECT_EQ(m->moe_shared_ffn_hidden, 5632);
  EXPECT_EQ(m->moe_dense_layers, 2);
  EXPECT_TRUE(m->moe_shared_gate);
  EXPECT_TRUE(m->qkv_bias);
  auto back = ModelFromJson(Json::parse(ModelToJson(*m).dump()), "model");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(ParameterCount(*back), ParameterCount(*m));
  // Dense layers elsewhere than first: a per-layer pattern, emitted as Megatron-Core's list.
  std::string gap = leading;
  gap.replace(gap.find("[0, 1]"), 6, "[1, 3]");
  auto placed = ModelFromJson(Json::parse(gap), "model");
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  ASSERT_EQ(placed->moe_layer_pattern.size(), 24u);
  EXPECT_EQ(placed->moe_dense_layers, 0);
  EXPECT_EQ(MixtureDenseLayersIn(*placed, 0, 24), 2);
  EXPECT_FALSE(placed->IsMoeLayer(3));
  EXPECT_EQ(ParameterCount(*placed), ParameterCount(*m));  // two dense layers either way
  std::string out_of_range = leading;
  out_of_range.replace(out_of_range.find("[0, 1]"), 6, "[0, 24]");
  auto refused = ModelFromJson(Json::parse(out_of_range), "model");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("model.mlp_only_layers: 24 is not a layer"),
            std::string::npos)
      << refused.status().message();
  ParallelConfig one = TwoStages();
  one.pp = 1;
  EXPECT_NE(MegatronArgs(*placed, one).find(" --moe-layer-freq \"[1,0,1,0,1,1,"), std::string::npos)
      << MegatronArgs(*placed, one);

  ParallelConfig c = TwoStages();
  c.pp = 1;
  const std::string args = MegatronArgs(*m, c);
  EXPECT_NE(args.find(" --moe-shared-expert-intermediate-size 5632 --moe-shared-expert-gate"),
            std::string::npos)
      << args;
  EXPECT_NE(args.find(" --moe-layer-freq \"([0]*2+[1]*22)\""), std::string::npos) << args;
}

// DeepSeek-V3's 671B parameters of its main model (its model card; its 14B multi-token prediction
// module apart), and the 187.1M of one layer's multi-latent attention (q_down 1536 x 7168, q_up
// 128 x 192 x 1536, kv_down 576 x 7168, kv_up 128 x 256 x 512, the projection 7168 x 128 x 128,
// the latents' norms).
TEST(Mla, ParameterCountsMatchThePublishedOnes) {
  const ModelSpec m = Preset("deepseek-v3");
  ModelSpec main = m;
  main.mtp_layers = 0;
  EXPECT_NEAR(double(ParameterCount(main)) / 1e9, 671.0, 0.5);
  // Its one multi-token prediction depth: a mixture layer, two input norms, eh_proj [h, 2h] and a
  // final norm (11.6B; with the depth's own copies of the embedding and the output layer, 0.93B
  // each, the 14B of the model card's 685B).
  int64_t depth = 0;
  ParallelConfig all;
  all.global_batch = 1;
  for (const ParamTensor& p : ChunkParameters(m, all, 0, 0)) {
    if (p.name.rfind("mtp0.", 0) == 0) depth += p.LocalElements();
  }
  EXPECT_EQ(ParameterCount(m) - ParameterCount(main), depth);
  EXPECT_NEAR(double(depth) / 1e9, 11.6, 0.05);
  const int64_t attention = MlaProjectionParameters(m) + m.hidden * m.AttnWidth();
  EXPECT_EQ(attention, 1536 * 7168 + 128 * 192 * 1536 + 576 * 7168 + 128 * 256 * 512 +
                           7168 * 128 * 128 + 1536 + 512);
  EXPECT_NEAR(double(attention) / 1e6, 187.1, 0.05);
  // One rank's named tensors add up to the count; the down projections are whole on every
  // tensor rank, the up projections split.
  ParallelConfig one;
  one.global_batch = 1;
  int64_t named = 0;
  for (const ParamTensor& p : ChunkParameters(m, one, 0, 0)) named += p.LocalElements();
  EXPECT_EQ(named, ParameterCount(m));
  // On two pipeline stages the last holds the depth and a copy of the word embedding, tied to the
  // first stage's (so the two all-reduce its gradient).
  ParallelConfig two_stages = one;
  two_stages.pp = 2;
  two_stages.stage_layers = {31, 30};
  bool copy = false;
  for (const ParamTensor& p : ChunkParameters(m, two_stages, 1, 0)) {
    copy = copy || (p.name == "mtp.embedding_copy" && p.tied_copy);
  }
  EXPECT_TRUE(copy);
  EXPECT_TRUE(InTiedEmbeddingGroup(m, two_stages, 1));
  EXPECT_TRUE(InTiedEmbeddingGroup(m, two_stages, 0));
  EXPECT_EQ(StageExpertElements(m, two_stages, 1),
            31 * LayerExpertElements(m, two_stages));  // 30 layers and the depth's
  ParallelConfig two = one;
  two.tp = 2;
  two.sequence_parallel = true;
  for (const ParamTensor& p : ChunkParameters(m, two, 0, 0)) {
    if (p.name == "layer0.attn.q_down.weight") {
      EXPECT_EQ(p.local_shape[0], 1536);
    }
    if (p.name == "layer0.attn.kv_up.weight") {
      EXPECT_EQ(p.local_shape[0], 128 * 256 / 2);
    }
  }
  // Without a query latent the queries come from one projection of h.
  ModelSpec lite = m;
  lite.mla_q_lora = 0;
  EXPECT_EQ(MlaProjectionParameters(m) - MlaProjectionParameters(lite),
            1536 * 7168 + 128 * 192 * 1536 + 1536 - 128 * 192 * 7168);
}

// Our FLOPs against Megatron-Core's num_floating_point_operations (megatron/training/training.py
// at d98e8a64, lines 1095-1132 and 1275-1318, written out here from its terms): the same GEMMs
// but for two conventions. Megatron-Core halves the attention core for the causal mask where we
// count the paper's whole s^2 (eq. 3), and leaves out the router's 2 h E a token, which we count.
// Its "+ 1" terms (the latents' norms as FLOPs) are within the tolerance.
// Its one multi-token prediction depth counts as a 62nd (mixture) layer, eh_proj and a second
// output layer. The same expression at Megatron-Bridge's DeepSeek-V3 H100 row's vocabulary (130560
// at t = 2) gives the 261 GFLOP a token that row's 338 TFLOP/s over 1297 tokens/s imply.
TEST(Mla, FlopsAreMegatronCoresAsideFromTwoConventions) {
  const ModelSpec m = Preset("deepseek-v3");
  ParallelConfig c;
  c.global_batch = 1;
  const double h = 7168, a = 128, dqk = 192, dv = 128, s = 4096;
  const double attention =
      1536 * (h + a * dqk + 1) + 512 * (h + a * (128 + dv) + 1) + h * 64 + a * dv * h;
  const double mlp = 3 * 18432 * 3 + (2048 * 8 * 3 + 2048 * 3) * 59;
  auto megatron = [&](double V) {
    return 6 * (h * mlp + 62 * attention) + 6 * (3 * h + 2 * h * h) + 6 * h * V * 2 +
           6 * s * (a * dqk / 2 + a * dv / 2) * 62;
  };
  const double half_core = 6 * s * (a * dqk + a * dv) / 2 * 62;
  const double router = 6 * h * 256 * 59;
  const double ours = ModelIterationFlops(m, c) / s;
  EXPECT_NEAR(ours, megatron(129280) + half_core + router, 1e-5 * ours);
  EXPECT_NEAR(megatron(130560) / 1e9, 338.0 / 1297.0 * 1e3, 0.6);
}

// Multi-latent attention's core: Q K^T over dqk, P V over dv, which is ordinary attention's when
// both are the head width; the down projections run on a rank's own tokens under sequence
// parallelism.
TEST(Mla, TheAttentionCoreAndTheDownProjections) {
  const HardwareProfile hw = LoadCluster("dgx-h100", 8)->profile;
  ModelSpec mla = Preset("deepseek-v3");
  mla.mla_v_dim = mla.QkHeadDim();  // 192 both
  ModelSpec mha = DenseLayerModel(mla);
  mha.mla_kv_lora = mha.mla_q_lora = mha.mla_rope_dim = mha.mla_v_dim = 0;
  mha.head_dim = 192;
  const auto a = costmodel::FusedAttentionCost(mla, hw, 2, 1);
  const auto b = costmodel::FusedAttentionCost(mha, hw, 2, 1);
  EXPECT_NEAR(a.forward.gemm, b.forward.gemm, 1e-12 * b.forward.gemm);
  EXPECT_NEAR(a.backward.gemm, b.backward.gemm, 1e-12 * b.backward.gemm);
  const ModelSpec m = Preset("deepseek-v3");
  const int64_t T = m.seq_len;
  const auto whole = costmodel::QkvGemms(m, hw, T, 2, false);
  const auto own = costmodel::QkvGemms(m, hw, T, 2, true);
  EXPECT_LT(own.forward, whole.forward);
  const std::vector<LinearShape> g = MlaProjections(m, 2, T, true);
  ASSERT_EQ(g.size(), 4u);
  EXPECT_EQ(g[0].rows, T / 2);
  EXPECT_EQ(g[1].rows, T);
  EXPECT_EQ(g[3].out, 128 * 256 / 2);
}

// deepseek-ai/DeepSeek-V3's config.json (the values of Megatron-Bridge's test fixture,
// tests/unit_tests/models/deepseek/test_deepseek_bridges.py at 067f987d; the quantisation block
// left out): read as the preset.
constexpr const char* kDeepSeekV3 = R"({"architectures": ["DeepseekV3ForCausalLM"],
  "attention_bias": false, "attention_dropout": 0.0, "aux_loss_alpha": 0.001, "ep_size": 1,
  "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
  "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
  "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1,
  "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true,
  "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
  "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
  "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
  "seq_aux": true, "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "use_cache": true, "v_head_dim": 128, "vocab_size": 129280})";

TEST(Mla, HuggingFaceDeepSeekV3ReadsAsThePreset) {
  auto m = ModelFromJson(Json::parse(kDeepSeekV3), "model");
  ASSERT_TRUE(m.ok()) << m.status().message();
  const ModelSpec preset = Preset("deepseek-v3");
  EXPECT_EQ(ParameterCount(*m), ParameterCount(preset));
  EXPECT_EQ(m->norm_eps, preset.norm_eps);  // rms_norm_eps 1e-6
  EXPECT_EQ(m->moe_dense_layers, 3);
  EXPECT_EQ(m->moe_shared_ffn_hidden, 2048);
  EXPECT_EQ(m->mtp_layers, 1);
  EXPECT_EQ(m->QkHeadDim(), 192);
  EXPECT_EQ(m->moe_router_groups, 8);  // n_group, topk_group
  EXPECT_EQ(m->moe_router_group_topk, 4);
  // scoring_func, routed_scaling_factor, topk_method noaux_tc and norm_topk_prob true.
  EXPECT_TRUE(m->moe_router_sigmoid);
  EXPECT_EQ(m->moe_router_topk_scale, 2.5);
  EXPECT_TRUE(m->moe_router_expert_bias);
  EXPECT_FALSE(m->moe_router_pre_softmax);
  EXPECT_EQ(m->moe_router_sigmoid, preset.moe_router_sigmoid);
  EXPECT_EQ(m->moe_router_topk_scale, preset.moe_router_topk_scale);
  EXPECT_EQ(m->moe_router_expert_bias, preset.moe_router_expert_bias);
  std::string unnormalised = kDeepSeekV3;
  unnormalised.replace(unnormalised.find("\"norm_topk_prob\": true"), 22,
                       "\"norm_topk_prob\": false");
  auto sigmoid_unnormalised = ModelFromJson(Json::parse(unnormalised), "model");
  ASSERT_FALSE(sigmoid_unnormalised.ok());
  EXPECT_NE(sigmoid_unnormalised.status().message().find(
                "moe_router_pre_softmax: not with moe_router_sigmoid"),
            std::string::npos)
      << sigmoid_unnormalised.status().message();
  std::string every_other = kDeepSeekV3;
  every_other.replace(every_other.find("\"moe_layer_freq\": 1"), 19, "\"moe_layer_freq\": 2");
  auto refused = ModelFromJson(Json::parse(every_other), "model");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("model.moe_layer_freq: 2"), std::string::npos)
      << refused.status().message();
}

TEST(Mla, ValidateAndTheEmittedFlags) {
  ModelSpec m = Preset("deepseek-v3");
  ModelSpec bad = m;
  bad.mla_rope_dim = 0;
  EXPECT_NE(bad.Validate().message().find("mla_kv_lora: needs head_dim, mla_rope_dim"),
            std::string::npos)
      << bad.Validate().message();
  bad = m;
  bad.kv_heads = 8;
  EXPECT_NE(bad.Validate().message().find("kv_heads: multi-latent attention"), std::string::npos);
  // Widths whose products would leave 64 bits in a parameter count are refused by name.
  bad = m;
  bad.head_dim = 65536;
  EXPECT_NE(bad.Validate().message().find("head_dim: heads x the head's width = 8396800 is over "
                                          "4194304"),
            std::string::npos)
      << bad.Validate().message();
  ParallelConfig c;
  c.tp = 2;
  c.cp = 2;
  c.dp = 2;
  c.ep = 4;  // with etp = t, the expert grid of tp cp dp = 8 ranks
  c.sequence_parallel = c.fused_attention = true;
  c.global_batch = 8;
  // Context parallelism: the ring carries each head's key and its value padded to dqk (the
  // runtime's packed attention), 2 x 128 x 192 features a token over the tensor group. Without its
  // prediction depth (a depth under cp stays refused, as Megatron-Core runs none).
  ModelSpec no_depth = m;
  no_depth.mtp_layers = 0;
  EXPECT_TRUE(c.Validate(no_depth).ok()) << c.Validate(no_depth).message();
  EXPECT_NE(c.Validate(m).message().find("multi-token prediction"), std::string::npos);
  EXPECT_EQ(ContextRingKvFeatures(m), 2 * 128 * 192);
  c.cp = 1;
  const std::string args = MegatronArgs(m, c);
  EXPECT_NE(args.find(" --multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 "
                      "--qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 --qk-layernorm"),
            std::string::npos)
      << args;
  EXPECT_EQ(args.find("--kv-channels"), std::string::npos);
  EXPECT_NE(args.find(" --moe-layer-freq \"([0]*3+[1]*58)\""), std::string::npos);
  EXPECT_NE(args.find(" --mtp-num-layers 1"), std::string::npos);
  EXPECT_NE(args.find(" --moe-router-score-function sigmoid --moe-router-topk-scaling-factor 2.5 "
                      "--moe-router-enable-expert-bias --moe-router-bias-update-rate 0.001"),
            std::string::npos)
      << args;
  bad = m;
  bad.moe_router_sigmoid = false;  // the bias is for sigmoid scores only
  EXPECT_NE(bad.Validate().message().find("moe_router_expert_bias: needs moe_router_sigmoid"),
            std::string::npos)
      << bad.Validate().message();
  bad = m;
  bad.moe_router_topk_scale = 0;
  EXPECT_NE(bad.Validate().message().find("moe_router_topk_scale: 0 is outside"), std::string::npos)
      << bad.Validate().message();
  // The published run's layout (Megatron-Bridge 25.09, "Et|(tt|)*30mL"): 1, 2 x 30, 0 layers on
  // pp 8 x vp 4 virtual stages, the depth with the loss.
  ParallelConfig layout = c;
  layout.pp = 8;
  layout.vp = 4;
  layout.dp = 64;
  layout.ep = 64;
  layout.etp = 1;
  layout.schedule = ScheduleKind::kInterleaved;
  layout.global_batch = 8192;
  layout.stage_layers.assign(32, 2);
  layout.stage_layers.front() = 1;
  layout.stage_layers.back() = 0;
  ASSERT_TRUE(layout.Validate(m).ok()) << layout.Validate(m).message();
  EXPECT_EQ(ChunkLayers(m, layout, 0, 0).size(), 1);
  EXPECT_EQ(ChunkLayers(m, layout, 7, 3).size(), 0);
  EXPECT_EQ(ChunkLayers(m, layout, 1, 0).begin, 1);
  EXPECT_EQ(ChunkLayers(m, layout, 0, 1).begin, 15);  // virtual stage 8
  const std::string pipeline = MegatronArgs(m, layout);
  EXPECT_NE(pipeline.find("\"Et|t*2|t*2|"), std::string::npos) << pipeline;
  EXPECT_NE(pipeline.find("|t*2|m,L\""), std::string::npos) << pipeline;
  EXPECT_EQ(pipeline.find("--num-layers-per-virtual-pipeline-stage"), std::string::npos);
  auto back = ModelFromJson(Json::parse(ModelToJson(m).dump()), "model");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(ParameterCount(*back), ParameterCount(m));
  EXPECT_TRUE(back->moe_router_sigmoid && back->moe_router_expert_bias);
  EXPECT_EQ(back->moe_router_topk_scale, 2.5);
  EXPECT_EQ(back->moe_router_bias_rate, 1e-3);
}

// With multi-token prediction the search tries a lighter last virtual stage: on Megatron-Bridge's
// pp 8 x vp 4 it finds the published layout (one layer with the embedding, two on each stage
// between, the prediction depth and the loss alone) by itself.
TEST(Mla, TheSearchFindsThePublishedLayout) {
  const ModelSpec m = Preset("deepseek-v3");
  auto cluster = LoadCluster("dgx-h100", 1024);
  ASSERT_TRUE(cluster.ok());
  cluster->software = *LoadSoftware("megatron-core");
  SearchOptions o;
  o.global_batch = 8192;
  o.fix = *ParseFix("tp=2,pp=8,vp=4,ep=64,etp=1,mbs=1,precision=fp8,recompute=none");
  o.sequence_parallel = o.distributed_optimizer = o.fused_attention = true;
  o.grad_accumulation_fusion = true;
  auto r = Search(m, *cluster, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<int> published(32, 2);
  published.front() = 1;
  published.back() = 0;
  EXPECT_EQ(r->top.front().layout.stage_layers, published);
  ModelSpec main = m;  // without the depths, no such split is tried
  main.mtp_layers = 0;
  auto plain = Search(main, *cluster, o);
  EXPECT_FALSE(plain.ok() && !plain->top.front().layout.stage_layers.empty());
}

// The search prices each of its per-virtual-stage splits with that split's own parameter counts:
// it once took the first split's from a cache keyed without stage_layers, admitted a layout whose
// second rank needs 80.3 GiB (tp 2, pp 2, vp 2, 15/16/16/14 with full recomputation), and
// `ptdp plan --model deepseek-v3 --precision fp8` then stopped at an internal check.
TEST(Mla, EverySplitTheSearchKeepsIsPricedAsItsOwn) {
  const ModelSpec m = Preset("deepseek-v3");
  auto cluster = LoadCluster("dgx-h100", 1024);
  ASSERT_TRUE(cluster.ok());
  cluster->software = *LoadSoftware("megatron-core");
  SearchOptions o;
  o.global_batch = 8192;
  o.fix = *ParseFix("tp=2,pp=2,vp=2,ep=256,etp=1,mbs=4,precision=fp8,recompute=full");
  o.sequence_parallel = o.distributed_optimizer = o.grad_accumulation_fusion = true;
  o.keep = 100;
  auto r = Search(m, *cluster, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  int splits = 0;
  for (const Candidate& c : r->top) {
    splits += !c.layout.stage_layers.empty();
    auto alone = Evaluate(m, *cluster, c.layout);
    ASSERT_TRUE(alone.ok()) << alone.status().message();
    EXPECT_EQ(c.prediction.peak_memory, alone->prediction.peak_memory) << c.layout.ToString();
    EXPECT_LE(c.prediction.peak_memory, Bytes(cluster->profile.memory_GiB.value * kGiB));
  }
  EXPECT_GT(splits, 0);
}

}  // namespace
}  // namespace ptdp::planner
