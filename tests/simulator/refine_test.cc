// The simulator on real layouts: the cost model's CostTable and the generated Program.
#include "simulator/refine.h"

#include <gtest/gtest.h>

#include "core/cluster.h"
#include "schedule/schedule.h"

namespace ptdp::sim {
namespace {

ParallelConfig Layout(int tp, int pp, int dp, int vp, ScheduleKind k, int64_t B) {
  ParallelConfig c;
  c.tp = tp;
  c.pp = pp;
  c.dp = dp;
  c.vp = vp;
  c.schedule = k;
  c.recompute = Recompute::kFull;
  c.global_batch = B;
  return c;
}

// The paper's 1T layout (t = 8, p = 64, d = 6, b = 1, B = 3072: m = 512). With free communication
// and equal stage costs the simulated bubble is the closed form; with the cost model's costs the
// pipeline time stays within 10% of the closed form (which charges p2p on the critical path every
// microbatch, where the replay overlaps the non-blocking sends).
TEST(Refine, OneTrillionOn3072Gpus) {
  auto model = LoadModel("gpt-1t");
  auto cluster = LoadCluster("selene", 3072);
  ASSERT_TRUE(model.ok() && cluster.ok());
  for (auto [vp, kind] :
       {std::pair{1, ScheduleKind::k1F1B}, std::pair{2, ScheduleKind::kInterleaved}}) {
    const ParallelConfig c = Layout(8, 64, 6, vp, kind, 3072);
    auto ideal = SimulateLayout(*model, *cluster, c, SimOptions(), /*ideal=*/true);
    ASSERT_TRUE(ideal.ok()) << ideal.status().ToString();
    EXPECT_NEAR(ideal->result.bubble_fraction, 63.0 / (vp * 512.0), 1e-6);
    EXPECT_TRUE(schedule::Validate(ideal->program).ok());

    const costmodel::CostTable t = costmodel::BuildCostTable(*model, *cluster, c);
    auto pt = SimulatedPipelineTime(*model, *cluster, c, t);
    ASSERT_TRUE(pt.ok()) << pt.status().ToString();
    const costmodel::PipelineTime closed = costmodel::ClosedFormPipeline().Time(t, c);
    EXPECT_GT(pt->total, 0.9 * closed.total);
    EXPECT_LT(pt->total, 1.1 * closed.total);
    EXPECT_GE(pt->bubble, 0.0);
    EXPECT_LT(pt->bubble, pt->total);
  }
}

// gpt-1.7b on 32 GPUs of selene, t = 2, d = 8, p = 2: each stage spans two nodes, so its
// data-parallel groups (4 members per node) and the pipeline boundary both cross the NICs. The
// cost model's table carries the all-reduce as NIC bytes; replayed, it shares the last stage's
// NICs with the gradients that stage still sends (the all-reduce follows its last backward, and
// with the overlap its buckets run during the last backwards), so the iteration is longer than a
// replay of the same all-reduce kept off the NICs (the same times, as NVLink-only phases). Alone,
// each all-reduce takes its closed-form time.
TEST(Refine, DataParallelAllReduceSharesTheNicWithPipelineSends) {
  auto model = LoadModel("gpt-1.7b");
  auto cluster = LoadCluster("selene", 32);
  ASSERT_TRUE(model.ok() && cluster.ok());
  const ParallelConfig c = Layout(2, 2, 8, 1, ScheduleKind::k1F1B, 64);
  const costmodel::CostTable shared = costmodel::BuildCostTable(*model, *cluster, c);
  ASSERT_TRUE(shared.p2p_link[0].inter_node);
  costmodel::CostTable apart = shared;
  for (int r = 0; r < c.pp; ++r) {
    ASSERT_EQ(shared.dp_collectives[r].size(), 1u);
    costmodel::CollectiveCost& one = apart.dp_collectives[r][0];
    ASSERT_GT(one.nic_bytes, 0.0);
    EXPECT_NEAR(one.Time(), shared.dp_allreduce[r], 1e-12);
    one = costmodel::CollectiveCost{one.latency, one.Time() - one.latency, 0, 0};
  }
  for (bool overlap : {false, true}) {
    SimOptions o;
    o.overlap_dp_allreduce = overlap;
    auto with = SimulateLayout(*model, *cluster, c, o, false, &shared);
    auto without = SimulateLayout(*model, *cluster, c, o, false, &apart);
    ASSERT_TRUE(with.ok() && without.ok());
    if (overlap) {
      // The buckets leave beside the last backwards and share the NIC with their gradient sends.
      EXPECT_GT(with->result.iteration_ns, without->result.iteration_ns);
    } else {
      // Not overlapped, a rank reduces once its own sends have arrived (Megatron-LM waits for its
      // p2p requests first) and after its last receive: the NIC is its alone, the time the same.
      EXPECT_EQ(with->result.iteration_ns, without->result.iteration_ns);
      // Rank 0's all-reduce runs after everything it sends: alone on its NIC.
      EXPECT_NEAR(double(with->result.ranks[0].allreduce_ns),
                  1e9 * (shared.dp_allreduce[0] + shared.embedding_allreduce[0]), 3.0);
    }
  }
}

TEST(Refine, RejectsALayoutOfAnotherSize) {
  auto model = LoadModel("gpt-1.7b");
  auto cluster = LoadCluster("selene", 16);
  ASSERT_TRUE(model.ok() && cluster.ok());
  auto r = SimulateLayout(*model, *cluster, Layout(2, 4, 1, 1, ScheduleKind::k1F1B, 16));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("16"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace ptdp::sim
