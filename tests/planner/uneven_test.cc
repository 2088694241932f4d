// Issue 13's acceptance: for a model whose first and last pipeline stages are heavier (a 256k
// vocabulary: the output layer's logits cost about 2.6 transformer layers of h = 8192), the
// planner, refined by the simulator as `ptdp plan` runs it, chooses p > 1 with uneven stages; the
// simulator replays that layout faster than the even split of the same (t, p, d, b, schedule); and
// --emit megatron says it with Megatron-LM's first / last stage flags.
#include <gtest/gtest.h>

#include "core/cluster.h"
#include "core/shapes.h"
#include "planner/report.h"
#include "planner/search.h"
#include "simulator/pipeline_replay.h"
#include "simulator/refine.h"

namespace ptdp::planner {
namespace {

Result<ModelSpec> LargeVocab() {
  return LoadModel(std::string(PTDP_SOURCE_DIR) + "/tests/planner/data/large_vocab.json");
}

TEST(Uneven, PlannerChoosesUnevenStagesTheSimulatorConfirms) {
  auto m = LargeVocab();
  auto cluster = LoadCluster("selene", 64);
  ASSERT_TRUE(m.ok() && cluster.ok());
  SearchOptions o;
  o.global_batch = 512;
  o.make_refiner = sim::MakeReplayRefiner;
  auto r = Search(*m, *cluster, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ParallelConfig best = r->top.front().layout;
  ASSERT_GT(best.pp, 1) << best.ToString();
  ASSERT_TRUE(best.Uneven()) << best.ToString();
  EXPECT_TRUE(r->top.front().refined);

  // The even split of the same layout, both replayed by the simulator.
  ParallelConfig even = best;
  even.first_stage_layers = 0;
  even.last_stage_layers = 0;
  ASSERT_TRUE(even.Validate(*m).ok()) << even.Validate(*m).ToString();
  auto uneven_sim = sim::SimulateLayout(*m, *cluster, best);
  auto even_sim = sim::SimulateLayout(*m, *cluster, even);
  ASSERT_TRUE(uneven_sim.ok() && even_sim.ok());
  EXPECT_LT(uneven_sim->result.iteration_ns, even_sim->result.iteration_ns)
      << best.ToString() << " vs " << even.ToString();

  // The output layer is the heavier end: the last stage holds fewer layers than a middle one.
  const std::vector<int> counts = StageLayerCounts(*m, best);
  EXPECT_LT(counts.back(), counts[1]) << best.ToString();

  const std::string args = MegatronArgs(*m, best);
  EXPECT_NE(
      args.find("--decoder-first-pipeline-num-layers " + std::to_string(best.first_stage_layers)),
      std::string::npos)
      << args;
  EXPECT_NE(
      args.find("--decoder-last-pipeline-num-layers " + std::to_string(best.last_stage_layers)),
      std::string::npos)
      << args;
  EXPECT_EQ(MegatronArgs(*m, even).find("--decoder-"), std::string::npos);
}

// Interleaving where the layers do not divide into p v virtual stages but l + 2 does (46 layers on
// p = 4: Llama 3 405B's case, 126 on 16): the planner interleaves with the first and the last
// stage one layer short (Megatron-LM's account-for flags), the simulator replays it faster than
// the best 1F1B layout of the same t and p, the closed form's pipeline time agrees with the
// replay's, and --emit megatron says it with the account-for flags.
TEST(Uneven, InterleavedShortEndsWhereTheLayersDoNotDivide) {
  auto m = LargeVocab();
  auto cluster = LoadCluster("selene", 64);
  ASSERT_TRUE(m.ok() && cluster.ok());
  m->layers = 46;
  SearchOptions o;
  o.global_batch = 64;
  o.make_refiner = sim::MakeReplayRefiner;
  o.fix = ParseFix("tp=4,pp=4").value();
  auto r = Search(*m, *cluster, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ParallelConfig best = r->top.front().layout;
  ASSERT_EQ(best.schedule, ScheduleKind::kInterleaved) << best.ToString();
  ASSERT_TRUE(best.Uneven()) << best.ToString();
  const std::vector<int> counts = StageLayerCounts(*m, best);
  EXPECT_EQ(counts.front() + counts.back(), 2 * counts[1] - 2) << best.ToString();

  o.fix = ParseFix("tp=4,pp=4,schedule=1f1b").value();
  auto flat = Search(*m, *cluster, o);
  ASSERT_TRUE(flat.ok()) << flat.status().ToString();
  const ParallelConfig one_f_one_b = flat->top.front().layout;
  auto interleaved_sim = sim::SimulateLayout(*m, *cluster, best);
  auto flat_sim = sim::SimulateLayout(*m, *cluster, one_f_one_b);
  ASSERT_TRUE(interleaved_sim.ok() && flat_sim.ok());
  EXPECT_LT(interleaved_sim->result.iteration_ns, flat_sim->result.iteration_ns)
      << best.ToString() << " vs " << one_f_one_b.ToString();

  const double closed = costmodel::ClosedFormPipeline().Time(interleaved_sim->costs, best).total;
  const double replayed = ToSeconds(interleaved_sim->result.pipeline_ns);
  EXPECT_NEAR(closed / replayed, 1.0, 0.05) << best.ToString();

  const std::string args = MegatronArgs(*m, best);
  EXPECT_NE(args.find("--account-for-embedding-in-pipeline-split"), std::string::npos) << args;
  EXPECT_NE(args.find("--account-for-loss-in-pipeline-split"), std::string::npos) << args;
  EXPECT_EQ(args.find("--decoder-"), std::string::npos) << args;
  const int per_virtual = (m->layers + 2) / (best.pp * best.vp);
  EXPECT_NE(args.find("--num-layers-per-virtual-pipeline-stage " + std::to_string(per_virtual)),
            std::string::npos)
      << args;
}

// A split given with --fix is the one searched; with interleaving only Megatron-LM's short ends.
TEST(Uneven, FixedSplitIsKeptAndRefusedWithInterleaving) {
  auto m = LargeVocab();
  auto cluster = LoadCluster("selene", 64);
  ASSERT_TRUE(m.ok() && cluster.ok());
  SearchOptions o;
  o.global_batch = 512;
  auto fix = ParseFix("tp=4,pp=4,first_stage_layers=11,last_stage_layers=9");
  ASSERT_TRUE(fix.ok()) << fix.status().ToString();
  o.fix = *fix;
  auto r = Search(*m, *cluster, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const Candidate& c : r->top) {
    EXPECT_EQ(c.layout.first_stage_layers, 11);
    EXPECT_EQ(c.layout.last_stage_layers, 9);
    EXPECT_EQ(StageLayerCounts(*m, c.layout), (std::vector<int>{11, 14, 14, 9}));
  }
  // Interleaved: 48 + 1 layers (the embedding counted) do not divide into 8 virtual stages.
  fix = ParseFix("tp=4,pp=4,vp=2,schedule=interleaved,first_stage_layers=11");
  ASSERT_TRUE(fix.ok());
  o.fix = *fix;
  r = Search(*m, *cluster, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("first_stage_layers: with vp = 2 the 48 layers plus 1"),
            std::string::npos)
      << r.status().message();
  // 46 + 2 do: the fixed short ends are kept.
  m->layers = 46;
  fix = ParseFix("tp=4,pp=4,vp=2,schedule=interleaved,first_stage_layers=11,last_stage_layers=11");
  ASSERT_TRUE(fix.ok());
  o.fix = *fix;
  r = Search(*m, *cluster, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const Candidate& c : r->top) {
    EXPECT_EQ(StageLayerCounts(*m, c.layout), (std::vector<int>{11, 12, 12, 11}));
  }
  m->layers = 48;
  // Fixed on a search where p = 1 would win (tiny on the CPU): no layout ignores it.
  auto tiny = LoadModel(std::string(PTDP_SOURCE_DIR) + "/tests/planner/data/tiny.json");
  auto cpu = LoadCluster(std::string(PTDP_SOURCE_DIR) + "/tests/planner/data/cpu_cluster.json");
  ASSERT_TRUE(tiny.ok() && cpu.ok());
  SearchOptions free;
  free.global_batch = 8;
  auto unfixed = Search(*tiny, *cpu, free);
  ASSERT_TRUE(unfixed.ok());
  EXPECT_EQ(unfixed->top.front().layout.pp, 1);  // else this check proves nothing
  fix = ParseFix("first_stage_layers=1,last_stage_layers=3");
  ASSERT_TRUE(fix.ok());
  free.fix = *fix;
  r = Search(*tiny, *cpu, free);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const Candidate& c : r->top) EXPECT_TRUE(fix->Admits(c.layout)) << c.layout.ToString();
  EXPECT_FALSE(ParseFix("first_stage_layers=-1").ok());
  EXPECT_TRUE(ParseFix("last_stage_layers=0").ok());
}

// --fix stage_layers: any per-stage counts (here a light second stage the first/last form cannot
// express) are the only split searched, with pp their count and the vp = 1 schedules; --emit
// megatron says them in Megatron-Core's layout syntax; a contradiction with another fixed key is
// a one-line error naming stage_layers.
TEST(Uneven, FixedStageLayersAreSearchedAndEmitted) {
  auto m = LargeVocab();  // 48 layers
  auto cluster = LoadCluster("selene", 64);
  ASSERT_TRUE(m.ok() && cluster.ok());
  auto fix = ParseFix("tp=4,stage_layers=14/8/14/12");
  ASSERT_TRUE(fix.ok()) << fix.status().ToString();
  EXPECT_EQ(fix->pp, 4);
  SearchOptions o;
  o.global_batch = 512;
  o.fix = *fix;
  auto r = Search(*m, *cluster, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->top.empty());
  for (const Candidate& c : r->top) {
    EXPECT_EQ(c.layout.stage_layers, (std::vector<int>{14, 8, 14, 12})) << c.layout.ToString();
    EXPECT_EQ(c.layout.vp, 1);
    EXPECT_EQ(StageLayerCounts(*m, c.layout), (std::vector<int>{14, 8, 14, 12}));
  }
  ParallelConfig best = r->top.front().layout;
  best.schedule = ScheduleKind::k1F1B;
  const std::string args = MegatronArgs(*m, best);
  EXPECT_NE(args.find(R"( --pipeline-model-parallel-layout "Et*14|t*8|t*14|t*12,L")"),
            std::string::npos)
      << args;
  EXPECT_EQ(args.find("--decoder-"), std::string::npos) << args;
  EXPECT_EQ(MegatronLayout({1, 2}), "Et|t*2,L");
  // Per virtual stage, an end stage with no layers, and a multi-token prediction layer.
  EXPECT_EQ(MegatronLayout({0, 2, 2, 1}), "E|t*2|t*2|t,L");
  EXPECT_EQ(MegatronLayout({1, 2, 2, 0}, 1), "Et|t*2|t*2|m,L");
  auto interleaved = ParseFix("vp=2,stage_layers=0/4/4/0");
  ASSERT_TRUE(interleaved.ok()) << interleaved.status().message();
  EXPECT_EQ(interleaved->pp, 2);
  EXPECT_EQ(interleaved->schedule, ScheduleKind::kInterleaved);
  // Counts that do not sum to the model's layers: the search's error names the field.
  fix = ParseFix("tp=4,stage_layers=14/8/14/13");
  ASSERT_TRUE(fix.ok());
  o.fix = *fix;
  r = Search(*m, *cluster, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("layout.stage_layers: the counts sum to 49 but the model "
                                      "has 48 layers"),
            std::string::npos)
      << r.status().message();
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"stage_layers=4/x", "--fix: stage_layers: expected layer counts"},
           {"stage_layers=4/-1/4", "--fix: stage_layers: expected layer counts"},
           {"stage_layers=8", "--fix: stage_layers: expected a count for each of 2 or more"},
           {"pp=2,stage_layers=4/4/4", "--fix: stage_layers: 3 counts but pp=2 is fixed"},
           {"vp=2,stage_layers=4/4/4", "--fix: stage_layers: 3 counts is not pp*vp for vp=2"},
           {"vp=2,schedule=1f1b,stage_layers=4/4", "need schedule=interleaved"},
           {"schedule=interleaved,stage_layers=4/4", "need a schedule of one chunk per rank"},
           {"first_stage_layers=3,stage_layers=4/4", "--fix: stage_layers: excludes"}}) {
    auto bad = ParseFix(text);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_NE(bad.status().message().find(why), std::string::npos) << bad.status().message();
    EXPECT_EQ(bad.status().message().find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace ptdp::planner
