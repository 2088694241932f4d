// Speed of the layout search. Targets: BM_Search1T under 1 s on one core (issue 2); the search with
// every option and every feasible layout simulated, BM_Search1TAllOptionsEverySimulated/1, under
// 1 s on one core (issue 15); BM_Search1TAllOptionsEverySimulatedDefaultStack/1 is the same with
// the default software profile (megatron-core), as `ptdp plan` runs it.
//   build-*/bench/planner/bench_planner
#include <benchmark/benchmark.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/model.h"
#include "core/software.h"
#include "planner/search.h"
#include "planner/software_search.h"
#include "simulator/pipeline_replay.h"
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

// Mixtures of experts on H100s with every option, closed form, every expert split ExpertSplits
// enumerates (docs/moe.md). No target; the counters say how many layouts the expert splits add.
void SearchMixture(benchmark::State& state, const char* model, int gpus, int64_t global_batch) {
  auto m = LoadModel(model);
  auto c = LoadCluster("dgx-h100", gpus);
  auto sw = LoadSoftware("megatron-core");
  if (!m.ok() || !c.ok() || !sw.ok()) {
    state.SkipWithError("cannot load the model / dgx-h100 / megatron-core");
    return;
  }
  c->software = *sw;
  SearchOptions o;
  o.global_batch = global_batch;
  o.selective_recompute = o.sequence_parallel = o.distributed_optimizer = true;
  o.grad_accumulation_fusion = o.fused_attention = true;
  int64_t considered = 0;
  for (auto _ : state) {
    auto r = Search(*m, *c, o);
    if (!r.ok()) {
      state.SkipWithError(r.status().message().c_str());
      return;
    }
    considered = r->considered;
    benchmark::DoNotOptimize(r->top.front().prediction.iteration_s);
  }
  state.counters["layouts"] = double(considered);
  state.counters["layouts_per_s"] =
      benchmark::Counter(double(considered), benchmark::Counter::kIsIterationInvariantRate);
}

// Qwen3-235B-A22B (128 experts) on 256 GPUs.
void BM_SearchMoe235B(benchmark::State& state) {
  SearchMixture(state, "qwen3-235b-a22b", 256, 2048);
}
BENCHMARK(BM_SearchMoe235B)->Unit(benchmark::kMillisecond);

// DeepSeek-V3 (256 experts, two kinds of layer, multi-latent attention, a prediction depth) on
// 1024 GPUs: every rank's memory is priced (the ranks between are unlike).
void BM_SearchDeepSeekV3(benchmark::State& state) {
  SearchMixture(state, "deepseek-v3", 1024, 8192);
}
BENCHMARK(BM_SearchDeepSeekV3)->Unit(benchmark::kMillisecond);

SearchOptions EveryOption1T() {
  SearchOptions o;
  o.global_batch = 3072;
  o.selective_recompute = o.sequence_parallel = o.distributed_optimizer = true;
  o.grad_accumulation_fusion = o.fused_attention = true;
  return o;
}

// The search with every option below, closed form only: the part of the next benchmark that is
// not the replays.
void BM_Search1TAllOptionsClosedForm(benchmark::State& state) {
  auto m = LoadModel("gpt-1t");
  auto c = LoadCluster("selene", 3072);
  if (!m.ok() || !c.ok()) {
    state.SkipWithError("cannot load gpt-1t / selene");
    return;
  }
  const SearchOptions o = EveryOption1T();
  for (auto _ : state) {
    auto r = Search(*m, *c, o);
    if (!r.ok()) {
      state.SkipWithError(r.status().message().c_str());
      return;
    }
    benchmark::DoNotOptimize(r->top.front().prediction.iteration_s);
  }
}
BENCHMARK(BM_Search1TAllOptionsClosedForm)->Unit(benchmark::kMillisecond);

// What SearchEverySimulated searches: a model on `gpus` GPUs of a cluster, with `options`, for a
// cluster that runs `software` (empty: the default-constructed profile, no stack facts: nothing
// overlapped; otherwise its search defaults too, as `ptdp plan --software` sets them).
struct EverySimulatedCase {
  const char* model;
  const char* cluster;
  int gpus;
  SearchOptions options;
  std::string software;
};

// The full search with `k.options`, every layout that fits replayed by the simulator
// (sim::PipelineReplayer) and ranked by it, as `ptdp plan` does, on state.range(0) threads.
void SearchEverySimulated(benchmark::State& state, const EverySimulatedCase& k) {
  auto m = LoadModel(k.model);
  auto c = LoadCluster(k.cluster, k.gpus);
  if (!m.ok() || !c.ok()) {
    state.SkipWithError("cannot load the model / cluster");
    return;
  }
  SearchOptions o = k.options;
  if (!k.software.empty()) {
    auto sw = LoadSoftware(k.software);
    if (!sw.ok()) {
      state.SkipWithError(sw.status().message().c_str());
      return;
    }
    c->software = *sw;
    ApplySoftwareSearchDefaults(c->software, &o);
  }
  o.threads = int(state.range(0));
  std::mutex mu;
  std::vector<std::shared_ptr<sim::PipelineReplayer>> replayers;  // this iteration's, to count
  o.make_refiner = [&]() -> Refiner {
    auto r = std::make_shared<sim::PipelineReplayer>();
    {
      std::lock_guard<std::mutex> lock(mu);
      replayers.push_back(r);
    }
    return [r](const ModelSpec& mm, const ClusterSpec& cc, const ParallelConfig& l,
               const costmodel::CostTable& t) { return r->Time(mm, cc, l, t); };
  };
  int64_t feasible = 0, replays = 0, shared = 0, rounds = 0, fallbacks = 0, events = 0,
          tail_starts = 0, bucket_joins = 0, buckets_alone = 0, pipe_starts = 0;
  for (auto _ : state) {
    replayers.clear();
    auto r = Search(*m, *c, o);
    if (!r.ok()) {
      state.SkipWithError(r.status().message().c_str());
      return;
    }
    feasible = r->feasible;
    replays = shared = rounds = fallbacks = events = tail_starts = bucket_joins = buckets_alone =
        pipe_starts = 0;
    for (const auto& rp : replayers) {
      replays += rp->replays(), shared += rp->shared(), fallbacks += rp->fallbacks();
      rounds += rp->shared_rounds(), events += rp->events();
      tail_starts += rp->tail_cut_starts(), bucket_joins += rp->bucket_joins();
      buckets_alone += rp->buckets_alone(), pipe_starts += rp->pipe_shared_starts();
    }
    benchmark::DoNotOptimize(r->top.front().prediction.iteration_s);
  }
  state.counters["feasible"] = double(feasible);
  state.counters["simulated"] = double(replays);
  state.counters["shared_ports"] = double(shared);   // the network model on some ports
  state.counters["shared_rounds"] = double(rounds);  // walks of those replays
  state.counters["full_simulator"] = double(fallbacks);
  state.counters["events"] = double(events);                   // the shared-port walks' events
  state.counters["tail_cut_starts"] = double(tail_starts);     // new shapes started from a like one
  state.counters["bucket_joins"] = double(bucket_joins);       // flows joined at a queued bucket
  state.counters["buckets_alone"] = double(buckets_alone);     // reduction jobs run without events
  state.counters["pipe_shared_starts"] = double(pipe_starts);  // ports on the network from walk 1
}

// gpt-1t on 3072 selene GPUs with every option SearchOptions can turn on (selective
// recomputation, sequence parallelism, the distributed optimizer, gradient-accumulation fusion,
// fused attention; the interleaved and zero-bubble schedules and the uneven splits are always
// searched). Target (issue 15): under 1 s on one thread.
void BM_Search1TAllOptionsEverySimulated(benchmark::State& state) {
  SearchEverySimulated(state, {"gpt-1t", "selene", 3072, EveryOption1T(), ""});
}
BENCHMARK(BM_Search1TAllOptionsEverySimulated)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The same with the stack `ptdp plan` assumes by default (kDefaultSoftware, megatron-core): its
// overlapped, bucketed gradient reduce-scatter shares the NICs with the pipeline's messages.
void BM_Search1TAllOptionsEverySimulatedDefaultStack(benchmark::State& state) {
  SearchEverySimulated(state, {"gpt-1t", "selene", 3072, EveryOption1T(), kDefaultSoftware});
}
BENCHMARK(BM_Search1TAllOptionsEverySimulatedDefaultStack)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The default stack's search with fully sharded data parallelism searched too (`ptdp plan --fsdp`:
// each layout of d cp > 1 again with FSDP, whole and hybrid-sharded inside a node). No target;
// side by side with the one above.
void BM_Search1TAllOptionsEverySimulatedDefaultStackFsdp(benchmark::State& state) {
  SearchOptions o = EveryOption1T();
  o.fsdp = true;
  SearchEverySimulated(state, {"gpt-1t", "selene", 3072, o, kDefaultSoftware});
}
BENCHMARK(BM_Search1TAllOptionsEverySimulatedDefaultStackFsdp)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// `ptdp plan --model deepseek-v3 --cluster dgx-h100 --gpus 1024 --global-batch 8192 --precision
// fp8 --moe-a2a-overlap`: FP8 (each rank's weight copies priced), the combined 1F1B searched beside
// the plain schedules (its paired steps compiled by the replay), every layout that fits replayed.
// No target; `full_simulator` counts the layouts the replay handed to the Interpreter.
void BM_SearchDeepSeekV3Fp8OverlapEverySimulated(benchmark::State& state) {
  SearchOptions o;
  o.global_batch = 8192;
  o.precision = Precision::kFp8;
  o.moe_a2a_overlap = true;
  SearchEverySimulated(state, {"deepseek-v3", "dgx-h100", 1024, o, kDefaultSoftware});
}
BENCHMARK(BM_SearchDeepSeekV3Fp8OverlapEverySimulated)
    ->Arg(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

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
