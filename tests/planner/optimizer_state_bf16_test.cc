// 16-bit optimizer state (ParallelConfig::optimizer_state_bf16, Megatron-LM's
// --use-precision-aware-optimizer with bf16 moments): the ledger's 6 bytes per parameter, the
// optimizer step's bytes, the layout rules and plan file, the search (only when the user allows
// it) and --emit megatron.
#include <gtest/gtest.h>

#include "core/cluster.h"
#include "core/json.h"
#include "core/ledger.h"
#include "core/model.h"
#include "core/software.h"
#include "costmodel/step_cost.h"
#include "planner/fix.h"
#include "planner/report.h"
#include "planner/search.h"

namespace ptdp::planner {
namespace {

ParallelConfig Bf16State(Precision p) {
  ParallelConfig c;
  c.precision = p;
  c.distributed_optimizer = true;
  c.optimizer_state_bf16 = true;
  return c;
}

// bf16 m and v and the master's low 16 bits: 6 bytes in place of 12, whatever the gradients; the
// distributed optimizer shards the 6.
TEST(OptimizerStateBf16, SixBytesOfState) {
  for (Precision p : {Precision::kBf16, Precision::kFp8}) {
    ParallelConfig c = Bf16State(p);
    EXPECT_EQ(BytesPerParameter(c).optimizer, 6);
    EXPECT_EQ(BytesPerParameter(c).Total(), 2 + 4 + 6);
    c.grad_reduce_bf16 = true;
    EXPECT_EQ(BytesPerParameter(c).Total(), 2 + 2 + 6);
    c.optimizer_state_bf16 = false;
    EXPECT_EQ(BytesPerParameter(c).optimizer, 12);
  }
  ParallelConfig c = Bf16State(Precision::kBf16);
  c.dp = 4;
  EXPECT_EQ(ParameterMemory(c, 1000).optimizer, 6 * 250);
}

// One kernel reads the bf16 weight, the remainder, the fp32 gradient and bf16 m, v (12) and writes
// all but the gradient (8): 20 bytes where Adam and the copy to the weight moved 28 + 4 + 2.
TEST(OptimizerStateBf16, TheStepMovesFourteenBytesFewer) {
  auto core = LoadSoftware("megatron-core");
  ASSERT_TRUE(core.ok());
  ASSERT_TRUE(core->optimizer_main_grads_in_place.value);
  ParallelConfig c = Bf16State(Precision::kBf16);
  c.grad_accumulation_fusion = true;
  EXPECT_EQ(costmodel::OptimizerBytesPerParam(c, *core), 4 + 20);
  c.grad_reduce_bf16 = true;  // the cast of the bf16 shard to fp32 comes first, as without
  EXPECT_EQ(costmodel::OptimizerBytesPerParam(c, *core), (2 + 4) + 4 + 20);
  c.grad_reduce_bf16 = false;
  c.optimizer_state_bf16 = false;
  EXPECT_EQ(costmodel::OptimizerBytesPerParam(c, *core), 4 + 28 + (4 + 2));
}

TEST(OptimizerStateBf16, NeedsSixteenBitsAndTheDistributedOptimizer) {
  auto m = LoadModel("gpt-1.7b");
  ASSERT_TRUE(m.ok());
  ParallelConfig c = Bf16State(Precision::kBf16);
  c.dp = 2;
  c.global_batch = 16;
  EXPECT_TRUE(c.Validate(*m).ok()) << c.Validate(*m).message();
  c.precision = Precision::kFp16;
  EXPECT_EQ(c.Validate(*m).message(),
            "optimizer_state_bf16: needs precision bf16 or fp8, not fp16");
  c.precision = Precision::kBf16;
  c.distributed_optimizer = false;
  EXPECT_EQ(c.Validate(*m).message().rfind("optimizer_state_bf16: needs distributed_optimizer", 0),
            0u);
}

// Written only when set, so plan files without it stay as they were; read back; named in the
// layout's text and in --fix.
TEST(OptimizerStateBf16, PlanFileAndFix) {
  ParallelConfig c = Bf16State(Precision::kBf16);
  const Json j = Json::parse(LayoutToJson(c).dump());
  EXPECT_TRUE(j.at("optimizer_state_bf16").get<bool>());
  const ParallelConfig back = LayoutFromJson(j, "layout").value();
  EXPECT_TRUE(back.optimizer_state_bf16);
  EXPECT_NE(back.ToString().find(",optimizer_state_bf16=on"), std::string::npos);
  c.optimizer_state_bf16 = false;
  EXPECT_FALSE(Json::parse(LayoutToJson(c).dump()).contains("optimizer_state_bf16"));
  auto fix = ParseFix("optimizer_state_bf16=on");
  ASSERT_TRUE(fix.ok());
  EXPECT_TRUE(fix->Admits(back));
  EXPECT_FALSE(fix->Admits(c));
  EXPECT_EQ(ParseFix("optimizer_state_bf16=yes").status().message(),
            "--fix: optimizer_state_bf16: expected on or off, got \"yes\"");
}

// Never chosen on its own: with it allowed, every bf16 layout with the distributed optimizer
// takes it, and layouts without that optimizer (d = 1) do not; fixed on at fp16 the search says
// why.
TEST(OptimizerStateBf16, OnlyWhenAllowedAndOnlyWithTheDistributedOptimizer) {
  auto m = LoadModel("gpt-1.7b");
  auto c = LoadCluster("selene", 16);
  ASSERT_TRUE(m.ok() && c.ok());
  SearchOptions o;
  o.global_batch = 64;
  o.precision = Precision::kBf16;
  o.distributed_optimizer = true;
  o.keep = 50;
  auto plain = Search(*m, *c, o);
  ASSERT_TRUE(plain.ok());
  for (const auto& cand : plain->top) EXPECT_FALSE(cand.layout.optimizer_state_bf16);
  o.optimizer_state_bf16 = true;
  auto allowed = Search(*m, *c, o);
  ASSERT_TRUE(allowed.ok());
  for (const auto& cand : allowed->top) {
    EXPECT_TRUE(cand.layout.optimizer_state_bf16 && cand.layout.distributed_optimizer)
        << cand.layout.ToString();
  }
  o.fix = *ParseFix("dp=1");  // the search keeps a whole optimizer on one data-parallel rank
  auto one_rank = Search(*m, *c, o);
  ASSERT_TRUE(one_rank.ok());
  for (const auto& cand : one_rank->top) {
    EXPECT_FALSE(cand.layout.optimizer_state_bf16 || cand.layout.distributed_optimizer)
        << cand.layout.ToString();
  }
  o.precision = Precision::kFp16;
  o.fix = *ParseFix("optimizer_state_bf16=on");
  auto fixed = Search(*m, *c, o);
  ASSERT_FALSE(fixed.ok());
  EXPECT_EQ(fixed.status().message(),
            "--fix optimizer_state_bf16=on: needs precision bf16 or fp8, not fp16");
}

// dgxc-benchmarking's Nemotron-4 340B on 128 H100s (docs/validation-h100.md): the recipe's layout
// needs more than the 80 GB the run trained in with fp32 state, and fits with 16-bit state;
// --emit megatron then asks for Transformer Engine's precision-aware optimizer.
TEST(OptimizerStateBf16, Nemotron340BFitsOnlyWithIt) {
  auto m = LoadModel("nemotron4-340b");
  auto c = LoadCluster("dgx-h100", 128);
  ASSERT_TRUE(m.ok() && c.ok());
  SearchOptions o;
  o.global_batch = 32;
  const std::string recipe =
      "tp=8,pp=8,dp=2,mbs=1,vp=12,schedule=interleaved,precision=bf16,recompute=none,"
      "sequence_parallel=on,distributed_optimizer=on,grad_accumulation_fusion=on,"
      "fused_attention=on,grad_reduce_bf16=on";
  o.fix = *ParseFix(recipe);
  auto fp32_state = Search(*m, *c, o);
  ASSERT_FALSE(fp32_state.ok());
  EXPECT_EQ(fp32_state.status().code(), StatusCode::kDoesNotFit);
  o.fix = *ParseFix(recipe + ",optimizer_state_bf16=on");
  auto bf16_state = Search(*m, *c, o);
  ASSERT_TRUE(bf16_state.ok()) << bf16_state.status().message();
  const ParallelConfig& best = bf16_state->top.front().layout;
  EXPECT_TRUE(best.optimizer_state_bf16);
  EXPECT_LT(bf16_state->top.front().prediction.peak_memory, Bytes(80) << 30);
  EXPECT_NE(MegatronArgs(*m, best).find(" --use-precision-aware-optimizer --exp-avg-dtype bf16 "
                                        "--exp-avg-sq-dtype bf16"),
            std::string::npos);
  ParallelConfig fp32 = best;
  fp32.optimizer_state_bf16 = false;
  EXPECT_EQ(MegatronArgs(*m, fp32).find("--use-precision-aware-optimizer"), std::string::npos);
}

}  // namespace
}  // namespace ptdp::planner
