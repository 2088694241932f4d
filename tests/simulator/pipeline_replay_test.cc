// The fast replay against the event-driven one: the same pipeline time and bubble, bit for bit,
// over a grid of layouts (every schedule, uneven stages, recomputation, sequence parallelism,
// fused attention), with links slow enough that flows share ports (the replay then runs the
// network model), and with the errors Simulate gives.
#include "simulator/pipeline_replay.h"

#include <gtest/gtest.h>

#include <string>

#include "core/cluster.h"
#include "core/software.h"
#include "simulator/refine.h"

namespace ptdp::sim {
namespace {

struct Grid {
  int compared = 0;
  int slow_links = 0;  // of which with links x 1e-3
};

// Compares one layout, with its cost table scaled: links `link_scale` times their bandwidth.
void Compare(PipelineReplayer& replayer, const ModelSpec& m, const ClusterSpec& cluster,
             const ParallelConfig& c, double link_scale, Grid* grid) {
  if (!c.Validate(m).ok()) return;
  costmodel::CostTable t = costmodel::BuildCostTable(m, cluster, c);
  for (auto& link : t.p2p_link) link.bandwidth_Bps *= link_scale;
  auto fast = replayer.Time(m, cluster, c, t);
  auto full = SimulatedPipelineTime(m, cluster, c, t);
  ASSERT_EQ(fast.ok(), full.ok()) << c.ToString();
  if (!full.ok()) return;
  EXPECT_EQ(fast->total, full->total) << c.ToString() << " links x" << link_scale;
  EXPECT_EQ(fast->bubble, full->bubble) << c.ToString() << " links x" << link_scale;
  ++grid->compared;
  grid->slow_links += link_scale < 1;
}

ParallelConfig Layout(int tp, int pp, int dp, int mbs, int64_t B, ScheduleKind k, int vp) {
  ParallelConfig c;
  c.tp = tp;
  c.pp = pp;
  c.dp = dp;
  c.mbs = mbs;
  c.global_batch = B;
  c.schedule = k;
  c.vp = vp;
  return c;
}

TEST(PipelineReplay, EqualsTheEventDrivenReplayOnAGrid) {
  auto model = LoadModel("gpt-1.7b");  // 24 layers
  auto cluster = LoadCluster("selene", 32);
  ASSERT_TRUE(model.ok() && cluster.ok());
  PipelineReplayer replayer;
  Grid grid;
  const std::pair<ScheduleKind, int> kinds[] = {
      {ScheduleKind::kGPipe, 1}, {ScheduleKind::k1F1B, 1},        {ScheduleKind::kZbH1, 1},
      {ScheduleKind::kZbH2, 1},  {ScheduleKind::kInterleaved, 2}, {ScheduleKind::kInterleaved, 3},
      {ScheduleKind::kZbV, 2}};
  for (auto [kind, vp] : kinds) {
    for (int pp : {2, 4, 8}) {
      for (int mbs : {1, 4}) {
        for (Recompute rc : {Recompute::kNone, Recompute::kFull, Recompute::kSelective}) {
          for (double link_scale : {1.0, 0.05, 1e-3}) {
            ParallelConfig c = Layout(32 / (pp * 2), pp, 2, mbs, 64, kind, vp);
            c.recompute = rc;
            c.sequence_parallel = c.tp > 1 && rc == Recompute::kSelective;
            c.fused_attention = rc == Recompute::kNone && mbs == 4;
            Compare(replayer, *model, *cluster, c, link_scale, &grid);
            if (vp == 1 && kind != ScheduleKind::kZbH1 && kind != ScheduleKind::kZbH2 && pp == 4) {
              c.first_stage_layers = 5;  // 5/7/7/5
              c.last_stage_layers = 5;
              Compare(replayer, *model, *cluster, c, link_scale, &grid);
            }
          }
        }
      }
    }
  }
  // None needed Simulate; the slow links made flows share ports (the network model's replay).
  EXPECT_GT(grid.compared, 150);
  EXPECT_EQ(replayer.fallbacks(), 0);
  EXPECT_GE(replayer.shared(), grid.slow_links / 2);
  EXPECT_LT(replayer.shared(), grid.compared);
  // Some needed a second round: a flow left alone met one once the suspect ports' flows moved.
  EXPECT_GT(replayer.shared_rounds(), replayer.shared());
}

// Interleaved with short ends (core/parallel.h): 22 layers, the embedding and the loss counted as a
// layer each, so chunks of one rank differ (rank 0: q / v - 1 then q / v); fast and equal.
TEST(PipelineReplay, EqualsTheEventDrivenReplayWithShortEnds) {
  auto model = LoadModel("gpt-1.7b");
  auto cluster = LoadCluster("selene", 32);
  ASSERT_TRUE(model.ok() && cluster.ok());
  model->layers = 22;
  PipelineReplayer replayer;
  Grid grid;
  for (int vp : {2, 3}) {
    for (int pp : {2, 4}) {
      for (int mbs : {1, 4}) {
        for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
          for (double link_scale : {1.0, 1e-3}) {
            ParallelConfig c =
                Layout(32 / (pp * 2), pp, 2, mbs, 64, ScheduleKind::kInterleaved, vp);
            c.recompute = rc;
            c.first_stage_layers = c.last_stage_layers = (22 + 2) / pp - 1;
            ASSERT_TRUE(c.Validate(*model).ok()) << c.Validate(*model).ToString();
            Compare(replayer, *model, *cluster, c, link_scale, &grid);
          }
        }
      }
    }
  }
  EXPECT_EQ(grid.compared, 32);
  EXPECT_EQ(replayer.fallbacks(), 0);
}

// The paper's 1T layouts, whose replays the planner does most: fast and equal.
TEST(PipelineReplay, EqualsTheEventDrivenReplayOnOneTrillion) {
  auto model = LoadModel("gpt-1t");
  auto cluster = LoadCluster("selene", 3072);
  ASSERT_TRUE(model.ok() && cluster.ok());
  PipelineReplayer replayer;
  Grid grid;
  for (auto [kind, vp] :
       {std::pair{ScheduleKind::k1F1B, 1}, std::pair{ScheduleKind::kInterleaved, 2}}) {
    ParallelConfig c = Layout(8, 64, 6, 1, 3072, kind, vp);
    c.recompute = Recompute::kFull;
    Compare(replayer, *model, *cluster, c, 1.0, &grid);
  }
  EXPECT_EQ(grid.compared, 2);
  EXPECT_EQ(replayer.fallbacks(), 0);
}

// Scales a table's NIC bandwidth for the data-parallel collectives (slower: longer flows, more of
// them beside the pipeline's messages on the NICs).
void ScaleCollectiveNics(costmodel::CostTable* t, double scale) {
  for (auto& rank : t->dp_collectives) {
    for (auto& one : rank) one.nic_Bps *= scale;
  }
}

// An overlapped gradient reduction whose buckets cross the NICs shares them with the pipeline's
// messages: the replay runs the collective streams on its network model, with the same answer as
// the Interpreter, over a sweep of layouts of the default stack (megatron-core: overlapped,
// bucketed reduce-scatter) with pipeline messages and buckets on the NICs, slow links and slow
// collective NICs, bucket counts and the weights' all-gather overlapped or not.
TEST(PipelineReplay, OverlappedReductionOnTheNicsEqualsTheInterpreter) {
  auto model = LoadModel("gpt-1.7b");
  auto cluster = LoadCluster("selene", 64);
  auto software = LoadSoftware(kDefaultSoftware);
  ASSERT_TRUE(model.ok() && cluster.ok() && software.ok());
  cluster->software = *software;
  ASSERT_TRUE(software->overlap_grad_reduce.value);
  PipelineReplayer replayer;
  int compared = 0, slowed = 0;
  const std::pair<ScheduleKind, int> kinds[] = {{ScheduleKind::k1F1B, 1},
                                                {ScheduleKind::kInterleaved, 2},
                                                {ScheduleKind::kZbH1, 1},
                                                {ScheduleKind::kZbV, 2}};
  for (auto [kind, vp] : kinds) {
    for (auto [tp, pp] : {std::pair{1, 4}, std::pair{2, 8}, std::pair{8, 4}, std::pair{4, 8}}) {
      ParallelConfig c = Layout(tp, pp, 64 / (tp * pp), 1, 128, kind, vp);
      c.distributed_optimizer = true;
      if (!c.Validate(*model).ok()) continue;
      for (double link_scale : {1.0, 0.05}) {
        for (double nic_scale : {1.0, 0.02}) {
          for (int buckets : {0, 1, 3}) {  // 0: the cost model's own count
            for (bool gather_overlapped : {true, false}) {
              costmodel::CostTable t = costmodel::BuildCostTable(*model, *cluster, c);
              ASSERT_TRUE(t.overlap_grad_reduce);
              for (auto& link : t.p2p_link) link.bandwidth_Bps *= link_scale;
              ScaleCollectiveNics(&t, nic_scale);
              if (buckets > 0) t.dp_buckets = buckets;
              t.overlap_param_gather = gather_overlapped;
              auto fast = replayer.Time(*model, *cluster, c, t);
              auto full = SimulatedPipelineTime(*model, *cluster, c, t);
              ASSERT_TRUE(fast.ok() && full.ok()) << c.ToString();
              const std::string what = c.ToString() + " links x" + std::to_string(link_scale) +
                                       " NICs x" + std::to_string(nic_scale) + " buckets " +
                                       std::to_string(t.dp_buckets);
              EXPECT_EQ(fast->total, full->total) << what;
              EXPECT_EQ(fast->bubble, full->bubble) << what;
              ++compared;
              // The same layout with its buckets off the NICs: where the times differ, the
              // buckets' flows slowed the pipeline's messages.
              for (auto& rank : t.dp_collectives) {
                for (auto& one : rank) one.nic_bytes = 0;
              }
              auto alone = SimulatedPipelineTime(*model, *cluster, c, t);
              ASSERT_TRUE(alone.ok());
              slowed += alone->total != full->total;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 100);
  EXPECT_GT(slowed, 10);  // the sweep does exercise the sharing
  // Flows joined the network model at a queued bucket (MeetsQueuedBuckets), and stayed exact.
  EXPECT_GT(replayer.bucket_joins(), 0);
  EXPECT_GT(replayer.buckets_alone(), 0);  // and buckets run without events beside it
  // Ports where two messages touched in a layout ran on the network model from the next one's
  // first walk (Shape::pipe_shared), and stayed exact.
  EXPECT_GT(replayer.pipe_shared_starts(), 0);
  EXPECT_EQ(replayer.fallbacks(), 0);
}

// Many microbatches and many buckets, the NICs slowed step by step: one replayer runs the layouts
// of one shape in a row, so each starts from the buckets the last one found meeting messages
// (Shape::net_jobs_first/last), which move as the NICs slow; the others run alone, without events
// (CollectiveStreams::RunAloneExcept), and a message that meets one sends it back to the network
// model (Rejoin). The times stay the Interpreter's whichever guess was wrong.
TEST(PipelineReplay, BucketsRunAloneStayExact) {
  auto model = LoadModel("gpt-1.7b");
  auto cluster = LoadCluster("selene", 64);
  auto software = LoadSoftware(kDefaultSoftware);
  ASSERT_TRUE(model.ok() && cluster.ok() && software.ok());
  cluster->software = *software;
  PipelineReplayer replayer;
  int compared = 0, slowed = 0;
  for (auto [kind, vp] :
       {std::pair{ScheduleKind::k1F1B, 1}, std::pair{ScheduleKind::kInterleaved, 2},
        std::pair{ScheduleKind::kZbH1, 1}}) {
    for (int buckets : {4, 40}) {
      for (double nic_scale : {1.0, 0.5, 0.2, 0.1, 0.05, 0.02, 0.01}) {
        ParallelConfig c = Layout(8, 4, 2, 1, 512, kind, vp);
        c.distributed_optimizer = true;
        ASSERT_TRUE(c.Validate(*model).ok());
        costmodel::CostTable t = costmodel::BuildCostTable(*model, *cluster, c);
        ScaleCollectiveNics(&t, nic_scale);
        t.dp_buckets = buckets;
        auto fast = replayer.Time(*model, *cluster, c, t);
        auto full = SimulatedPipelineTime(*model, *cluster, c, t);
        ASSERT_TRUE(fast.ok() && full.ok()) << c.ToString();
        const std::string what = c.ToString() + " NICs x" + std::to_string(nic_scale) +
                                 " buckets " + std::to_string(buckets);
        EXPECT_EQ(fast->total, full->total) << what;
        EXPECT_EQ(fast->bubble, full->bubble) << what;
        ++compared;
        for (auto& rank : t.dp_collectives) {
          for (auto& one : rank) one.nic_bytes = 0;
        }
        auto apart = SimulatedPipelineTime(*model, *cluster, c, t);
        ASSERT_TRUE(apart.ok());
        slowed += apart->total != full->total;
      }
    }
  }
  EXPECT_EQ(compared, 42);
  EXPECT_GT(slowed, 5);  // the buckets do slow the pipeline in some
  EXPECT_GT(replayer.buckets_alone(), 1000);
  EXPECT_EQ(replayer.fallbacks(), 0);
}

// One replayer through shapes of one pipeline (kind, pp, vp) with other microbatch counts, longer
// and shorter, buckets on the NICs: each new shape starts from the last one's tail cut
// (Scratch::TailCut), and the times stay the Interpreter's, however well that start guesses.
TEST(PipelineReplay, TailCutFromAnotherShapeStaysExact) {
  auto model = LoadModel("gpt-1.7b");
  auto cluster = LoadCluster("selene", 64);
  auto software = LoadSoftware(kDefaultSoftware);
  ASSERT_TRUE(model.ok() && cluster.ok() && software.ok());
  cluster->software = *software;
  PipelineReplayer replayer;
  int compared = 0;
  for (auto [kind, vp] :
       {std::pair{ScheduleKind::k1F1B, 1}, std::pair{ScheduleKind::kInterleaved, 2},
        std::pair{ScheduleKind::kZbH1, 1}}) {
    for (int64_t batch : {64, 512, 32, 256, 128, 1024}) {
      // Slow NICs, and slow links too: two messages touch (Shape::pipe_shared).
      for (auto [nic_scale, link_scale] :
           {std::pair{1.0, 1.0}, std::pair{0.05, 1.0}, std::pair{0.05, 0.05}}) {
        ParallelConfig c = Layout(8, 4, 2, 1, batch, kind, vp);
        c.distributed_optimizer = true;
        if (!c.Validate(*model).ok()) continue;
        costmodel::CostTable t = costmodel::BuildCostTable(*model, *cluster, c);
        ScaleCollectiveNics(&t, nic_scale);
        for (auto& link : t.p2p_link) link.bandwidth_Bps *= link_scale;
        auto fast = replayer.Time(*model, *cluster, c, t);
        auto full = SimulatedPipelineTime(*model, *cluster, c, t);
        ASSERT_TRUE(fast.ok() && full.ok()) << c.ToString();
        const std::string what = c.ToString() + " NICs x" + std::to_string(nic_scale) + " links x" +
                                 std::to_string(link_scale);
        EXPECT_EQ(fast->total, full->total) << what;
        EXPECT_EQ(fast->bubble, full->bubble) << what;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 54);
  EXPECT_GE(replayer.tail_cut_starts(), 15);  // every new shape but each pipeline's first
  EXPECT_GT(replayer.bucket_joins(), 0);
  EXPECT_GT(replayer.pipe_shared_starts(), 0);
  EXPECT_EQ(replayer.fallbacks(), 0);
}

// A reduction inside the node puts no flow on the NICs: the replay alone, no collective streams.
TEST(PipelineReplay, OverlappedReductionInsideTheNodeNeedsNoStreams) {
  auto model = LoadModel("gpt-1.7b");
  auto cluster = LoadCluster("selene", 32);
  ASSERT_TRUE(model.ok() && cluster.ok());
  PipelineReplayer replayer;
  const ParallelConfig c = Layout(2, 2, 8, 1, 64, ScheduleKind::k1F1B, 1);
  costmodel::CostTable t = costmodel::BuildCostTable(*model, *cluster, c);
  t.overlap_grad_reduce = true;
  for (auto& rank : t.dp_collectives) {
    for (auto& one : rank)
      one = costmodel::CollectiveCost{one.latency, one.Time() - one.latency, 0, 0};
  }
  auto fast = replayer.Time(*model, *cluster, c, t);
  auto full = SimulatedPipelineTime(*model, *cluster, c, t);
  ASSERT_TRUE(fast.ok() && full.ok());
  EXPECT_EQ(fast->total, full->total);
  EXPECT_EQ(replayer.fallbacks(), 0);
  EXPECT_EQ(replayer.shared(), 0);
}

// The combined 1F1B (ParallelConfig::moe_a2a_overlap): the replay compiles the paired steps and
// shares each pair's saving between its forward and backward as the Interpreter does, bit for
// bit, over pipeline depths and interleaving, selective recomputation, slow links (the network
// model) and today's overlapped reduction on the NICs; none is handed to Simulate.
TEST(PipelineReplay, CombinedOneFOneBEqualsTheInterpreter) {
  auto model = LoadModel("qwen3-30b-a3b");  // 48 layers, 128 experts
  auto software = LoadSoftware(kDefaultSoftware);
  ASSERT_TRUE(model.ok() && software.ok());
  PipelineReplayer replayer;
  int compared = 0, faster = 0;
  struct Shape {
    int pp, vp, dp;
    int64_t batch;
  };
  for (const Shape sh : {Shape{1, 1, 8, 64}, Shape{2, 2, 8, 128}, Shape{2, 4, 8, 128},
                         Shape{4, 2, 4, 64}, Shape{4, 3, 4, 64}, Shape{8, 2, 2, 64}}) {
    auto cluster = LoadCluster("dgx-h100", sh.pp * sh.dp);
    ASSERT_TRUE(cluster.ok());
    cluster->software = *software;
    const ScheduleKind kind = sh.vp > 1 ? ScheduleKind::kInterleaved : ScheduleKind::k1F1B;
    ParallelConfig c = Layout(1, sh.pp, sh.dp, 1, sh.batch, kind, sh.vp);
    c.ep = sh.dp;
    c.precision = Precision::kBf16;
    c.distributed_optimizer = c.grad_accumulation_fusion = true;
    c.moe_a2a_overlap = true;
    for (Recompute rc : {Recompute::kNone, Recompute::kSelective}) {
      c.recompute = rc;
      c.fused_attention = rc == Recompute::kNone;  // selective recomputation is the unfused core's
      ASSERT_TRUE(c.Validate(*model).ok()) << c.ToString() << ": " << c.Validate(*model).message();
      for (double link_scale : {1.0, 0.05, 1e-3}) {
        costmodel::CostTable t = costmodel::BuildCostTable(*model, *cluster, c);
        ASSERT_FALSE(t.a2a_pair_saving.empty());
        for (auto& link : t.p2p_link) link.bandwidth_Bps *= link_scale;
        auto fast = replayer.Time(*model, *cluster, c, t);
        auto full = SimulatedPipelineTime(*model, *cluster, c, t);
        ASSERT_TRUE(fast.ok() && full.ok()) << c.ToString();
        const std::string what = c.ToString() + " links x" + std::to_string(link_scale);
        EXPECT_EQ(fast->total, full->total) << what;
        EXPECT_EQ(fast->bubble, full->bubble) << what;
        ++compared;
        // The pairs do change the time: the same table without the savings is slower (where the
        // links are not so slow that the messages alone set it).
        if (link_scale < 1) continue;
        t.a2a_pair_saving.clear();
        auto unpaired = SimulatedPipelineTime(*model, *cluster, c, t);
        ASSERT_TRUE(unpaired.ok());
        faster += full->total < unpaired->total;
      }
    }
  }
  EXPECT_EQ(compared, 36);
  EXPECT_EQ(faster, 12);
  EXPECT_EQ(replayer.fallbacks(), 0);
  EXPECT_GT(replayer.shared(), 0);  // the slow links ran the network model
}

// Costs Simulate refuses come back as its error.
TEST(PipelineReplay, GivesSimulatesErrors) {
  auto model = LoadModel("gpt-1.7b");
  auto cluster = LoadCluster("selene", 32);
  ASSERT_TRUE(model.ok() && cluster.ok());
  const ParallelConfig c = Layout(2, 4, 4, 1, 64, ScheduleKind::k1F1B, 1);
  costmodel::CostTable t = costmodel::BuildCostTable(*model, *cluster, c);
  t.chunks[2].forward.gemm = 1e300;
  PipelineReplayer replayer;
  auto fast = replayer.Time(*model, *cluster, c, t);
  auto full = SimulatedPipelineTime(*model, *cluster, c, t);
  ASSERT_FALSE(fast.ok());
  EXPECT_EQ(fast.status().message(), full.status().message());
  t = costmodel::BuildCostTable(*model, *cluster, c);
  t.p2p_link[1].bandwidth_Bps = 0;
  fast = replayer.Time(*model, *cluster, c, t);
  full = SimulatedPipelineTime(*model, *cluster, c, t);
  ASSERT_FALSE(fast.ok());
  EXPECT_EQ(fast.status().message(), full.status().message());
}

}  // namespace
}  // namespace ptdp::sim
