// Simulator speed: one iteration of the 1T model's pipeline on 3072 GPUs (the paper's layout,
// p = 64, m = 512; and interleaved v = 2), one representative GPU per pipeline rank. Reports
// simulated events per second (goal: >= 10 million per second) and instructions per second.
// Costs are a hand-made table of the right shape (per-chunk times of the order of the 1T model's,
// finite links so that every message goes through the network model).
#include <benchmark/benchmark.h>

#include "core/cluster.h"
#include "schedule/schedule.h"
#include "simulator/pipeline_replay.h"
#include "simulator/refine.h"
#include "simulator/simulator.h"

namespace ptdp::sim {
namespace {

Program OneTrillionProgram(ScheduleKind kind, int vp) {
  auto c = schedule::GenerateSchedule(kind, 64, 512, vp);
  // b s h / t bytes at 2 bytes: 1 x 2048 x 25600 / 8 x 2.
  auto p = schedule::Lower(*c, 2048LL * 25600 / 8 * 2, true);
  return *p;
}

costmodel::CostTable Costs(int vp, bool ideal) {
  // About 0.05 s forward and 0.11 s backward with recomputation per stage and microbatch.
  auto t = UniformCosts(64, vp, 0.05 / vp, 0.11 / vp, 200LL << 20);
  if (!ideal) t.p2p_link.assign(64, costmodel::LinkCost{5e-6, 25e9, true});
  t.dp_allreduce.assign(64, 0.3);
  t.optimizer.assign(64, 0.02);
  return t;
}

void Run(benchmark::State& state, ScheduleKind kind, int vp, bool ideal) {
  const Program p = OneTrillionProgram(kind, vp);
  const costmodel::CostTable t = Costs(vp, ideal);
  int64_t events = 0;
  for (auto _ : state) {
    auto r = Simulate(p, t);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
    events += r->events;
    benchmark::DoNotOptimize(r->iteration_ns);
  }
  state.counters["events_per_s"] = benchmark::Counter(double(events), benchmark::Counter::kIsRate);
  state.counters["instructions_per_s"] = benchmark::Counter(
      double(InstructionCount(p)) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["events_per_iter"] = double(events) / std::max<int64_t>(1, state.iterations());
}

void BM_Simulate_1T_1F1B_p64_m512(benchmark::State& s) {
  Run(s, ScheduleKind::k1F1B, 1, false);
}
void BM_Simulate_1T_Interleaved_p64_m512_v2(benchmark::State& s) {
  Run(s, ScheduleKind::kInterleaved, 2, false);
}
void BM_Simulate_1T_1F1B_p64_m512_ideal(benchmark::State& s) {
  Run(s, ScheduleKind::k1F1B, 1, true);
}
void BM_Simulate_1T_GPipe_p64_m512(benchmark::State& s) {
  Run(s, ScheduleKind::kGPipe, 1, false);
}
BENCHMARK(BM_Simulate_1T_1F1B_p64_m512)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Simulate_1T_Interleaved_p64_m512_v2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Simulate_1T_1F1B_p64_m512_ideal)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Simulate_1T_GPipe_p64_m512)->Unit(benchmark::kMillisecond);

// Generation + lowering + validation of the interleaved 1T program.
void BM_BuildAndValidate_1T_Interleaved(benchmark::State& state) {
  for (auto _ : state) {
    Program p = OneTrillionProgram(ScheduleKind::kInterleaved, 2);
    Status s = schedule::Validate(p);
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(p.ranks.data());
  }
}
BENCHMARK(BM_BuildAndValidate_1T_Interleaved)->Unit(benchmark::kMillisecond);

// What the planner's refiner pays per layout: Program generation and lowering plus the replay, with
// the cost model's table for the paper's 1T layouts (the table itself is built by the planner).
// With `replayer`: the planner's replay (pipeline_replay.h) instead, its shape compiled by the
// first iteration and reused, as the planner reuses it across the layouts of one shape.
void RunRefine(benchmark::State& state, ScheduleKind kind, int vp, bool replayer = false) {
  auto model = LoadModel("gpt-1t");
  auto cluster = LoadCluster("selene", 3072);
  if (!model.ok() || !cluster.ok()) {
    state.SkipWithError("gpt-1t or selene preset missing");
    return;
  }
  ParallelConfig c;
  c.tp = 8;
  c.pp = 64;
  c.dp = 6;
  c.vp = vp;
  c.schedule = kind;
  c.recompute = Recompute::kFull;
  c.global_batch = 3072;
  const costmodel::CostTable t = costmodel::BuildCostTable(*model, *cluster, c);
  PipelineReplayer replay;
  for (auto _ : state) {
    auto r = replayer ? replay.Time(*model, *cluster, c, t)
                      : SimulatedPipelineTime(*model, *cluster, c, t);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(r->total);
  }
  if (replayer && replay.replays() > 0) {
    state.counters["shared_rounds"] = double(replay.shared_rounds()) / double(replay.replays());
  }
}
void BM_Refine_1T_1F1B(benchmark::State& s) {
  RunRefine(s, ScheduleKind::k1F1B, 1);
}
void BM_Refine_1T_Interleaved_v2(benchmark::State& s) {
  RunRefine(s, ScheduleKind::kInterleaved, 2);
}
BENCHMARK(BM_Refine_1T_1F1B)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Refine_1T_Interleaved_v2)->Unit(benchmark::kMillisecond);
void BM_Replay_1T_1F1B(benchmark::State& s) {
  RunRefine(s, ScheduleKind::k1F1B, 1, true);
}
void BM_Replay_1T_Interleaved_v2(benchmark::State& s) {  // flows share ports: the network model
  RunRefine(s, ScheduleKind::kInterleaved, 2, true);
}
BENCHMARK(BM_Replay_1T_1F1B)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Replay_1T_Interleaved_v2)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ptdp::sim

BENCHMARK_MAIN();
