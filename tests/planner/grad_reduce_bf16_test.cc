// bf16 gradients (ParallelConfig::grad_reduce_bf16, Megatron-LM's --grad-reduce-in-bf16): the
// ledger's 2 bytes per gradient, the cost model's half-size data-parallel reduction and the
// optimizer's cast to fp32, the search (only when the user allows it, only in bf16 or fp8) and
// --emit megatron.
#include <gtest/gtest.h>

#include "core/cluster.h"
#include "core/model.h"
#include "core/software.h"
#include "core/units.h"
#include "costmodel/estimate.h"
#include "planner/fix.h"
#include "planner/report.h"
#include "planner/search.h"

namespace ptdp::planner {
namespace {

// NeMo 24.07's GPT-3 175B run on 512 H100s (docs/validation-h100.md), the layout its table
// states: with fp32 gradients stage 0 needs more than the 80 GB the run trained in.
SearchOptions Gpt3On512(bool grad_reduce_bf16) {
  SearchOptions o;
  o.global_batch = 2048;
  o.fix = *ParseFix(
      "tp=4,pp=8,dp=16,mbs=2,vp=6,schedule=interleaved,precision=fp8,recompute=none,"
      "distributed_optimizer=on,grad_accumulation_fusion=on,fused_attention=on,"
      "sequence_parallel=on");
  o.grad_reduce_bf16 = grad_reduce_bf16;
  return o;
}

TEST(GradReduceBf16, FitsWhereFp32GradientsDoNot) {
  auto m = LoadModel("gpt3-175b");
  auto c = LoadCluster("dgx-h100", 512);
  ASSERT_TRUE(m.ok() && c.ok());
  c->software = *LoadSoftware("megatron-core");
  auto fp32_grads = Search(*m, *c, Gpt3On512(false));
  ASSERT_FALSE(fp32_grads.ok());
  EXPECT_EQ(fp32_grads.status().code(), StatusCode::kDoesNotFit);
  auto bf16_grads = Search(*m, *c, Gpt3On512(true));
  ASSERT_TRUE(bf16_grads.ok()) << bf16_grads.status().message();
  const ParallelConfig& best = bf16_grads->top.front().layout;
  EXPECT_TRUE(best.grad_reduce_bf16);
  EXPECT_LT(bf16_grads->top.front().prediction.peak_memory, Bytes(80) << 30);
  EXPECT_NE(MegatronArgs(*m, best).find(" --grad-reduce-in-bf16"), std::string::npos);
  ParallelConfig fp32 = best;
  fp32.grad_reduce_bf16 = false;
  EXPECT_EQ(MegatronArgs(*m, fp32).find("--grad-reduce-in-bf16"), std::string::npos);
}

// The reduce-scatter moves half the bytes; the optimizer step, priced by its bytes, reads a bf16
// gradient and writes its fp32 copy first (Megatron-Core's shard_model_grad.float()): 44 bytes
// per parameter of the shard in place of 38.
TEST(GradReduceBf16, HalfTheReductionAndACastInTheStep) {
  auto m = LoadModel("gpt3-175b");
  auto c = LoadCluster("dgx-h100", 512);
  ASSERT_TRUE(m.ok() && c.ok());
  c->software = *LoadSoftware("megatron-core");
  ASSERT_TRUE(c->software.optimizer_main_grads_in_place.value);
  ParallelConfig layout;
  layout.tp = 4;
  layout.pp = 8;
  layout.dp = 16;
  layout.mbs = 1;
  layout.global_batch = 256;
  layout.precision = Precision::kBf16;
  layout.distributed_optimizer = true;
  layout.grad_accumulation_fusion = true;
  ASSERT_TRUE(layout.Validate(*m).ok());
  ParallelConfig half = layout;
  half.grad_reduce_bf16 = true;
  const costmodel::CostTable full_t = costmodel::BuildCostTable(*m, *c, layout);
  const costmodel::CostTable half_t = costmodel::BuildCostTable(*m, *c, half);
  const int r = 3;  // a middle stage: layers only
  ASSERT_EQ(full_t.dp_collectives[r].size(), 2u);
  // Across nodes (d = 16 over 16 nodes) the reduce-scatter is NIC-bound: its NIC bytes halve.
  EXPECT_DOUBLE_EQ(half_t.dp_collectives[r][0].nic_bytes,
                   0.5 * full_t.dp_collectives[r][0].nic_bytes);
  // The weights' all-gather is bf16 either way.
  EXPECT_DOUBLE_EQ(half_t.dp_collectives[r][1].nic_bytes, full_t.dp_collectives[r][1].nic_bytes);
  EXPECT_LT(half_t.dp_allreduce[r], full_t.dp_allreduce[r]);
  // Without the wrapper's passes over the whole buffer (which halve too), the optimizer row is
  // the step and its small all-reduces: 6 bytes more per parameter of the shard.
  c->software.grad_buffer_passes.value = 0;
  c->software.grad_scale_passes.value = 0;
  const Seconds full_step = costmodel::BuildCostTable(*m, *c, layout).optimizer[r];
  const Seconds half_step = costmodel::BuildCostTable(*m, *c, half).optimizer[r];
  const int64_t shard = (full_t.param_elements[r] + layout.dp - 1) / layout.dp;
  EXPECT_NEAR(half_step - full_step,
              6.0 * double(shard) / GBpsToBytesPerSecond(c->profile.memory_bound_GBps.value), 1e-9);
}

// Never chosen on its own: searched only when allowed, and then only on bf16 or fp8 layouts;
// fixed on with fp16, the search says why.
TEST(GradReduceBf16, OnlyWhenAllowedAndOnlyInBf16) {
  auto m = LoadModel("gpt-1.7b");
  auto c = LoadCluster("selene", 8);  // fp16 by default
  ASSERT_TRUE(m.ok() && c.ok());
  SearchOptions o;
  o.global_batch = 64;
  o.precision = Precision::kBf16;
  auto plain = Search(*m, *c, o);
  ASSERT_TRUE(plain.ok());
  for (const auto& cand : plain->top) EXPECT_FALSE(cand.layout.grad_reduce_bf16);
  o.grad_reduce_bf16 = true;
  auto allowed = Search(*m, *c, o);
  ASSERT_TRUE(allowed.ok());
  for (const auto& cand : allowed->top) EXPECT_TRUE(cand.layout.grad_reduce_bf16);
  o.precision = Precision::kFp16;
  auto fp16 = Search(*m, *c, o);
  ASSERT_TRUE(fp16.ok());
  for (const auto& cand : fp16->top) EXPECT_FALSE(cand.layout.grad_reduce_bf16);
  o.fix = *ParseFix("grad_reduce_bf16=on");
  auto fixed = Search(*m, *c, o);
  ASSERT_FALSE(fixed.ok());
  EXPECT_EQ(fixed.status().message(),
            "--fix grad_reduce_bf16=on: needs precision bf16 or fp8, not fp16");
}

}  // namespace
}  // namespace ptdp::planner
