// Selective recomputation of the attention core with fused attention (Megatron-Core checkpoints
// the core whatever its backend: --recompute-granularity selective beside --attention-backend
// flash): the stash loses only the kernel's log-sum-exp, the backward runs the kernel's forward
// again, the FLOP count adds that forward; refused with context parallelism; never searched, taken
// where --fix asks for both.
#include <gtest/gtest.h>

#include "core/cluster.h"
#include "core/ledger.h"
#include "core/model.h"
#include "core/shapes.h"
#include "costmodel/estimate.h"
#include "costmodel/layer_cost.h"
#include "costmodel/recompute_cost.h"
#include "planner/fix.h"
#include "planner/search.h"

namespace ptdp {
namespace {

// gpt-1.7b (h 2304, 24 heads, s 2048, dropout) at t 2, b 2, bf16, fused attention.
ParallelConfig Fused(Recompute r) {
  ParallelConfig c;
  c.tp = 2;
  c.dp = 4;
  c.mbs = 2;
  c.global_batch = 64;
  c.precision = Precision::kBf16;
  c.fused_attention = true;
  c.recompute = r;
  return c;
}

ModelSpec Gpt17() {
  auto m = LoadModel("gpt-1.7b");
  EXPECT_TRUE(m.ok());
  return *m;
}

TEST(FusedSelective, AllowedButNotWithContextParallelism) {
  const ModelSpec m = Gpt17();
  ParallelConfig c = Fused(Recompute::kSelective);
  EXPECT_TRUE(c.Validate(m).ok()) << c.Validate(m).message();
  c.dp = 2;
  c.cp = 2;
  EXPECT_EQ(c.Validate(m).message().rfind(
                "recompute: selective recomputation of core_attn with context parallelism", 0),
            0u)
      << c.Validate(m).message();
  c.recompute_modules = kRecomputeMlp;  // the core kept: allowed with cp
  EXPECT_TRUE(c.Validate(m).ok()) << c.Validate(m).message();
}

// The stash drops the 4-byte log-sum-exp of each of the b a s / t score rows; the backward
// rebuilds it (the working set).
TEST(FusedSelective, DropsOnlyTheLogSumExp) {
  const ModelSpec m = Gpt17();
  const ParallelConfig none = Fused(Recompute::kNone), sel = Fused(Recompute::kSelective);
  const Bytes lse = 4 * int64_t(2) * 24 * 2048 / 2;
  auto stash = [&](const ParallelConfig& c) {
    return ActivationBytes(LayerActivations(m, c, true), 2, 2);
  };
  EXPECT_EQ(stash(none) - stash(sel), lse);
  EXPECT_EQ(ActivationBytes(RecomputeWorkingSet(m, sel, true), 2, 2), lse);
}

// The backward redoes the kernel's forward: the recompute row is FusedAttentionCost's forward,
// and the FLOPs grow by one attention forward, 4 B s^2 h per layer.
TEST(FusedSelective, RedoesTheKernelsForward) {
  const ModelSpec m = Gpt17();
  auto cluster = LoadCluster("dgx-h100", 8);
  ASSERT_TRUE(cluster.ok());
  const ParallelConfig none = Fused(Recompute::kNone), sel = Fused(Recompute::kSelective);
  const costmodel::ComputeBreakdown redo =
      costmodel::SelectiveRecomputeCost(m, cluster->profile, sel, 0);
  const Seconds kernel = costmodel::FusedAttentionCost(m, cluster->profile, 2, 2).forward.gemm;
  EXPECT_GT(kernel, 0);
  EXPECT_EQ(redo.gemm, kernel);
  EXPECT_EQ(redo.memory, 0);
  const costmodel::CostTable t_none = costmodel::BuildCostTable(m, *cluster, none);
  const costmodel::CostTable t_sel = costmodel::BuildCostTable(m, *cluster, sel);
  EXPECT_NEAR(t_sel.chunks[0].BackwardTime() - t_none.chunks[0].BackwardTime(), 24 * kernel, 1e-12);
  const double B = 64, s = 2048, h = 2304;
  const double forward = 24 * 4 * B * s * s * h;
  EXPECT_NEAR(HardwareIterationFlops(m, sel) - HardwareIterationFlops(m, none), forward,
              1e-9 * forward);
}

// Searched only where --fix names both; the search alone leaves it out.
TEST(FusedSelective, TakenOnlyWhereFixed) {
  const ModelSpec m = Gpt17();
  auto cluster = LoadCluster("dgx-h100", 8);
  ASSERT_TRUE(cluster.ok());
  planner::SearchOptions o;
  o.global_batch = 64;
  o.selective_recompute = true;
  o.fix = *planner::ParseFix("tp=2,pp=1,fused_attention=on,precision=bf16");
  auto searched = planner::Search(m, *cluster, o);
  ASSERT_TRUE(searched.ok()) << searched.status().message();
  for (const auto& cand : searched->top) {
    EXPECT_NE(cand.layout.recompute, Recompute::kSelective) << cand.layout.ToString();
  }
  o.fix = *planner::ParseFix("tp=2,pp=1,fused_attention=on,precision=bf16,recompute=selective");
  auto fixed = planner::Search(m, *cluster, o);
  ASSERT_TRUE(fixed.ok()) << fixed.status().message();
  EXPECT_EQ(fixed->top.front().layout.recompute, Recompute::kSelective);
  EXPECT_TRUE(fixed->top.front().layout.fused_attention);
}

}  // namespace
}  // namespace ptdp
