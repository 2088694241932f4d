// Megatron-Core's --moe-shared-expert-overlap (ParallelConfig::moe_shared_expert_overlap,
// costmodel/moe_cost.h OverlapSharedExpert): the shared expert's two halves beside the dispatch's
// and the combine's exchange, its refusals, its flag and its plan-file key.
#include <gtest/gtest.h>

#include "core/cluster.h"
#include "core/json.h"
#include "core/model.h"
#include "core/software.h"
#include "costmodel/moe_cost.h"
#include "planner/fix.h"
#include "planner/report.h"
#include "planner/search.h"

namespace ptdp::planner {
namespace {

// By hand: a layer of 12 s of compute and 8 s of exchange (two all-to-alls of 4 s), a shared
// expert of 3 s (up) and 5 s (down), compute 25% slower beside a collective (OverlapStretch 0.2).
// Dispatch: the up half hides 3 of its 4 s; combine: the exchange's 4 s hide under the down half.
TEST(SharedExpertOverlap, EachHalfHidesUnderItsExchangeByHand) {
  costmodel::PieceCost layer;
  layer.forward = {.gemm = 10, .memory = 2, .tp_comm = 8};
  layer.backward = {.gemm = 20, .memory = 4, .tp_comm = 8};
  costmodel::SharedExpertHalves shared;
  shared.up.forward = {.gemm = 3};
  shared.down.forward = {.gemm = 4, .memory = 1};
  shared.up.backward = {.gemm = 6};
  shared.down.backward = {.gemm = 2};
  shared.up.weight_grad = {.gemm = 3};
  costmodel::ExpertComm comm;
  comm.all_to_all = 4;
  costmodel::OverlapSharedExpert(shared, comm, 0.25, &layer);
  // Forward: 12 + max(4, 3) + 3 x 0.2 + max(4, 5) + 4 x 0.2.
  EXPECT_DOUBLE_EQ(layer.forward.Total(), 12 + 4 + 0.6 + 5 + 0.8);
  EXPECT_DOUBLE_EQ(layer.forward.tp_comm, 1);
  // Backward: 24 + max(4, 2) + 2 x 0.2 + max(4, 6) + 4 x 0.2; the weight gradients counted too.
  EXPECT_DOUBLE_EQ(layer.backward.Total(), 24 + 4 + 0.4 + 6 + 0.8);
  EXPECT_DOUBLE_EQ(layer.weight_grad.gemm, 3);
}

// Its halves are the shared expert's whole price, as added without the overlap.
TEST(SharedExpertOverlap, HalvesMakeTheWhole) {
  const ModelSpec m = *LoadModel("deepseek-v3");
  const HardwareProfile hw = LoadCluster("dgx-h100", 8)->profile;
  ParallelConfig c;
  c.tp = 2;
  c.sequence_parallel = true;
  c.precision = Precision::kFp8;
  const auto halves = costmodel::SharedExpertHalvesOf(m, hw, c, 1e-3, 2e-3, 5e-3);
  const auto whole = costmodel::SharedExpertCost(m, hw, c, 1e-3, 2e-3, 5e-3);
  EXPECT_DOUBLE_EQ(halves.up.forward.Total() + halves.down.forward.Total(), whole.forward.Total());
  EXPECT_DOUBLE_EQ(halves.up.backward.tp_comm + halves.down.backward.tp_comm, 3e-3);
  EXPECT_GT(halves.up.forward.gemm, halves.down.forward.gemm);  // fc1 is twice fc2's width
}

// DeepSeek-V3 as NVIDIA's DGX Cloud recipe lays it out (EP 64 over eight nodes, the alltoall
// dispatcher): the overlap shortens the iteration, but never below the same layout without a
// shared expert at all.
TEST(SharedExpertOverlap, ShortensButNeverBelowNoSharedExpert) {
  ModelSpec m = *LoadModel("deepseek-v3");
  auto cluster = LoadCluster("dgx-h100", 1024);
  ASSERT_TRUE(cluster.ok());
  cluster->software = *LoadSoftware("megatron-core");
  ParallelConfig c;
  c.tp = 2;
  c.pp = 16;
  c.dp = 32;
  c.ep = 64;
  c.etp = 1;
  c.sequence_parallel = c.distributed_optimizer = c.grad_accumulation_fusion = true;
  c.fused_attention = true;
  c.first_stage_layers = 3;
  c.last_stage_layers = 2;
  c.recompute = Recompute::kSelective;
  c.recompute_modules = kRecomputeMlaUpProj;
  c.precision = Precision::kBf16;
  c.global_batch = 8192;
  auto without = Evaluate(m, *cluster, c);
  ASSERT_TRUE(without.ok()) << without.status().message();
  c.moe_shared_expert_overlap = true;
  auto with = Evaluate(m, *cluster, c);
  ASSERT_TRUE(with.ok()) << with.status().message();
  EXPECT_LT(with->prediction.iteration_s, without->prediction.iteration_s);
  EXPECT_EQ(with->prediction.peak_memory, without->prediction.peak_memory);
  m.moe_shared_ffn_hidden = 0;
  c.moe_shared_expert_overlap = false;
  auto routed = Evaluate(m, *cluster, c);
  ASSERT_TRUE(routed.ok()) << routed.status().message();
  EXPECT_LT(routed->prediction.iteration_s, with->prediction.iteration_s);
}

TEST(SharedExpertOverlap, RefusedWithoutASharedExpertOrBesideTheCombined1F1B) {
  ParallelConfig c;
  c.dp = 8;
  c.ep = 8;
  c.global_batch = 64;
  c.precision = Precision::kBf16;
  c.moe_shared_expert_overlap = true;
  const Status none = c.Validate(*LoadModel("qwen3-30b-a3b"));
  EXPECT_NE(none.message().find("moe_shared_expert_overlap: "), std::string::npos)
      << none.message();
  EXPECT_NE(none.message().find("moe_shared_ffn_hidden"), std::string::npos);
  EXPECT_FALSE(c.Validate(*LoadModel("llama3-8b")).ok());
  c.moe_a2a_overlap = true;
  const Status both = c.Validate(*LoadModel("deepseek-v3"));
  EXPECT_NE(both.message().find("not with moe_a2a_overlap"), std::string::npos) << both.message();
}

// `--fix moe_shared_expert_overlap=on`, the layout's text and JSON, and Megatron-LM's flag.
TEST(SharedExpertOverlap, FixedWrittenReadAndEmitted) {
  auto fix = ParseFix("moe_shared_expert_overlap=on");
  ASSERT_TRUE(fix.ok()) << fix.status().message();
  ParallelConfig c;
  c.tp = 2;
  c.dp = 4;
  c.ep = 8;
  c.sequence_parallel = true;
  c.global_batch = 64;
  c.precision = Precision::kBf16;
  EXPECT_FALSE(fix->Admits(c));
  c.moe_shared_expert_overlap = true;
  EXPECT_TRUE(fix->Admits(c));
  EXPECT_NE(c.ToString().find(",moe_shared_expert_overlap=on"), std::string::npos);
  const OrderedJson j = LayoutToJson(c);
  EXPECT_TRUE(j.at("moe_shared_expert_overlap").get<bool>());
  auto back = LayoutFromJson(Json::parse(j.dump()), "layout");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back->moe_shared_expert_overlap);
  EXPECT_NE(MegatronArgs(*LoadModel("deepseek-v3"), c).find(" --moe-shared-expert-overlap"),
            std::string::npos);
  EXPECT_FALSE(ParseFix("moe_shared_expert_overlap=yes").ok());
}

}  // namespace
}  // namespace ptdp::planner
