// Mixture of experts (ModelSpec::moe_experts; ParallelConfig::ep, etp; docs/moe.md): the model's
// and the layout's rules, parameter counts against the published ones, the expert shards and their
// optimizer group, the FLOPs, the experts' price against the dense MLP's, the all-to-all, the
// search and --emit megatron.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

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

ModelSpec Preset(const std::string& name) {
  auto m = LoadModel(name);
  EXPECT_TRUE(m.ok()) << name;
  return *m;
}

// The published Qwen3-235B-A22B run (Megatron-Bridge, docs/validation-h100.md): t 2, p 8, v 4,
// ep 32, etp 1 on 256 GPUs.
ParallelConfig Qwen235Layout() {
  ParallelConfig c;
  c.tp = 2;
  c.pp = 8;
  c.dp = 16;
  c.ep = 32;
  c.etp = 1;
  c.vp = 4;
  c.schedule = ScheduleKind::kInterleaved;
  c.sequence_parallel = true;
  c.distributed_optimizer = true;
  c.fused_attention = true;
  c.grad_accumulation_fusion = true;
  c.first_stage_layers = c.last_stage_layers = 11;
  c.global_batch = 8192;
  c.precision = Precision::kFp8;
  return c;
}

// Each count against the model card's (the models' Hugging Face pages): Mixtral 8x7B 46.7B,
// Qwen3-30B-A3B 30.5B, Qwen3-235B-A22B 235B.
TEST(Moe, ParameterCountsMatchThePublishedOnes) {
  EXPECT_NEAR(double(ParameterCount(Preset("mixtral-8x7b"))) / 1e9, 46.7, 0.05);
  EXPECT_NEAR(double(ParameterCount(Preset("qwen3-30b-a3b"))) / 1e9, 30.5, 0.05);
  EXPECT_NEAR(double(ParameterCount(Preset("qwen3-235b-a22b"))) / 1e9, 235.1, 0.1);
}

// The keys of mistralai/Mixtral-8x7B-v0.1's and Qwen/Qwen3-30B-A3B's config.json (as their model
// pages list them): read as the presets.
constexpr const char* kMixtral = R"({"architectures": ["MixtralForCausalLM"],
  "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32,
  "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "num_local_experts": 8, "output_router_logits": false, "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
  "vocab_size": 32000})";
constexpr const char* kQwen3Moe = R"({"architectures": ["Qwen3MoeForCausalLM"],
  "attention_bias": false, "attention_dropout": 0.0, "decoder_sparse_step": 1, "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
  "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
  "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": true,
  "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
  "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": false,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.001, "sliding_window": null, "tie_word_embeddings": false,
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

TEST(Moe, HuggingFaceConfigsReadAsThePresets) {
  auto mixtral = ModelFromJson(Json::parse(kMixtral), "model");
  ASSERT_TRUE(mixtral.ok()) << mixtral.status().message();
  EXPECT_EQ(mixtral->moe_experts, 8);
  EXPECT_EQ(mixtral->moe_topk, 2);
  EXPECT_EQ(ParameterCount(*mixtral), ParameterCount(Preset("mixtral-8x7b")));
  auto qwen = ModelFromJson(Json::parse(kQwen3Moe), "model");
  ASSERT_TRUE(qwen.ok()) << qwen.status().message();
  EXPECT_EQ(qwen->HeadDim(), 128);
  EXPECT_EQ(qwen->AttnWidth(), 4096);
  EXPECT_TRUE(qwen->qk_norm);
  EXPECT_EQ(ParameterCount(*qwen), ParameterCount(Preset("qwen3-30b-a3b")));
  // The presets' RMSNorm epsilon is their config.json's (--norm-epsilon in --emit megatron).
  EXPECT_EQ(qwen->norm_eps, Preset("qwen3-30b-a3b").norm_eps);
  EXPECT_EQ(Preset("qwen3-235b-a22b").norm_eps, 1e-6);
  EXPECT_EQ(mixtral->norm_eps, Preset("mixtral-8x7b").norm_eps);
  // The plan file's model object carries the mixture and the heads' shape back.
  auto back = ModelFromJson(Json::parse(ModelToJson(*qwen).dump()), "model");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(ParameterCount(*back), ParameterCount(*qwen));
  EXPECT_TRUE(back->qk_norm);
  EXPECT_EQ(back->moe_topk, 8);
  // Experts on every second layer (transformers: layer i is sparse when (i + 1) % step == 0):
  // a dense layer, then a mixture, in turn (moe_layer_pattern; tests/planner/moe_layers_test.cc).
  std::string some = kQwen3Moe;
  some.replace(some.find("\"decoder_sparse_step\": 1"), 24, "\"decoder_sparse_step\": 2");
  auto every_second = ModelFromJson(Json::parse(some), "model");
  ASSERT_TRUE(every_second.ok()) << every_second.status().message();
  ASSERT_EQ(every_second->moe_layer_pattern.size(), 48u);
  EXPECT_EQ(every_second->moe_layer_pattern[0], 0);
  EXPECT_EQ(every_second->moe_layer_pattern[1], 1);
  EXPECT_FALSE(every_second->IsMoeLayer(46));
  EXPECT_TRUE(every_second->IsMoeLayer(47));
  some.replace(some.find("\"decoder_sparse_step\": 2"), 24, "\"decoder_sparse_step\": 0");
  auto refused = ModelFromJson(Json::parse(some), "model");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("model.decoder_sparse_step: 0 is not >= 1"),
            std::string::npos)
      << refused.status().message();
}

TEST(Moe, ModelValidateNamesTheField) {
  ModelSpec m = Preset("mixtral-8x7b");
  EXPECT_TRUE(m.Validate().ok());
  m.moe_topk = 9;
  EXPECT_NE(m.Validate().message().find("moe_topk: 9 is outside [1, 8]"), std::string::npos)
      << m.Validate().message();
  m = Preset("mixtral-8x7b");
  m.swiglu = false;
  EXPECT_NE(m.Validate().message().find("moe_experts: needs swiglu"), std::string::npos);
  ModelSpec dense = Preset("llama3-8b");
  dense.moe_topk = 2;
  EXPECT_NE(dense.Validate().message().find("moe_topk: set without moe_experts"),
            std::string::npos);
}

TEST(Moe, LayoutValidateNamesTheFieldAndTheReason) {
  const ModelSpec m = Preset("qwen3-235b-a22b");
  ParallelConfig c = Qwen235Layout();
  ASSERT_TRUE(c.Validate(m).ok()) << c.Validate(m).message();
  auto says = [&](const ParallelConfig& bad, const std::string& what) {
    const std::string msg = bad.Validate(m).message();
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  };
  ParallelConfig bad = c;
  bad.ep = 3;
  says(bad, "ep: 3 does not divide the 128 experts");
  bad = c;
  bad.ep = 64;  // 64 x 1 does not divide the stage's 2 x 16 = 32 ranks
  says(bad, "ep: ep*etp = 64 does not divide tp*cp*dp = 32");
  bad = c;
  bad.sequence_parallel = false;
  says(bad, "sequence_parallel: a mixture-of-experts model with tp > 1 needs it");
  bad = c;
  bad.etp = 5;
  says(bad, "etp: 5 does not divide moe_ffn_hidden 1536");
  ParallelConfig dense;
  dense.dp = 8;
  dense.ep = 2;
  dense.global_batch = 8;
  const std::string msg = dense.Validate(Preset("llama3-8b")).message();
  EXPECT_NE(msg.find("ep: 2 needs a mixture-of-experts model"), std::string::npos) << msg;
  // The plan file and the text form carry ep and etp, and only where they are set.
  EXPECT_NE(c.ToString().find(",ep=32,etp=1,"), std::string::npos) << c.ToString();
  auto back = LayoutFromJson(Json::parse(LayoutToJson(c).dump()), "layout", c);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->ep, 32);
  EXPECT_EQ(back->etp, 1);
  ParallelConfig plain = c;
  plain.ep = 1;
  plain.etp = 0;
  EXPECT_EQ(LayoutToJson(plain).count("ep"), 0u);
  EXPECT_EQ(LayoutToJson(plain).count("etp"), 0u);
}

// The ep etp ranks of an expert group hold each expert's weights exactly once; the distributed
// optimizer shards them over the ranks holding the same ones (here 256 / (32 x 8) = 1: none).
TEST(Moe, ExpertShardsAndTheirOptimizerGroup) {
  const ModelSpec m = Preset("qwen3-235b-a22b");
  const ParallelConfig c = Qwen235Layout();
  const int64_t one_layer = int64_t(m.moe_experts) * 3 * m.MoeFfnHidden() * m.hidden;
  EXPECT_EQ(LayerExpertElements(m, c) * c.ep * c.ExpertTp(), one_layer);
  EXPECT_EQ(c.ExpertWeightReplicas(), 1);
  EXPECT_EQ(ExpertDataGroup(c), std::vector<int>({0}));
  EXPECT_EQ(ExpertParallelGroup(c).size(), 32u);
  const int64_t params = StageParameterElements(m, c, 1), experts = StageExpertElements(m, c, 1);
  EXPECT_EQ(experts, 12 * LayerExpertElements(m, c));  // rank 1 holds 12 layers
  const int64_t dense = params - experts;
  const int64_t per = BytesPerParameter(c).optimizer;
  EXPECT_EQ(OptimizerBytes(c, params, experts), (dense + 15) / 16 * per + experts * per);
  // With etp = tp the expert grid is 2 x 16: each expert's weights are split over two ranks and
  // held by 32 / 32 = 1 group; with ep = 8 by 2 of them, which share the optimizer.
  ParallelConfig eight = c;
  eight.ep = 8;
  eight.etp = 0;
  EXPECT_EQ(eight.ExpertWeightReplicas(), 2);
  EXPECT_EQ(ExpertDataGroup(eight), std::vector<int>({0, 16}));
  EXPECT_EQ(ExpertTensorGroup(eight), std::vector<int>({0, 1}));
}

// LayerParameterCounts counts the experts without naming each (ExpertShapes times E / ep): every
// count must be the named list's, the one ChunkParameters gives a pipeline rank holding one
// mixture layer, over expert and expert-tensor splits and a model with a shared expert and MLA.
TEST(Moe, LayerCountsAreTheNamedListsSums) {
  for (const std::string name : {"qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3"}) {
    const ModelSpec m = Preset(name);
    for (const auto& [tp, ep, etp] :
         std::vector<std::tuple<int, int, int>>{{1, 1, 1}, {2, 8, 1}, {4, 32, 0}, {8, 64, 2}}) {
      ParallelConfig c;
      c.tp = tp;
      c.ep = ep;
      c.etp = etp;
      c.pp = m.layers;  // one layer a rank; the middle one is a mixture layer in all three
      const int rank = m.layers / 2;
      ASSERT_TRUE(m.IsMoeLayer(rank)) << name;
      LayerParameters listed;
      for (const auto& p : ChunkParameters(m, c, rank, 0)) {
        ++listed.tensors;
        listed.elements += p.LocalElements();
        const bool linear =
            p.local_shape.size() == 2 &&
            (p.sharding != Sharding::kReplicated || p.name.find("_down.") != std::string::npos);
        if (linear) listed.linear_weight_elements += p.LocalElements();
        if (p.expert) listed.expert_elements += p.LocalElements();
      }
      const LayerParameters counted = LayerParameterCounts(m, c);
      const std::string at = name + " tp=" + std::to_string(tp) + " ep=" + std::to_string(ep);
      EXPECT_EQ(counted.tensors, listed.tensors) << at;
      EXPECT_EQ(counted.elements, listed.elements) << at;
      EXPECT_EQ(counted.linear_weight_elements, listed.linear_weight_elements) << at;
      EXPECT_EQ(counted.expert_elements, listed.expert_elements) << at;
      EXPECT_EQ(counted.expert_elements, LayerExpertElements(m, c)) << at;
    }
  }
}

// Model FLOPs: the router's 2 B s h E and k experts' SwiGLU in place of the MLP. One expert of f
// and top-1 is the dense model plus the router.
TEST(Moe, FlopsAreTheDenseModelsWithTheRoutersAndKExperts) {
  ModelSpec dense = Preset("llama3-8b");
  ModelSpec one = dense;
  one.moe_experts = 1;
  one.moe_topk = 1;
  ParallelConfig c;
  c.global_batch = 4;
  const double B = 4, s = double(dense.seq_len), h = double(dense.hidden);
  const double router = 3 * dense.layers * 2 * B * s * h * 1;
  EXPECT_NEAR(ModelIterationFlops(one, c), ModelIterationFlops(dense, c) + router,
              1e-12 * ModelIterationFlops(dense, c));
  ModelSpec two = one;
  two.moe_experts = 8;
  two.moe_topk = 2;
  const double mlp = 3 * dense.layers * 6 * B * s * h * double(dense.FfnHidden());
  EXPECT_NEAR(ModelIterationFlops(two, c), ModelIterationFlops(one, c) + mlp + 7 * router,
              1e-12 * ModelIterationFlops(two, c));
}

// The experts' GEMMs are the dense MLP's where they are the same work: one expert of f, top-1,
// one rank. The layer TransformerLayerCost prices without its MLP plus ExpertMlpCost is the dense
// layer plus the router's GEMMs and the moves the dispatcher adds (no communication on one rank).
TEST(Moe, OneExpertCostsTheDenseMlpPlusTheRouter) {
  const HardwareProfile hw = LoadCluster("dgx-h100", 8)->profile;
  ModelSpec dense = Preset("llama3-8b");
  dense.seq_len = 4096;
  ModelSpec one = dense;
  one.moe_experts = 1;
  one.moe_topk = 1;
  ParallelConfig c;
  c.precision = Precision::kBf16;
  const auto d = costmodel::TransformerLayerCost(dense, hw, c.precision, 1, 1, 0);
  const auto attn = costmodel::TransformerLayerCost(one, hw, c.precision, 1, 1, 0);
  const auto experts = costmodel::ExpertMlpCost(one, hw, c, costmodel::ExpertComm{});
  const int64_t T = dense.seq_len;
  const double router_fwd = costmodel::GemmTime(hw, T, 1, dense.hidden);
  const double router_bwd = costmodel::GemmBackwardTime(hw, T, 1, dense.hidden);
  EXPECT_NEAR(attn.forward.gemm + experts.forward.gemm, d.forward.gemm + router_fwd,
              1e-9 * d.forward.gemm);
  EXPECT_NEAR(attn.backward.gemm + experts.backward.gemm, d.backward.gemm + router_bwd,
              1e-9 * d.backward.gemm);
  EXPECT_EQ(experts.forward.tp_comm, 0.0);
  EXPECT_GT(attn.forward.memory + experts.forward.memory, d.forward.memory);
}

// Megatron-Core's alltoall dispatcher sorts the copies a rank receives by local expert and back
// ("permutation 2", token_dispatcher.py at d98e8a64): with 8 experts a rank (Qwen3-30B-A3B at EP
// 16) a read and a write of the N h copies twice forward and twice backward, 2 kernels each way;
// DeepEP permutes once on each side, and one expert a rank (EP 128) needs no sort.
TEST(Moe, TheAllToAllDispatcherSortsByLocalExpert) {
  const HardwareProfile hw = LoadCluster("dgx-h100", 8)->profile;
  const ModelSpec qwen = Preset("qwen3-30b-a3b");
  ParallelConfig c;
  c.dp = c.ep = 16;
  c.etp = 1;
  c.precision = Precision::kBf16;
  ASSERT_EQ(LocalExperts(qwen, c), 8);
  ParallelConfig deepep = c;
  deepep.moe_dispatcher = MoeDispatcher::kDeepEp;
  const auto sorted = costmodel::ExpertMlpPartsOf(qwen, hw, c).routing;
  const auto fused = costmodel::ExpertMlpPartsOf(qwen, hw, deepep).routing;
  const double copies = double(ExpertTokens(qwen, c)) * double(qwen.hidden);  // N h
  ASSERT_EQ(copies, 4096.0 * 8 * 2048);
  const double sorts = costmodel::MemoryBoundTime(hw, 2 * (2 * 2 * copies), 2) -
                       costmodel::MemoryBoundTime(hw, 0, 0);
  EXPECT_NEAR(sorted.forward.memory - fused.forward.memory, sorts, 1e-12);
  EXPECT_NEAR(sorted.backward.memory - fused.backward.memory, sorts, 1e-12);
  ParallelConfig one_each = c;
  one_each.dp = one_each.ep = 128;
  ParallelConfig one_each_deepep = one_each;
  one_each_deepep.moe_dispatcher = MoeDispatcher::kDeepEp;
  ASSERT_EQ(LocalExperts(qwen, one_each), 1);
  EXPECT_EQ(costmodel::ExpertMlpPartsOf(qwen, hw, one_each).routing.forward.memory,
            costmodel::ExpertMlpPartsOf(qwen, hw, one_each_deepep).routing.forward.memory);
}

// Under context parallelism the experts are priced on the shard a rank holds (seq_len s / cp),
// whose tokens are not divided again.
TEST(Moe, ContextParallelPricesTheShardOnce) {
  const HardwareProfile hw = LoadCluster("dgx-h100", 8)->profile;
  ModelSpec shard = Preset("mixtral-8x7b");
  shard.seq_len /= 2;
  ParallelConfig c;
  c.precision = Precision::kBf16;
  ParallelConfig cp2 = c;
  cp2.cp = 2;
  const auto one = costmodel::ExpertMlpCost(shard, hw, c, costmodel::ExpertComm{});
  const auto two = costmodel::ExpertMlpCost(shard, hw, cp2, costmodel::ExpertComm{});
  EXPECT_EQ(one.forward.gemm, two.forward.gemm);
  EXPECT_EQ(one.backward.memory, two.backward.memory);
}

// qk-norm: Q's and K's pre-norm copies and their per-row 1/rms kept; their passes priced.
TEST(Moe, QkNormIsCountedWhereItActs) {
  ModelSpec with = Preset("qwen3-30b-a3b");
  ModelSpec without = with;
  without.qk_norm = false;
  EXPECT_EQ(ParameterCount(with) - ParameterCount(without), 2 * 128 * 48);
  ParallelConfig c;
  c.dp = 16;
  c.ep = 16;
  c.global_batch = 16;
  const int64_t s = with.seq_len, a = with.AttnWidth(), kv = 4 * 128;
  auto bytes = [&](const ModelSpec& m) {
    return ActivationBytes(LayerActivations(m, c, false), 2);
  };
  EXPECT_EQ(bytes(with) - bytes(without), 2 * s * (a + kv) + 4 * s * (32 + 4));
  const auto mb_with = costmodel::LayerMemoryBytesOf(with, 1, 1, 2);
  const auto mb_without = costmodel::LayerMemoryBytesOf(without, 1, 1, 2);
  EXPECT_DOUBLE_EQ(mb_with.forward - mb_without.forward, 2.0 * 2 * s * (a + kv));
  EXPECT_DOUBLE_EQ(mb_with.backward - mb_without.backward, 5.0 * 2 * s * (a + kv));
  EXPECT_EQ(mb_with.forward_kernels, mb_without.forward_kernels + 2);
}

// An all-to-all inside a node moves (n - 1) / n of each rank's bytes over NVLink; across nodes
// the part bound for other nodes crosses the rank's own NIC, the two at once.
TEST(Moe, AllToAllOnTheLinksItCrosses) {
  const HardwareProfile hw = LoadCluster("dgx-h100", 8)->profile;
  const Bytes S = Bytes(64) << 20;
  costmodel::GroupSpan node{8, 1, 8};
  const costmodel::LinkCost nvlink = costmodel::SendRecvLink(hw, false, S);
  EXPECT_NEAR(costmodel::AllToAllTime(hw, S, node), nvlink.Time(S * 7 / 8), 1e-12);
  costmodel::GroupSpan four_nodes{32, 4, 8};
  const costmodel::LinkCost nic = costmodel::SendRecvLink(hw, true, S);
  EXPECT_NEAR(costmodel::AllToAllTime(hw, S, four_nodes), nic.Time(S * 24 / 32), 1e-12);
  EXPECT_EQ(costmodel::AllToAllTime(hw, S, costmodel::GroupSpan{}), 0.0);
}

// The nodes a token's experts lie on besides its own, by hand: DeepSeek-V3 over 8 nodes with
// 4 of its 8 groups (one node each) picked, 8 experts from their 128: a node is hit when its group
// is picked (1/2) and one of the 8 lands in its 32, so 7 x 1/2 x (1 - C(96, 8) / C(128, 8)).
// Without groups, 1 - C(224, 8) / C(256, 8) per node. Groups of two nodes each (4 groups over 8
// nodes, 2 picked): the node's group picked with 1/2, then one of 8 from the 128 in its 32.
// Groups of half a node (16 over 8, 8 picked): j of the node's 2 groups picked.
TEST(Moe, RemoteNodesATokenReachesByHand) {
  auto none_drawn = [](double n, double a, int k) {
    double p = 1;
    for (int i = 0; i < k; ++i) p *= (n - a - i) / (n - i);
    return p;
  };
  ModelSpec m = LoadModel("deepseek-v3").value();
  EXPECT_NEAR(RemoteNodesPerToken(m, 8), 7 * 0.5 * (1 - none_drawn(128, 32, 8)), 1e-12);
  EXPECT_NEAR(RemoteNodesPerToken(m, 8), 3.18, 0.01);
  EXPECT_EQ(RemoteNodesPerToken(m, 1), 0.0);
  ModelSpec free = m;
  free.moe_router_groups = free.moe_router_group_topk = 0;
  EXPECT_NEAR(RemoteNodesPerToken(free, 8), 7 * (1 - none_drawn(256, 32, 8)), 1e-12);
  ModelSpec wide = m;  // 4 groups of 64 experts, 2 picked: each spans two nodes
  wide.moe_router_groups = 4, wide.moe_router_group_topk = 2;
  EXPECT_NEAR(RemoteNodesPerToken(wide, 8), 7 * 0.5 * (1 - none_drawn(128, 32, 8)), 1e-12);
  ModelSpec fine = m;  // 16 groups of 16, 8 picked: two on each node
  fine.moe_router_groups = 16, fine.moe_router_group_topk = 8;
  const double both = 3003.0 / 12870, one = 2 * 3432.0 / 12870;  // C(2,j) C(14,8-j) / C(16,8)
  const double hit_one = 1 - none_drawn(128, 16, 8), hit_two = 1 - none_drawn(128, 32, 8);
  ASSERT_NEAR(both + one + 3003.0 / 12870, 1.0, 1e-12);
  EXPECT_NEAR(RemoteNodesPerToken(fine, 8), 7 * (one * hit_one + both * hit_two), 1e-12);
  // Invalid groups are refused by name.
  ModelSpec bad = m;
  bad.moe_router_group_topk = 9;
  EXPECT_NE(bad.Validate().message().find("moe_router_groups"), std::string::npos);
}

// DeepEP across nodes sends a token once per other node its experts lie on, over the NIC, and
// forwards it over NVLink there; within a node it is the alltoall's exchange.
TEST(Moe, DeepEpSendsATokenOncePerNode) {
  const ClusterSpec cluster = *LoadCluster("dgx-h100", 1024);
  const HardwareProfile& hw = cluster.profile;
  const ModelSpec m = LoadModel("deepseek-v3").value();
  ParallelConfig c;
  c.tp = 2, c.pp = 8, c.dp = 64, c.ep = 64, c.etp = 1, c.vp = 4, c.global_batch = 8192;
  c.sequence_parallel = true;
  c.precision = Precision::kBf16;
  const costmodel::GroupSpan span = costmodel::SpanOf(ExpertParallelGroup(c), 8);
  ASSERT_EQ(span.nodes, 8);
  const double token = double(RoutedTokens(m, c)) * m.hidden * 2;
  const Bytes inter = Bytes(token * RemoteNodesPerToken(m, 8));
  const Bytes intra = Bytes(token * 8 * (7.0 / 64 + 56.0 / 64 * 7.0 / 8));
  const Seconds want = std::max(costmodel::SendRecvLink(hw, true, inter).Time(inter),
                                costmodel::SendRecvLink(hw, false, intra).Time(intra));
  EXPECT_NEAR(costmodel::DeepEpAllToAllTime(hw, m, c, span), want, 1e-12);
  const Seconds nccl = costmodel::AllToAllTime(hw, DispatchBytes(m, c, 2), span);
  EXPECT_LT(costmodel::DeepEpAllToAllTime(hw, m, c, span), 0.5 * nccl);
  c.moe_dispatcher = MoeDispatcher::kDeepEp;
  EXPECT_NEAR(costmodel::ExpertCommTimes(m, hw, c, 8).all_to_all, want, 1e-12);
  // Inside a node: the same exchange as the alltoall dispatcher's.
  ParallelConfig node = c;
  node.ep = 8;
  const costmodel::GroupSpan inside = costmodel::SpanOf(ExpertParallelGroup(node), 8);
  ASSERT_EQ(inside.nodes, 1);
  EXPECT_EQ(costmodel::DeepEpAllToAllTime(hw, m, node, inside),
            costmodel::AllToAllTime(hw, DispatchBytes(m, node, 2), inside));
  // The layout carries it and --emit megatron names Megatron-Core's flex dispatcher.
  EXPECT_NE(c.ToString().find(",moe_dispatcher=deepep"), std::string::npos);
  auto back = LayoutFromJson(Json::parse(LayoutToJson(c).dump()), "layout");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->moe_dispatcher, MoeDispatcher::kDeepEp);
  ModelSpec dense = LoadModel("gpt-1.7b").value();
  ParallelConfig on_dense;
  on_dense.global_batch = 8;
  on_dense.moe_dispatcher = MoeDispatcher::kDeepEp;
  EXPECT_NE(on_dense.Validate(dense).message().find("moe_dispatcher: deepep needs"),
            std::string::npos);
}

// The expert weights' gradients are reduced over their own group: none left to reduce when
// ep etp p spans the cluster, so the data-parallel time is the dense weights' alone.
TEST(Moe, ExpertGradientsAreReducedOverTheirOwnGroup) {
  const ModelSpec m = Preset("qwen3-235b-a22b");
  auto cluster = LoadCluster("dgx-h100", 256);
  ASSERT_TRUE(cluster.ok());
  cluster->software = *LoadSoftware("megatron-core");
  const ParallelConfig c = Qwen235Layout();
  const costmodel::CostTable t = costmodel::BuildCostTable(m, *cluster, c);
  // The reduce-scatters, dense then the experts', then the all-gathers in the same order.
  ASSERT_EQ(t.dp_collectives[1].size(), 4u);
  ASSERT_EQ(t.ReductionEntries(1), 2);
  EXPECT_GT(t.dp_collectives[1][0].Time(), 0.0);
  EXPECT_EQ(t.dp_collectives[1][1].Time(), 0.0);
  EXPECT_EQ(t.dp_collectives[1][3].Time(), 0.0);
  ParallelConfig eight = c;
  eight.ep = 8;  // an expert data-parallel group of 2: something to reduce
  const costmodel::CostTable t8 = costmodel::BuildCostTable(m, *cluster, eight);
  EXPECT_GT(t8.dp_collectives[1][1].Time(), 0.0);
  EXPECT_GT(t8.dp_collectives[1][3].Time(), 0.0);
  // and the all-to-all is priced inside each layer: more of it with more ranks across nodes.
  EXPECT_GT(t.Chunk(1, 0).forward.tp_comm, 0.0);
}

// The search turns the distributed optimizer on where it shards something: with d = 1 a mixture's
// experts still have ExpertWeightReplicas ranks to shard over (etp 1 with t 4), with ep 4 none.
TEST(Moe, TheDistributedOptimizerShardsExpertsWithoutDataParallelism) {
  ModelSpec m = Preset("qwen3-30b-a3b");
  m.layers = 4;
  auto cluster = LoadCluster("dgx-h100", 8);
  ASSERT_TRUE(cluster.ok());
  SearchOptions o;
  o.global_batch = 8;
  o.distributed_optimizer = o.sequence_parallel = true;
  o.fix = *ParseFix("tp=4,pp=2,mbs=1,ep=1,etp=1,precision=bf16");
  auto sharded = Search(m, *cluster, o);
  ASSERT_TRUE(sharded.ok()) << sharded.status().message();
  EXPECT_EQ(sharded->top.front().layout.dp, 1);
  EXPECT_TRUE(sharded->top.front().layout.distributed_optimizer);
  o.fix = *ParseFix("tp=4,pp=2,mbs=1,ep=4,etp=1,precision=bf16");
  auto whole = Search(m, *cluster, o);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_FALSE(whole->top.front().layout.distributed_optimizer);
}

TEST(Moe, SearchedSplits) {
  const ModelSpec m = Preset("mixtral-8x7b");
  FixedLayout none;
  std::vector<std::pair<int, int>> got;
  for (const ExpertSplit& s : ExpertSplits(m, 2, 1, 4, none)) got.push_back({s.ep, s.etp});
  // etp = tp (0) with ep | 8 and 2 ep | 8; etp = 1 with ep | 8.
  EXPECT_EQ(got, (std::vector<std::pair<int, int>>{
                     {1, 0}, {2, 0}, {4, 0}, {1, 1}, {2, 1}, {4, 1}, {8, 1}}));
  FixedLayout fixed = *ParseFix("ep=4,etp=1");
  ASSERT_EQ(ExpertSplits(m, 2, 1, 4, fixed).size(), 1u);
  EXPECT_EQ(ExpertSplits(Preset("llama3-8b"), 2, 1, 4, none).size(), 1u);
  EXPECT_TRUE(ParseFix("ep=0").status().message().find("ep") != std::string::npos);
}

// Mixtral 8x7B on four DGX H100s in bf16 without tensor or pipeline parallelism: its 46.7B
// parameters (280 GB of weights and gradients) fit a GPU only split over the experts.
TEST(Moe, TheSearchSplitsTheExpertsToFit) {
  const ModelSpec m = Preset("mixtral-8x7b");
  auto cluster = LoadCluster("dgx-h100", 32);
  ASSERT_TRUE(cluster.ok());
  cluster->software = *LoadSoftware("megatron-core");
  SearchOptions o;
  o.global_batch = 256;
  o.fix = *ParseFix("precision=bf16,ep=1,tp=1,pp=1");
  o.distributed_optimizer = o.sequence_parallel = o.fused_attention = true;
  o.grad_accumulation_fusion = true;
  o.selective_recompute = true;
  auto without = Search(m, *cluster, o);
  ASSERT_FALSE(without.ok());
  EXPECT_EQ(without.status().code(), StatusCode::kDoesNotFit);
  o.fix = *ParseFix("precision=bf16,tp=1,pp=1");
  auto with = Search(m, *cluster, o);
  ASSERT_TRUE(with.ok()) << with.status().message();
  const ParallelConfig& best = with->top.front().layout;
  EXPECT_GT(best.ep, 1);
  const std::string args = MegatronArgs(m, best);
  EXPECT_NE(args.find(" --expert-model-parallel-size " + std::to_string(best.ep)),
            std::string::npos)
      << args;
  EXPECT_NE(args.find(" --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 14336"),
            std::string::npos)
      << args;
  const std::string table = SearchToTable(m, *cluster, *with, 0);
  EXPECT_NE(table.find(" ep "), std::string::npos);
  // A mixture's plan says that published mixture runs ran slower than predicted; a dense one not.
  EXPECT_NE(table.find("note: most published H100 runs of mixtures of experts ran slower"),
            std::string::npos)
      << table;
  o.fix = *ParseFix("precision=bf16,tp=8,pp=1");
  const ModelSpec dense = Preset("llama3-8b");
  auto dense_plan = Search(dense, *cluster, o);
  ASSERT_TRUE(dense_plan.ok()) << dense_plan.status().message();
  EXPECT_EQ(SearchToTable(dense, *cluster, *dense_plan, 0).find("mixtures of experts"),
            std::string::npos);
  // Qwen3's 128-wide heads are Megatron-Core's --kv-channels.
  ParallelConfig qwen = Qwen235Layout();
  const std::string qargs = MegatronArgs(Preset("qwen3-235b-a22b"), qwen);
  EXPECT_NE(qargs.find(" --kv-channels 128 --qk-layernorm"), std::string::npos) << qargs;
  EXPECT_NE(qargs.find(" --expert-model-parallel-size 32 --expert-tensor-parallel-size 1"),
            std::string::npos)
      << qargs;
}

}  // namespace
}  // namespace ptdp::planner

namespace ptdp::planner {
namespace {

// Each expert-parallel rank's experts carry their global indices (what the runtime initialises and
// a checkpoint would name them by): Mixtral's 8 over ep 4, rank 2 holds experts 4 and 5.
TEST(Moe, ExpertParallelRanksNameTheirExpertsGlobally) {
  const ModelSpec m = Preset("mixtral-8x7b");
  ParallelConfig c;
  c.dp = 4;
  c.ep = 4;
  c.pp = 1;
  c.global_batch = 8;
  std::vector<std::string> experts;
  for (const ParamTensor& p : ChunkParameters(m, c, 0, 0, /*ep_rank=*/2)) {
    if (p.expert && p.name.rfind("layer0.", 0) == 0) experts.push_back(p.name);
  }
  EXPECT_EQ(experts, (std::vector<std::string>{
                         "layer0.moe.expert4.fc1.weight", "layer0.moe.expert4.fc2.weight",
                         "layer0.moe.expert5.fc1.weight", "layer0.moe.expert5.fc2.weight"}));
}

}  // namespace
}  // namespace ptdp::planner
