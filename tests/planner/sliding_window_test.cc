// Sliding-window attention (ModelSpec::window_size, window_full_every; Megatron-Core's
// --window-size and --window-attn-skip-freq): which layers are windowed, the share of pairs a
// windowed layer scores (by hand), the rules, the FLOPs and the fused kernel's time per chunk,
// Mistral's config.json, the plan file and --emit megatron.
#include <gtest/gtest.h>

#include "core/cluster.h"
#include "core/hf_config.h"
#include "core/ledger.h"
#include "core/model.h"
#include "core/shapes.h"
#include "costmodel/estimate.h"
#include "costmodel/layer_cost.h"
#include "planner/report.h"

namespace ptdp {
namespace {

// A Llama-style model of 6 layers at s 4096, every second layer full (GPT-OSS's alternation).
ModelSpec Windowed(int64_t window, int full_every) {
  ModelSpec m = *LoadModel("llama3-8b");
  m.name = "windowed";
  m.layers = 6;
  m.seq_len = 4096;
  m.window_size = window;
  m.window_full_every = full_every;
  return m;
}

ParallelConfig Fused(int pp) {
  ParallelConfig c;
  c.tp = 2;
  c.pp = pp;
  c.dp = 1;
  c.mbs = 1;
  c.global_batch = 8;
  c.precision = Precision::kBf16;
  c.fused_attention = true;
  return c;
}

// s 8 and 2 keys before each query: 1 + 2 + 3 x 6 = 21 of the 36 causal pairs.
TEST(SlidingWindow, PairShareAndLayersByHand) {
  ModelSpec m = Windowed(2, 2);
  m.seq_len = 8;
  EXPECT_DOUBLE_EQ(m.WindowPairShare(), 21.0 / 36.0);
  EXPECT_TRUE(m.IsWindowLayer(0));
  EXPECT_FALSE(m.IsWindowLayer(1));  // layer number 2: full
  EXPECT_EQ(m.WindowLayersIn(0, 6), 3);
  EXPECT_EQ(m.WindowLayersIn(1, 4), 1);
  m.window_full_every = 0;
  EXPECT_EQ(m.WindowLayersIn(0, 6), 6);
  m.window_size = 7;  // as long as the sequence: the full share
  EXPECT_DOUBLE_EQ(m.WindowPairShare(), 1.0);
}

TEST(SlidingWindow, RulesNameTheField) {
  ModelSpec m = Windowed(0, 2);
  EXPECT_NE(m.Validate("model").message().find("model.window_full_every: needs window_size > 0"),
            std::string::npos);
  m = Windowed(128, 1);
  EXPECT_NE(m.Validate("model").message().find("model.window_full_every"), std::string::npos);
  m = Windowed(128, 2);
  m.mtp_layers = 1;
  EXPECT_NE(m.Validate("model").message().find("model.window_size: sliding-window attention is "
                                               "not modelled"),
            std::string::npos);
  m.mtp_layers = 0;
  ASSERT_TRUE(m.Validate("model").ok());
  ParallelConfig c = Fused(1);
  c.dp = 4;
  c.global_batch = 8;
  EXPECT_TRUE(c.Validate(m).ok()) << c.Validate(m).message();
  c.fused_attention = false;
  EXPECT_EQ(c.Validate(m).message().rfind("fused_attention: sliding-window attention", 0), 0u);
  c.fused_attention = true;
  c.dp = 2;
  c.cp = 2;
  EXPECT_EQ(c.Validate(m).message().rfind("fused_attention: sliding-window attention", 0), 0u);
}

// Each windowed layer's attention core counts WindowPairShare of a full one's 4 B s^2 a per
// forward; with fused attention the backward's recomputed Q K^T (2 B s^2 a) likewise. The ranks'
// shares follow the layers they hold: at p 2, layers 1-3 hold two windowed, layers 4-6 one.
TEST(SlidingWindow, FlopsByHand) {
  const ModelSpec win = Windowed(511, 2), full = Windowed(0, 0);
  const ParallelConfig c = Fused(2);
  const double B = 8, s = 4096, a = 4096, cut = 1.0 - win.WindowPairShare();
  EXPECT_NEAR(win.WindowPairShare(), (4096.0 * 512 - 511.0 * 512 / 2) / (4096.0 * 4097 / 2), 1e-15);
  const double model_cut = 3 * 3 * cut * 4 * B * s * s * a;
  EXPECT_NEAR(ModelIterationFlops(full, c) - ModelIterationFlops(win, c), model_cut,
              1e-9 * model_cut);
  const double hw_cut = model_cut + 3 * cut * 2 * B * s * s * a;
  EXPECT_NEAR(HardwareIterationFlops(full, c) - HardwareIterationFlops(win, c), hw_cut,
              1e-9 * hw_cut);
  const double shares = PipelineRankFlops(win, c, 0) + PipelineRankFlops(win, c, 1);
  EXPECT_NEAR(shares, HardwareIterationFlops(win, c) / 2, 1e-9 * shares);  // over t = 2
  const double per_windowed = hw_cut / 3 / 2;
  EXPECT_NEAR(PipelineRankFlops(full, c, 0) - PipelineRankFlops(win, c, 0), 2 * per_windowed,
              1e-6 * per_windowed);
  EXPECT_NEAR(PipelineRankFlops(full, c, 1) - PipelineRankFlops(win, c, 1), per_windowed,
              1e-6 * per_windowed);
}

// The fused kernel of a windowed layer runs its share of the pairs, forward and backward; the
// chunks differ by the windowed layers they hold (two and one at p 2).
TEST(SlidingWindow, KernelTimePerChunk) {
  const ModelSpec win = Windowed(511, 2), full = Windowed(0, 0);
  auto cluster = LoadCluster("dgx-h100", 2);
  ASSERT_TRUE(cluster.ok());
  const ParallelConfig c = Fused(2);
  const costmodel::PieceCost kernel = costmodel::FusedAttentionCost(full, cluster->profile, 2, 1);
  const double cut = 1.0 - win.WindowPairShare();
  const costmodel::CostTable tw = costmodel::BuildCostTable(win, *cluster, c);
  const costmodel::CostTable tf = costmodel::BuildCostTable(full, *cluster, c);
  for (int r = 0; r < 2; ++r) {
    const double windowed = r == 0 ? 2 : 1;
    EXPECT_NEAR(tf.chunks[r].forward.gemm - tw.chunks[r].forward.gemm,
                windowed * cut * kernel.forward.gemm, 1e-12)
        << r;
    EXPECT_NEAR(tf.chunks[r].backward.gemm - tw.chunks[r].backward.gemm,
                windowed * cut * kernel.backward.gemm, 1e-12)
        << r;
  }
}

// Mistral's sliding_window S: S - 1 tokens before each query; one as long as the sequence is not
// kept; a bad one named. The plan file keeps both fields; --emit megatron writes the flags.
TEST(SlidingWindow, MistralConfigPlanFileAndFlags) {
  Json hf = Json::parse(R"({"architectures": ["MistralForCausalLM"], "model_type": "mistral",
      "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
      "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 32768,
      "rope_theta": 10000.0, "sliding_window": 4096, "vocab_size": 32000, "rms_norm_eps": 1e-05,
      "tie_word_embeddings": false, "hidden_act": "silu"})");
  auto m = ModelFromHfConfig(hf, "config.json");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->window_size, 4095);
  EXPECT_EQ(m->window_full_every, 0);
  hf["sliding_window"] = 32768;
  EXPECT_EQ(ModelFromHfConfig(hf, "config.json")->window_size, 0);
  hf["sliding_window"] = 0;
  EXPECT_NE(ModelFromHfConfig(hf, "config.json").status().message().find("sliding_window"),
            std::string::npos);

  const ModelSpec win = Windowed(127, 2);
  auto back = ModelFromJson(Json::parse(ModelToJson(win).dump()), "model");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->window_size, 127);
  EXPECT_EQ(back->window_full_every, 2);
  EXPECT_FALSE(ModelToJson(Windowed(0, 0)).contains("window_size"));
  const std::string args = planner::MegatronArgs(win, Fused(1));
  EXPECT_NE(args.find(" --window-size 127,0 --window-attn-skip-freq 2"), std::string::npos) << args;
  EXPECT_EQ(planner::MegatronArgs(Windowed(0, 0), Fused(1)).find("--window"), std::string::npos);
}

}  // namespace
}  // namespace ptdp
