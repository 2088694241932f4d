// ReplanForMeasuredCosts (tools/train_adapt.h) on synthetic monitor windows of a 2-rank t1 p2 d1
// run: the factors are per world rank, and a candidate of another t, p, d prices each of its
// pipeline ranks with the slowest world rank it places there, so one slow GPU slows every layout
// that uses it.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "core/cluster.h"
#include "core/json.h"
#include "core/ledger.h"
#include "core/rank_grid.h"
#include "core/shapes.h"
#include "core/software.h"
#include "schedule/schedule.h"
#include "tools/train_adapt.h"

namespace ptdp::tools {
namespace {

// A t1 p2 d1 plan of `layers` layers (the first stage holding `first`, the last `last`; 0 the even
// share) and B sequences.
PlanFile TwoRankPipeline(int layers = 2, int global_batch = 2, int first = 0, int last = 0) {
  const std::string text = R"({
    "ptdp_plan_version": 2,
    "model": {"name": "tiny", "layers": )" +
                           std::to_string(layers) +
                           R"(, "hidden": 64, "heads": 4, "seq_len": 32,
              "vocab": 256, "dropout": 0.0},
    "cluster": {"name": "cpu", "gpus": 2, "gpus_per_node": 2},
    "global_batch": )" + std::to_string(global_batch) +
                           R"(,
    "layout": {"tp": 1, "pp": 2, "dp": 1, "mbs": 1, "vp": 1, "schedule": "1f1b",
               "recompute": "none", "scatter_gather": true, "first_stage_layers": )" +
                           std::to_string(first) + R"(, "last_stage_layers": )" +
                           std::to_string(last) + "}}";
  auto json = ParseJson(text, "test plan");
  EXPECT_TRUE(json.ok());
  auto plan = PlanFromJson(*json, /*require_program=*/false);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  auto program = schedule::BuildProgram(plan->model, plan->layout);
  EXPECT_TRUE(program.ok());
  plan->program = *program;
  plan->has_program = true;
  return *plan;
}

// A window of 2 steps in which world rank r (pipeline rank r) computed stage_s[r] per step.
runtime::MonitorReport Window(const std::vector<double>& stage_s) {
  runtime::MonitorReport report;
  for (int r = 0; r < int(stage_s.size()); ++r) {
    runtime::RankWindow w;
    w.rank = r;
    w.coord.pp = r;
    w.steps = 2;
    w.wall_s = 2 * (stage_s[0] + stage_s[1]);
    w.stage_compute_s = 2 * stage_s[static_cast<size_t>(r)];
    report.ranks.push_back(w);
  }
  return report;
}

// The re-planner prices for the stack the plan names (PlanSoftware, as `ptdp simulate --plan`):
// the same window measured against the 2021 stack's and ptdp's own prices gives other factors
// (ptdp's stack fuses the gradient accumulation and the cross-entropy, so its modelled stages are
// shorter and the same measured time is a larger factor of them).
TEST(Replan, PricesWithThePlansSoftwareProfile) {
  PlanFile plan2021 = TwoRankPipeline(4, 4);
  PlanFile plan_ptdp = plan2021;
  auto sw_2021 = LoadSoftware("megatron-lm-2021");
  auto sw_ptdp = LoadSoftware("ptdp");
  ASSERT_TRUE(sw_2021.ok() && sw_ptdp.ok());
  plan2021.software = *sw_2021;
  plan_ptdp.software = *sw_ptdp;
  auto a = ReplanForMeasuredCosts(plan2021, Window({0.01, 0.01}), /*memory_limit=*/0);
  auto b = ReplanForMeasuredCosts(plan_ptdp, Window({0.01, 0.01}), /*memory_limit=*/0);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (int r = 0; r < 2; ++r) {
    EXPECT_GT(b->rank_scale[size_t(r)], a->rank_scale[size_t(r)] * 1.001) << "rank " << r;
  }
}

TEST(Replan, FactorsArePerWorldRankAndTheRunningStagesTakeThem) {
  const PlanFile plan = TwoRankPipeline();
  auto even = ReplanForMeasuredCosts(plan, Window({0.01, 0.01}), /*memory_limit=*/0);
  auto slow = ReplanForMeasuredCosts(plan, Window({0.01, 0.08}), /*memory_limit=*/0);
  ASSERT_TRUE(even.ok()) << even.status().ToString();
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  ASSERT_EQ(slow->rank_scale.size(), 2u);
  EXPECT_DOUBLE_EQ(slow->rank_scale[0], even->rank_scale[0]);
  EXPECT_NEAR(slow->rank_scale[1] / even->rank_scale[1], 8.0, 1e-9);
  // t1 p2 d1: world rank r is pipeline rank r, so the running stages' factors are the ranks'.
  EXPECT_EQ(slow->scale, slow->rank_scale);
}

TEST(Replan, ASlowRankSlowsEveryOtherShapeThatUsesIt) {
  const PlanFile plan = TwoRankPipeline();
  auto even = ReplanForMeasuredCosts(plan, Window({0.01, 0.01}), /*memory_limit=*/0);
  auto slow = ReplanForMeasuredCosts(plan, Window({0.01, 0.08}), /*memory_limit=*/0);
  ASSERT_TRUE(even.ok() && slow.ok());
  // The other shapes of 2 ranks (t2 p1 d1, t1 p1 d2) are found and, with both ranks alike, beat a
  // pipeline of 2 microbatches over 2 stages.
  EXPECT_GT(even->other_candidates, 0);
  ASSERT_TRUE(even->other.has_value());
  EXPECT_EQ(even->other->pp, 1);
  EXPECT_LT(even->other_step_s, even->current_step_s);
  // Each of them puts rank 1 on their only pipeline rank, so all their compute runs at rank 1's
  // pace (8x): the best is far slower than with rank 1 at speed, whichever it is. Priced with the
  // running pipeline rank 0's factor (a per-pipeline-rank mapping), it would not have moved.
  const double other_slow = slow->other ? slow->other_step_s : slow->current_step_s;
  EXPECT_GT(other_slow, 3 * even->other_step_s);
}

// A machine faster than its profile (factors under 1, as the fitted profile of
// --adapt-calibrate gives a rank that ran faster in the window than in the fitted step): every
// part of a rank's compute takes its factor, the weight-gradient part of the backward too, so the
// calibrated table stays one the simulator accepts (with W left at the profile's price, a factor
// under W/B made W more than its whole backward and the re-plan failed the training run).
TEST(Replan, AMachineFasterThanItsProfileReplans) {
  const PlanFile plan = TwoRankPipeline();
  auto unit = ReplanForMeasuredCosts(plan, Window({0.01, 0.01}), /*memory_limit=*/0);
  ASSERT_TRUE(unit.ok()) << unit.status().ToString();
  // Each rank measured a tenth of what the profile prices its stage at.
  const double modelled0 = 0.01 / unit->rank_scale[0], modelled1 = 0.01 / unit->rank_scale[1];
  auto fast = ReplanForMeasuredCosts(plan, Window({0.1 * modelled0, 0.1 * modelled1}),
                                     /*memory_limit=*/0);
  ASSERT_TRUE(fast.ok()) << fast.status().ToString();
  EXPECT_NEAR(fast->rank_scale[0], 0.1, 1e-9);
  EXPECT_NEAR(fast->rank_scale[1], 0.1, 1e-9);
  EXPECT_LT(fast->current_step_s, unit->current_step_s);
}

// The interleaved layouts with short ends among the candidates, as (vp, first, last), each once.
std::set<std::tuple<int, int, int>> ShortEndInterleaved(const PlanFile& plan) {
  std::set<std::tuple<int, int, int>> out;
  for (const ParallelConfig& c : RunningShapeCandidates(plan)) {
    EXPECT_TRUE(c.Validate(plan.model).ok()) << c.ToString();
    if (c.vp > 1 && c.Uneven()) out.insert({c.vp, c.first_stage_layers, c.last_stage_layers});
  }
  return out;
}

// Megatron-LM's short ends counted by hand: 6 layers on 2 ranks take both ends as layers (8 units,
// 2 virtual stages of 2 per rank with v = 2: ranks of 3 layers); 7 layers take one end (8 units:
// 3 layers on the short rank, 4 on the other). 4 layers allow none (6 units make v = 3 stages of
// one layer, with nothing left for a short end), nor does 2.
TEST(Replan, CandidatesIncludeTheInterleavedShortEndsCoreAllows) {
  using Set = std::set<std::tuple<int, int, int>>;
  EXPECT_EQ(ShortEndInterleaved(TwoRankPipeline(6, 4)), (Set{{2, 3, 3}}));
  EXPECT_EQ(ShortEndInterleaved(TwoRankPipeline(7, 4, 4, 3)), (Set{{2, 3, 0}, {2, 0, 3}}));
  EXPECT_EQ(ShortEndInterleaved(TwoRankPipeline(4, 4)), Set{});
  EXPECT_EQ(ShortEndInterleaved(TwoRankPipeline(2, 2)), Set{});
  // Interleaving needs as many microbatches as ranks: with B = 1 there is none at all.
  EXPECT_EQ(ShortEndInterleaved(TwoRankPipeline(6, 1)), Set{});
  // Each vp's short ends are exactly core's (InterleavedShortEnds): for 10 layers both ends
  // counted, 12 units, with v = 2 (3 a stage) and v = 3 (2 a stage): 6 units a rank, 5 layers.
  const PlanFile ten = TwoRankPipeline(10, 4);
  Set want;
  for (int vp = 2; vp <= 10; ++vp) {
    for (const auto& [f, l] : InterleavedShortEnds(ten.model, 2, vp)) want.insert({vp, f, l});
  }
  EXPECT_EQ(want, (Set{{2, 5, 5}, {3, 5, 5}}));
  EXPECT_EQ(ShortEndInterleaved(ten), want);
}

// 7 layers on 2 ranks have no even split, so the run starts uneven (1F1B 4/3); before the short
// ends were candidates, the re-planner asked for the even split's stage counts and failed a
// PTDP_CHECK. With B = 8 and both ranks at the profile's pace, an interleaving with a short end
// (halving the bubble) is priced under every 1F1B and GPipe split, and picked.
TEST(Replan, AnUnevenOnlyModelReplansIntoAShortEndInterleaving) {
  const PlanFile plan = TwoRankPipeline(7, 8, 4, 3);
  auto unit = ReplanForMeasuredCosts(plan, Window({0.01, 0.01}), /*memory_limit=*/0);
  ASSERT_TRUE(unit.ok()) << unit.status().ToString();
  const double modelled0 = 0.01 / unit->rank_scale[0], modelled1 = 0.01 / unit->rank_scale[1];
  auto rp = ReplanForMeasuredCosts(plan, Window({modelled0, modelled1}), /*memory_limit=*/0);
  ASSERT_TRUE(rp.ok()) << rp.status().ToString();
  EXPECT_EQ(rp->layout.schedule, ScheduleKind::kInterleaved) << rp->layout.ToString();
  EXPECT_EQ(rp->layout.vp, 2);
  EXPECT_TRUE(rp->layout.Uneven()) << rp->layout.ToString();
  EXPECT_LT(rp->best_step_s, rp->current_step_s);
}

}  // namespace
}  // namespace ptdp::tools

// --adapt's trial measure of a window: the median step, so that a trainer's first step (on a GPU:
// GEMM timing, cuDNN plans, the first cudaMallocs) cannot decide the trial alone.
namespace ptdp::tools {
namespace {

TEST(AdaptTrial, AWindowsStepIsItsMedianNotItsMean) {
  EXPECT_EQ(WindowStepSeconds({}), 0.0);
  EXPECT_DOUBLE_EQ(WindowStepSeconds({0.3}), 0.3);
  // A warm-up step 20x the others: the mean would be 0.625, the median is the steady 0.1.
  EXPECT_DOUBLE_EQ(WindowStepSeconds({2.0, 0.1, 0.1, 0.1}), 0.1);
  EXPECT_DOUBLE_EQ(WindowStepSeconds({0.4, 0.1, 0.2}), 0.2);
  EXPECT_DOUBLE_EQ(WindowStepSeconds({0.1, 0.2, 0.3, 0.9}), 0.25);
}

}  // namespace
}  // namespace ptdp::tools

// Candidates of another t, p, d with uneven stages (the planner's rule, core/parallel.h
// UnevenStageSplits): a 4-rank t1 p4 d1 run of a model whose output layer outweighs a
// transformer layer many times over (V 32768 on h 256: about 11 layers' logit GEMMs), one GPU per
// node (no tensor parallelism) and B 6 (no d 4), so the only other shape is t1 p2 d2.
namespace ptdp::tools {
namespace {

// A plan file's text read as `ptdp plan` writes it, with its layout's Program.
PlanFile PlanWithProgram(const std::string& text) {
  auto plan = PlanFromJson(ParseJson(text, "test plan").value(), /*require_program=*/false);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  plan->program = schedule::BuildProgram(plan->model, plan->layout).value();
  plan->has_program = true;
  return *plan;
}

PlanFile HeavyHeadPlan(const std::string& cluster = "cpu") {
  const std::string text = R"({"ptdp_plan_version": 2,
    "model": {"name": "heavy-head", "layers": 8, "hidden": 256, "heads": 4, "seq_len": 128,
              "vocab": 32768, "dropout": 0.0},
    "cluster": {"name": ")" +
                           cluster + R"(", "gpus": 4, "gpus_per_node": 1},
    "global_batch": 6,
    "layout": {"tp": 1, "pp": 4, "dp": 1, "mbs": 1, "vp": 1, "schedule": "1f1b",
               "recompute": "none", "scatter_gather": true}})";
  return PlanWithProgram(text);
}

// A window in which every world rank ran its stage at the cost model's price (factor 1: GPUs
// alike), from the factors a first re-plan measures for a window of 10 ms per rank.
runtime::MonitorReport AlikeGpusWindow(const PlanFile& plan) {
  const RankGrid grid = RankGrid::Create(plan.layout.tp, plan.layout.dp, plan.layout.pp).value();
  runtime::MonitorReport report;
  for (int r = 0; r < grid.WorldSize(); ++r) {
    runtime::RankWindow w;
    w.rank = r;
    w.coord = grid.Coord(r);
    w.steps = 2;
    w.stage_compute_s = 0.02;
    report.ranks.push_back(w);
  }
  auto first = ReplanForMeasuredCosts(plan, report, /*memory_limit=*/0);
  EXPECT_TRUE(first.ok()) << first.status().ToString();
  for (runtime::RankWindow& w : report.ranks) {
    w.stage_compute_s = 2 * 0.01 / first->rank_scale[static_cast<size_t>(w.rank)];
  }
  return report;
}

// The most memory any pipeline rank of `c` holds (the ledger the re-planner checks).
Bytes PeakMemory(const PlanFile& plan, const ParallelConfig& c) {
  const Program program = schedule::BuildProgram(plan.model, c).value();
  Bytes peak = 0;
  for (int r = 0; r < c.pp; ++r) {
    peak = std::max(peak, MemoryOf(plan.model, c, program, r).Total());
  }
  return peak;
}

// The other shapes' 1F1B and GPipe splits are exactly the even one and core's UnevenStageSplits
// for their p, each microbatch size alike; interleaved ones take InterleavedShortEnds'.
TEST(Replan, OtherShapesTakeThePlannersUnevenSplits) {
  const PlanFile plan = HeavyHeadPlan();
  using Splits = std::set<std::pair<int, int>>;
  Splits want = {{0, 0}};
  for (const auto& s : UnevenStageSplits(plan.model, 2)) want.insert(s);
  // K = 8 (the head's 11 layers, clamped): first q - a and last q - b with a, b <= 8; on 2 ranks
  // no stage lies between, so they sum to the 8 layers, each at least 1, the even 4/4 left out.
  EXPECT_EQ(want, (Splits{{0, 0}, {1, 7}, {2, 6}, {3, 5}, {5, 3}, {6, 2}, {7, 1}}));
  std::map<std::pair<int, ScheduleKind>, Splits> flat;  // per (mbs, schedule)
  int interleaved = 0;
  for (const ParallelConfig& c : OtherShapeCandidates(plan)) {
    ASSERT_TRUE(c.Validate(plan.model).ok()) << c.ToString();
    ASSERT_EQ(std::make_tuple(c.tp, c.pp, c.dp), std::make_tuple(1, 2, 2)) << c.ToString();
    if (c.vp > 1) {
      ++interleaved;
      continue;
    }
    flat[{c.mbs, c.schedule}].insert({c.first_stage_layers, c.last_stage_layers});
  }
  ASSERT_EQ(flat.size(), 4u);  // mbs 1 and 3, 1F1B and GPipe
  for (const auto& [key, splits] : flat) EXPECT_EQ(splits, want);
  // Interleaving on 2 ranks needs m >= 2 (mbs 1): v = 2 (4 layers a rank) and v = 4, even only (8
  // layers + 1 or 2 do not divide into 4 or 8 virtual stages).
  EXPECT_EQ(interleaved, 2);
}

// The running p4 with its best split is priced far behind p2 d2, whose best split gives the head's
// stage 1 layer of 8: the re-plan proposes that uneven layout, shorter than every layout with the
// running t, p, d and than the even p2 d2 (the best once every uneven one is rejected).
TEST(Replan, TheBestOtherShapeIsUnevenWithTheHeadsStageLighter) {
  const PlanFile plan = HeavyHeadPlan();
  const runtime::MonitorReport window = AlikeGpusWindow(plan);
  auto rp = ReplanForMeasuredCosts(plan, window, /*memory_limit=*/0);
  ASSERT_TRUE(rp.ok()) << rp.status().ToString();
  ASSERT_TRUE(rp->other.has_value());
  const ParallelConfig& other = *rp->other;
  EXPECT_EQ(std::make_tuple(other.tp, other.pp, other.dp), std::make_tuple(1, 2, 2));
  ASSERT_TRUE(other.Uneven()) << other.ToString();
  const std::vector<int> counts = StageLayerCounts(plan.model, other);
  EXPECT_LT(counts.back(), counts.front()) << other.ToString();
  EXPECT_LT(rp->other_step_s, rp->best_step_s);  // a relaunch, not a switch, is proposed

  std::vector<std::string> uneven;
  for (const ParallelConfig& c : OtherShapeCandidates(plan)) {
    if (c.Uneven()) uneven.push_back(c.ToString());
  }
  auto even = ReplanForMeasuredCosts(plan, window, /*memory_limit=*/0, uneven);
  ASSERT_TRUE(even.ok()) << even.status().ToString();
  ASSERT_TRUE(even->other.has_value());
  EXPECT_FALSE(even->other->Uneven()) << even->other->ToString();
  EXPECT_LT(even->other_candidates, rp->other_candidates);
  // 0.4386 s (7/1) against 0.4765 s (the even split interleaved, v = 4) with the cpu profile.
  EXPECT_LT(rp->other_step_s, 0.95 * even->other_step_s) << even->other->ToString();
}

// A mixture at t2 d2 ep 2 (its experts over the tensor group, etp 2): the other shapes keep ep 2
// where d holds it and split the experts over their own tensor group (etp follows t), as this
// runtime runs them; so t1 p2 d2 and t1 d4 are among them, and no shape whose d cannot hold ep 2.
TEST(Replan, OtherShapesOfAMixtureKeepItsExpertParallelism) {
  const std::string text = R"({"ptdp_plan_version": 2,
    "model": {"name": "moe", "layers": 4, "hidden": 64, "heads": 4, "seq_len": 32, "vocab": 256,
              "dropout": 0.0, "swiglu": true, "linear_bias": false, "moe_experts": 4,
              "moe_topk": 2},
    "cluster": {"name": "cpu", "gpus": 4, "gpus_per_node": 4},
    "global_batch": 8,
    "layout": {"tp": 2, "pp": 1, "dp": 2, "ep": 2, "etp": 2, "mbs": 1, "vp": 1,
               "schedule": "1f1b", "recompute": "none", "scatter_gather": true,
               "sequence_parallel": true}})";
  const PlanFile plan = PlanWithProgram(text);
  std::set<std::tuple<int, int, int>> shapes;
  for (const ParallelConfig& c : OtherShapeCandidates(plan)) {
    ASSERT_TRUE(c.Validate(plan.model).ok()) << c.ToString();
    EXPECT_EQ(c.ep, 2) << c.ToString();
    EXPECT_EQ(c.ExpertTp(), c.tp) << c.ToString();
    EXPECT_EQ(c.dp % 2, 0) << c.ToString();
    shapes.insert({c.tp, c.pp, c.dp});
  }
  EXPECT_TRUE(shapes.count({1, 2, 2}) == 1 && shapes.count({1, 1, 4}) == 1);
}

// The memory limit still holds for the uneven candidates: a limit one byte under the chosen
// layout's peak picks another that fits, and a limit nothing fits leaves no other shape.
TEST(Replan, UnevenOtherShapesKeepTheMemoryLimit) {
  const PlanFile plan = HeavyHeadPlan();
  const runtime::MonitorReport window = AlikeGpusWindow(plan);
  auto free = ReplanForMeasuredCosts(plan, window, /*memory_limit=*/0);
  ASSERT_TRUE(free.ok() && free->other.has_value());
  const Bytes limit = PeakMemory(plan, *free->other) - 1;
  auto tight = ReplanForMeasuredCosts(plan, window, limit);
  ASSERT_TRUE(tight.ok()) << tight.status().ToString();
  EXPECT_LT(tight->other_candidates, free->other_candidates);
  if (tight->other) {
    EXPECT_NE(tight->other->ToString(), free->other->ToString());
    EXPECT_LE(PeakMemory(plan, *tight->other), limit) << tight->other->ToString();
  }
  auto none = ReplanForMeasuredCosts(plan, window, /*memory_limit=*/1);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->other_candidates, 0);
  EXPECT_EQ(none->candidates, 0);
  EXPECT_FALSE(none->other.has_value());
}

// Bad input: a plan whose cluster is no preset or file fails the re-plan with one line naming
// it; a window's rank outside the world is ignored (it takes the fastest rank's factor), not read.
TEST(Replan, BadInputFailsWithOneLineOrIsIgnored) {
  const PlanFile bad = HeavyHeadPlan("no-such-cluster");
  auto rp = ReplanForMeasuredCosts(bad, runtime::MonitorReport(), /*memory_limit=*/0);
  ASSERT_FALSE(rp.ok());
  EXPECT_NE(rp.status().message().find("no-such-cluster"), std::string::npos)
      << rp.status().message();
  EXPECT_EQ(rp.status().message().find('\n'), std::string::npos) << rp.status().message();

  const PlanFile plan = HeavyHeadPlan();
  runtime::MonitorReport window = AlikeGpusWindow(plan);
  auto good = ReplanForMeasuredCosts(plan, window, /*memory_limit=*/0);
  runtime::RankWindow stray = window.ranks.back();
  stray.rank = 7;  // the world has 4
  stray.stage_compute_s *= 100;
  window.ranks.push_back(stray);
  auto with_stray = ReplanForMeasuredCosts(plan, window, /*memory_limit=*/0);
  ASSERT_TRUE(good.ok() && with_stray.ok());
  EXPECT_EQ(with_stray->rank_scale, good->rank_scale);
  EXPECT_EQ(with_stray->other->ToString(), good->other->ToString());
}

// A t1 p4 d1 1F1B plan of 24 layers on 4 ranks, the shape of the H200 adapt stage; B = 32, so that
// with a few microbatches in flight the slowest stage sets the pace (with B = 8 and m = 2 the
// fill and drain dominate, and loading the two end stages wins whatever the middle holds).
PlanFile FourStagePlan() {
  const std::string text = R"({"ptdp_plan_version": 2,
    "model": {"name": "four-stage", "layers": 24, "hidden": 64, "heads": 4, "seq_len": 32,
              "vocab": 256, "dropout": 0.0},
    "cluster": {"name": "cpu", "gpus": 4, "gpus_per_node": 4},
    "global_batch": 32,
    "layout": {"tp": 1, "pp": 4, "dp": 1, "mbs": 1, "vp": 1, "schedule": "1f1b",
               "recompute": "none", "scatter_gather": true}})";
  return PlanWithProgram(text);
}

// The H200 case of 2026-11-27 (docs/cuda.md): world rank 1, a middle stage, runs 3x slower. The
// first/last form moves the middle stages together (ranks 1 and 2 alike), so the fast rank 2
// idled; the balanced per-stage splits give rank 1 fewer layers than rank 2, and the re-plan
// picks one, shorter than the best first/last split (the same re-plan without them).
TEST(Replan, ASlowMiddleStageGetsFewerLayersThanItsNeighbour) {
  const PlanFile plan = FourStagePlan();
  runtime::MonitorReport window = AlikeGpusWindow(plan);
  window.ranks[1].stage_compute_s *= 3;
  const auto start = std::chrono::steady_clock::now();
  auto rp = ReplanForMeasuredCosts(plan, window, /*memory_limit=*/0);
  const double took_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(rp.ok()) << rp.status().ToString();
  std::printf("re-plan of 4 stages with rank 1 slowed 3x: %d layouts simulated in %.3f s\n",
              rp->candidates, took_s);
  const std::vector<int> counts = StageLayerCounts(plan.model, rp->layout);
  std::printf("best: %s (%.4f s against %.4f s running)\n", rp->layout.ToString().c_str(),
              rp->best_step_s, rp->current_step_s);
  EXPECT_FALSE(rp->layout.stage_layers.empty()) << rp->layout.ToString();
  EXPECT_LT(counts[1], counts[2]) << rp->layout.ToString();
  EXPECT_LT(rp->best_step_s, rp->current_step_s);
  // The per-stage splits, rejected by name, leave the first/last form's best: ranks 1 and 2 alike,
  // and longer.
  std::vector<std::string> balanced;
  const std::vector<ParallelConfig> per_stage =
      BalancedStageCandidates(plan, LoadCluster("cpu", 4).value(), rp->rank_scale);
  for (const ParallelConfig& c : per_stage) {
    ASSERT_TRUE(c.Validate(plan.model).ok()) << c.ToString();
    ASSERT_FALSE(c.stage_layers.empty()) << c.ToString();
    balanced.push_back(c.ToString());
  }
  // Tens, not the 1771 compositions of 24 layers on 4 stages per microbatch size and schedule:
  // 6 microbatch sizes (B 32) x 2 schedules x (the balanced split + 6 neighbours) at most.
  EXPECT_LE(per_stage.size(), 6u * 2u * 7u);
  auto only_first_last = ReplanForMeasuredCosts(plan, window, /*memory_limit=*/0, balanced);
  ASSERT_TRUE(only_first_last.ok()) << only_first_last.status().ToString();
  const double best_first_last_s = only_first_last->best_step_s;
  const std::vector<int> fl_counts = StageLayerCounts(plan.model, only_first_last->layout);
  EXPECT_EQ(fl_counts[1], fl_counts[2]) << only_first_last->layout.ToString();
  EXPECT_LT(rp->best_step_s, best_first_last_s) << only_first_last->layout.ToString();
}

// A switch's trial, from the H200 call of 2026-11-27, late evening (bench/gpu/adapt_stage.sh, 4 MPS
// ranks): the re-plan predicted 61.5% shorter; the window before measured a median step of 0.449 s,
// the one after 0.335 s, whose first step took 2.6507 s; the state move took 3.505 s.
TEST(AdaptDecision, ATrialMeasuresTheRealisedShareAndTheCost) {
  const TrialLesson l = LearnFromTrial(0.615, 0.449, 0.335, 3.505, 2.6507);
  EXPECT_NEAR(l.realised_gain, 1 - 0.335 / 0.449, 1e-12);
  EXPECT_NEAR(l.trust, (1 - 0.335 / 0.449) / 0.615, 1e-12);
  EXPECT_NEAR(l.first_step_excess_s, 2.6507 - 0.335, 1e-12);
  EXPECT_NEAR(l.cost_s, 3.505 + 2.6507 - 0.335, 1e-12);
  // A switch that did better than predicted earns no more than full trust; a first step faster
  // than the median costs nothing; a prediction of no gain earns none.
  EXPECT_EQ(LearnFromTrial(0.1, 1.0, 0.5, 0.2, 0.4).trust, 1.0);
  EXPECT_EQ(LearnFromTrial(0.1, 1.0, 0.5, 0.2, 0.4).cost_s, 0.2);
  EXPECT_EQ(LearnFromTrial(0.0, 1.0, 0.5, 0.2, 0.4).trust, 0.0);
}

// That run's next re-plan predicted 28.1% with the trust it had earned (0.41): over the threshold,
// but 16 steps cannot repay the 5.8 s the first switch cost; a long run can. Before any switch
// has been measured the threshold alone decides.
TEST(AdaptDecision, ASwitchMustPassTheThresholdAndRepayItsCost) {
  const TrialLesson l = LearnFromTrial(0.615, 0.449, 0.335, 3.505, 2.6507);
  const SwitchVerdict short_run = JudgeSwitch(0.281, 0.1, l.trust, l.cost_s, 0.335, 16);
  EXPECT_NEAR(short_run.discounted_gain, 0.281 * l.trust, 1e-12);
  EXPECT_NEAR(short_run.repaid_s, 0.281 * l.trust * 0.335 * 16, 1e-12);
  EXPECT_GT(short_run.discounted_gain, 0.1);
  EXPECT_FALSE(short_run.go);
  EXPECT_NE(short_run.why.find("under the last switch's cost of 5.821 s"), std::string::npos)
      << short_run.why;
  EXPECT_TRUE(JudgeSwitch(0.281, 0.1, l.trust, l.cost_s, 0.335, 1000).go);
  const SwitchVerdict low = JudgeSwitch(0.2, 0.1, l.trust, -1, 0.335, 1000);
  EXPECT_FALSE(low.go);  // 0.2 x 0.41 = 8%
  EXPECT_EQ(low.why, "staying (under --adapt-threshold)");
  const SwitchVerdict first = JudgeSwitch(0.615, 0.1, 1.0, -1, 0.449, 1);
  EXPECT_TRUE(first.go);
  EXPECT_EQ(first.why, "switching");
  EXPECT_FALSE(JudgeSwitch(0.615, 0.1, 1.0, 0.5, 0.449, 0).go);  // no step left to repay it
}

}  // namespace
}  // namespace ptdp::tools

namespace ptdp::tools {
namespace {

// bench/gpu/adapt_stage.sh's model and plan (24 layers, h 768, s 1024, B 16, t1 p4 d1, mbs 1) on
// the shipped H200 profile, whole or as four MPS clients of a quarter of it (device_share), with
// rank 1 slowed 3x.
PlanFile AdaptStagePlan(const std::string& profile_path) {
  const std::string text = R"({
    "ptdp_plan_version": 2,
    "model": {"name": "adapt", "layers": 24, "hidden": 768, "heads": 12, "ffn_hidden": 3072,
              "seq_len": 1024, "vocab": 50257, "dropout": 0.0},
    "cluster": {"name": ")" +
                           profile_path + R"(", "gpus": 4, "gpus_per_node": 1},
    "global_batch": 16,
    "layout": {"tp": 1, "pp": 4, "dp": 1, "mbs": 1, "vp": 1, "schedule": "1f1b",
               "recompute": "none", "scatter_gather": true, "precision": "bf16",
               "grad_accumulation_fusion": true, "fused_attention": true}})";
  auto plan = PlanFromJson(ParseJson(text, "test plan").value(), /*require_program=*/false);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  plan->software = LoadSoftware("ptdp").value();  // the runtime adapt_stage.sh runs
  plan->program = schedule::BuildProgram(plan->model, plan->layout).value();
  plan->has_program = true;
  return *plan;
}

// The re-plan on the quarter promises less than on the whole GPU (its GEMMs saturate sooner, so
// the best layout's larger microbatch gains less): 43.6% against 55.6% shorter, where call 2 of
// 2026-11-27 (this model, these ranks, the whole GPU's prices) predicted 50.2% and realised 23.0%.
TEST(Replan, OnAShareOfTheGpuTheReplanPromisesLess) {
  const HardwareProfile h200 = LoadProfile("h200-measured").value();
  std::vector<double> shorter;
  for (double share : {1.0, 0.25}) {
    HardwareProfile p = h200;
    if (share < 1) p.device_share = {share, "test: four MPS clients"};
    const std::string path =
        ::testing::TempDir() + "replan_share_" + std::to_string(int(100 * share)) + ".json";
    { std::ofstream(path) << HardwareProfileToJson(p).dump(); }
    const PlanFile plan = AdaptStagePlan(path);
    runtime::MonitorReport window = AlikeGpusWindow(plan);
    window.ranks[1].stage_compute_s *= 3;
    auto rp = ReplanForMeasuredCosts(plan, window, /*memory_limit=*/0);
    ASSERT_TRUE(rp.ok()) << rp.status().ToString();
    std::printf("share %.2f: best %s, %.4f s against %.4f s running (%.1f%% shorter)\n", share,
                rp->layout.ToString().c_str(), rp->best_step_s, rp->current_step_s,
                100 * (1 - rp->best_step_s / rp->current_step_s));
    const std::vector<int> counts = StageLayerCounts(plan.model, rp->layout);
    EXPECT_LT(counts[1], counts[0]) << rp->layout.ToString();  // the slow rank's layers go
    shorter.push_back(1 - rp->best_step_s / rp->current_step_s);
  }
  EXPECT_GT(shorter[1], 0.2);
  EXPECT_LT(shorter[1], shorter[0] - 0.05);
}

}  // namespace
}  // namespace ptdp::tools
