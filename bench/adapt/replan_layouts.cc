// The cost of one `ptdp train --adapt` re-plan (tools/train_replan.cc ReplanForMeasuredCosts):
// layouts simulated with the running t, p, d and with others, the best of another t, p, d, and
// the re-plan's wall time (the median of `rounds` calls), for a few plans on a window in which
// every rank ran at the cost model's price (GPUs alike). Built and run by replan_layouts.sh, once
// against the tree's train_replan.cc and once against an earlier revision's, so the two print side
// by side. usage: replan_layouts LABEL ROUNDS
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/rank_grid.h"
#include "schedule/schedule.h"
#include "tools/train_adapt.h"

namespace {

using ptdp::PlanFile;

struct Case {
  const char* name;
  int layers, hidden, vocab, seq_len, global_batch, tp, pp, dp, gpus_per_node;
};

// bench/adapt/bench.sh's model (8 layers, h 128, V 256, s 128, B 8) on 2 and 4 ranks, started in
// its t1 p2 (d 1 or 2) and in another shape, and tests/tools/replan_test.cc's HeavyHeadPlan (V
// 32768 on h 256, B 6, one GPU per node).
const Case kCases[] = {
    {"bench-adapt t1p2d1", 8, 128, 256, 128, 8, 1, 2, 1, 8},
    {"bench-adapt t1p1d2", 8, 128, 256, 128, 8, 1, 1, 2, 8},
    {"bench-adapt t1p2d2", 8, 128, 256, 128, 8, 1, 2, 2, 8},
    {"bench-adapt t1p4d1", 8, 128, 256, 128, 8, 1, 4, 1, 8},
    {"heavy-head t1p4d1", 8, 256, 32768, 128, 6, 1, 4, 1, 1},
};

PlanFile MakePlan(const Case& k) {
  const std::string text =
      R"({"ptdp_plan_version": 2, "model": {"name": "bench", "layers": )" +
      std::to_string(k.layers) + R"(, "hidden": )" + std::to_string(k.hidden) +
      R"(, "heads": 4, "seq_len": )" + std::to_string(k.seq_len) + R"(, "vocab": )" +
      std::to_string(k.vocab) + R"(, "dropout": 0.0}, "cluster": {"name": "cpu", "gpus": )" +
      std::to_string(k.tp * k.pp * k.dp) + R"(, "gpus_per_node": )" +
      std::to_string(k.gpus_per_node) + R"(}, "global_batch": )" + std::to_string(k.global_batch) +
      R"(, "layout": {"tp": )" + std::to_string(k.tp) + R"(, "pp": )" + std::to_string(k.pp) +
      R"(, "dp": )" + std::to_string(k.dp) +
      R"(, "mbs": 1, "vp": 1, "schedule": "1f1b", "recompute": "none", "scatter_gather": true}})";
  auto plan = ptdp::PlanFromJson(ptdp::ParseJson(text, k.name).value(), false);
  if (!plan.ok()) {
    std::fprintf(stderr, "%s: %s\n", k.name, plan.status().ToString().c_str());
    std::exit(1);
  }
  plan->program = ptdp::schedule::BuildProgram(plan->model, plan->layout).value();
  plan->has_program = true;
  return *plan;
}

// A window in which every world rank ran its stage at the cost model's price: a first re-plan of
// a window of 10 ms per rank gives each rank's factor, which the second window divides out.
ptdp::runtime::MonitorReport AlikeGpusWindow(const PlanFile& plan) {
  const ptdp::ParallelConfig& c = plan.layout;
  const ptdp::RankGrid grid = ptdp::RankGrid::Create(c.tp, c.dp, c.pp).value();
  ptdp::runtime::MonitorReport report;
  for (int r = 0; r < grid.WorldSize(); ++r) {
    ptdp::runtime::RankWindow w;
    w.rank = r;
    w.coord = grid.Coord(r);
    w.steps = 2;
    w.stage_compute_s = 0.02;
    report.ranks.push_back(w);
  }
  const ptdp::tools::Replan first =
      ptdp::tools::ReplanForMeasuredCosts(plan, report, /*memory_limit=*/0).value();
  for (ptdp::runtime::RankWindow& w : report.ranks) {
    w.stage_compute_s = 2 * 0.01 / first.rank_scale[static_cast<size_t>(w.rank)];
  }
  return report;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::atoi(argv[2]) < 1) {
    std::fprintf(stderr, "usage: replan_layouts LABEL ROUNDS (ROUNDS >= 1)\n");
    return 2;
  }
  const int rounds = std::atoi(argv[2]);
  for (const Case& k : kCases) {
    const PlanFile plan = MakePlan(k);
    const ptdp::runtime::MonitorReport window = AlikeGpusWindow(plan);
    std::vector<double> wall_ms;
    ptdp::Result<ptdp::tools::Replan> rp = ptdp::Status::Invalid("not run");
    for (int i = 0; i < rounds; ++i) {
      const auto start = std::chrono::steady_clock::now();
      rp = ptdp::tools::ReplanForMeasuredCosts(plan, window, /*memory_limit=*/0);
      wall_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
      if (!rp.ok()) {
        std::fprintf(stderr, "%s: %s\n", k.name, rp.status().ToString().c_str());
        return 1;
      }
    }
    std::sort(wall_ms.begin(), wall_ms.end());
    char other_s[32] = "";
    if (rp->other) std::snprintf(other_s, sizeof other_s, "%.4f ", rp->other_step_s);
    const std::string other = rp->other ? other_s + rp->other->ToString() : "(none shorter)";
    std::printf(
        "%-6s %-18s layouts: running t,p,d %3d, other %3d; re-plan %6.2f ms; step s: running "
        "%.4f, best same t,p,d %.4f, best other %s\n",
        argv[1], k.name, rp->candidates, rp->other_candidates, wall_ms[wall_ms.size() / 2],
        rp->current_step_s, rp->best_step_s, other.c_str());
  }
  return 0;
}
