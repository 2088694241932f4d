// Every layout that fits replayed by the simulator, as `ptdp plan` runs the search: the ranking is
// the simulator's, the best layout's numbers are a direct simulation's, and the result does not
// depend on the number of threads.
#include <gtest/gtest.h>

#include "core/cluster.h"
#include "planner/search.h"
#include "simulator/pipeline_replay.h"
#include "simulator/refine.h"

namespace ptdp::planner {
namespace {

// gpt-1.7b (24 layers) on 8 selene GPUs with every option: about 2,700 layouts fit.
SearchOptions EveryOption(int threads) {
  SearchOptions o;
  o.global_batch = 16;
  o.selective_recompute = o.sequence_parallel = o.distributed_optimizer = true;
  o.grad_accumulation_fusion = o.fused_attention = true;
  o.keep = 100000;  // keep them all, to compare them all
  o.make_refiner = sim::MakeReplayRefiner;
  o.threads = threads;
  return o;
}

class Fixed : public costmodel::PipelineModel {
 public:
  explicit Fixed(costmodel::PipelineTime t) : t_(t) {}
  costmodel::PipelineTime Time(const costmodel::CostTable&, const ParallelConfig&) const override {
    return t_;
  }

 private:
  costmodel::PipelineTime t_;
};

TEST(RefineAll, EveryFeasibleLayoutIsSimulatedAndRankedByIt) {
  auto m = LoadModel("gpt-1.7b");
  auto cluster = LoadCluster("selene", 8);
  ASSERT_TRUE(m.ok() && cluster.ok());
  auto r = Search(*m, *cluster, EveryOption(1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_GT(r->feasible, 1000);
  ASSERT_EQ(int64_t(r->top.size()), r->feasible);
  for (size_t i = 0; i < r->top.size(); ++i) {
    EXPECT_TRUE(r->top[i].refined) << r->top[i].layout.ToString();
    if (i > 0) {
      EXPECT_LE(r->top[i - 1].prediction.iteration_s, r->top[i].prediction.iteration_s);
    }
  }
  // The best layout as `ptdp simulate` replays it (SimulateLayout: its Program, its CostTable,
  // the event queue), priced as the plan prices a pipeline time.
  const Candidate& best = r->top.front();
  auto sim = sim::SimulateLayout(*m, *cluster, best.layout);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  Nanoseconds busiest = 0;
  for (const auto& rank : sim->result.ranks) busiest = std::max(busiest, rank.compute_ns);
  costmodel::PipelineTime pt;
  pt.total = ToSeconds(sim->result.pipeline_ns);
  pt.bubble = std::max(0.0, pt.total - ToSeconds(busiest));
  const Fixed fixed(pt);
  const costmodel::Prediction want =
      costmodel::Predict(*m, *cluster, best.layout, sim->costs, &fixed, true);
  EXPECT_EQ(best.prediction.iteration_s, want.iteration_s) << best.layout.ToString();
  EXPECT_EQ(best.prediction.bubble_fraction, want.bubble_fraction);
  EXPECT_EQ(best.prediction.peak_memory, want.peak_memory);
  // The best per schedule family is the simulator's best of that family.
  ASSERT_TRUE(r->best_interleaved.has_value());
  for (const Candidate& c : r->top) {
    if (c.layout.schedule == ScheduleKind::kInterleaved) {
      EXPECT_LE(r->best_interleaved->prediction.iteration_s, c.prediction.iteration_s);
    }
  }
}

TEST(RefineAll, TheResultDoesNotDependOnTheThreadCount) {
  auto m = LoadModel("gpt-1.7b");
  auto cluster = LoadCluster("selene", 8);
  ASSERT_TRUE(m.ok() && cluster.ok());
  auto one = Search(*m, *cluster, EveryOption(1));
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  for (int threads : {3}) {
    auto many = Search(*m, *cluster, EveryOption(threads));
    ASSERT_TRUE(many.ok()) << many.status().ToString();
    ASSERT_EQ(many->top.size(), one->top.size());
    for (size_t i = 0; i < one->top.size(); ++i) {
      const Candidate &a = one->top[i], &b = many->top[i];
      ASSERT_EQ(a.layout.ToString(), b.layout.ToString()) << "rank " << i << ", " << threads;
      EXPECT_EQ(a.prediction.iteration_s, b.prediction.iteration_s);
      EXPECT_EQ(a.prediction.bubble_fraction, b.prediction.bubble_fraction);
      EXPECT_EQ(a.closed_form_iteration_s, b.closed_form_iteration_s);
    }
    EXPECT_EQ(one->best_interleaved->layout.ToString(), many->best_interleaved->layout.ToString());
    EXPECT_EQ(one->best_interleaved->prediction.iteration_s,
              many->best_interleaved->prediction.iteration_s);
  }
}

}  // namespace
}  // namespace ptdp::planner
