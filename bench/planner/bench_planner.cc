// Speed of the layout search. Target (issue 2): BM_Search1T under 1 s on one core.
//   build-*/bench/planner/bench_planner
#include <benchmark/benchmark.h>

#include "core/cluster.h"
#include "core/model.h"
#include "planner/search.h"
#include "simulator/refine.h"

namespace ptdp::planner {
namespace {

void BM_Search1T(benchmark::State& state) {
  auto m = LoadModel("gpt-1t");
  auto c = LoadCluster("selene", 3072);
  if (!m.ok() || !c.ok()) {
    state.SkipWithError("cannot load gpt-1t / selene");
    return;
  }
  SearchOptions o;
  o.global_batch = 3072;
  int64_t considered = 0, feasible = 0;
  for (auto _ : state) {
    auto r = Search(*m, *c, o);
    if (!r.ok()) {
      state.SkipWithError(r.status().message().c_str());
      return;
    }
    considered = r->considered;
    feasible = r->feasible;
    benchmark::DoNotOptimize(r->top.front().prediction.iteration_s);
  }
  state.counters["layouts"] = double(considered);
  state.counters["scored"] = double(feasible);
  state.counters["layouts_per_s"] =
      benchmark::Counter(double(considered), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Search1T)->Unit(benchmark::kMillisecond);

// What `ptdp plan` does by default: the search, then the top 10 replayed by the event-driven
// simulator and re-ranked. Target (issue 3): under 2 s on one core.
void BM_Search1TWithSimulatedTop10(benchmark::State& state) {
  auto m = LoadModel("gpt-1t");
  auto c = LoadCluster("selene", 3072);
  if (!m.ok() || !c.ok()) {
    state.SkipWithError("cannot load gpt-1t / selene");
    return;
  }
  SearchOptions o;
  o.global_batch = 3072;
  o.refine_top = 10;
  o.refiner = sim::SimulatedPipelineTime;
  for (auto _ : state) {
    auto r = Search(*m, *c, o);
    if (!r.ok()) {
      state.SkipWithError(r.status().message().c_str());
      return;
    }
    benchmark::DoNotOptimize(r->top.front().prediction.iteration_s);
  }
}
BENCHMARK(BM_Search1TWithSimulatedTop10)->Unit(benchmark::kMillisecond);

// One layout's full evaluation (cost table, prediction, every stage's memory).
void BM_EvaluateOneLayout(benchmark::State& state) {
  auto m = LoadModel("gpt-1t");
  auto c = LoadCluster("selene", 3072);
  ParallelConfig l;
  l.tp = 8;
  l.pp = 64;
  l.dp = 6;
  l.mbs = 1;
  l.global_batch = 3072;
  l.recompute = Recompute::kFull;
  l.precision = c->profile.precision;
  if (!Evaluate(*m, *c, l).ok()) state.SkipWithError("the layout does not evaluate");
  for (auto _ : state) {
    auto r = Evaluate(*m, *c, l);
    benchmark::DoNotOptimize(r.ok());
  }
}
BENCHMARK(BM_EvaluateOneLayout)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace ptdp::planner
