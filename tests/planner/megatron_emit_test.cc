// `--emit megatron` and the plan file's megatron_* keys: flags only for a schedule Megatron-Core
// runs, the environment Megatron-LM asserts, and a note whenever the flags are not the winner's.
#include <gtest/gtest.h>

#include "core/cluster.h"
#include "planner/fix.h"
#include "planner/report.h"
#include "planner/search.h"

namespace ptdp::planner {
namespace {

Candidate Ranked(ScheduleKind schedule, int tp, int vp, Seconds iteration_s) {
  Candidate c;
  c.layout.tp = tp;
  c.layout.pp = 4;
  c.layout.vp = vp;
  c.layout.schedule = schedule;
  c.prediction.iteration_s = iteration_s;
  return c;
}

TEST(MegatronEmit, ScheduleGapNamesWhatMegatronCoreCannotRun) {
  ParallelConfig c;
  c.pp = 4;
  for (ScheduleKind k : {ScheduleKind::k1F1B, ScheduleKind::kInterleaved}) {
    c.schedule = k;
    EXPECT_EQ(MegatronScheduleGap(c), "") << ScheduleName(k);
  }
  for (ScheduleKind k :
       {ScheduleKind::kGPipe, ScheduleKind::kZbH1, ScheduleKind::kZbH2, ScheduleKind::kZbV}) {
    c.schedule = k;
    const std::string gap = MegatronScheduleGap(c);
    EXPECT_EQ(gap.rfind(ScheduleName(k), 0), 0u) << gap;
    EXPECT_NE(gap.find("Megatron-Core has no schedule"), std::string::npos) << gap;
  }
  c.pp = 1;
  c.schedule = ScheduleKind::kGPipe;  // one stage: no pipeline schedule at all
  EXPECT_EQ(MegatronScheduleGap(c), "");
}

// A ZB-H1 winner gets the flags of the best ranked 1F1B/interleaved layout, and the note says so
// with both layouts and both predicted times; a winner Megatron-Core runs gets no note.
TEST(MegatronEmit, ZeroBubbleWinnerFallsBackWithANote) {
  SearchResult r;
  r.top = {Ranked(ScheduleKind::kZbH1, 2, 1, 5.0), Ranked(ScheduleKind::kZbH2, 2, 1, 5.1),
           Ranked(ScheduleKind::kInterleaved, 4, 2, 5.25), Ranked(ScheduleKind::k1F1B, 8, 1, 6)};
  auto choice = ChooseMegatronLayout(r);
  ASSERT_TRUE(choice.ok()) << choice.status().message();
  EXPECT_EQ(choice->layout.schedule, ScheduleKind::kInterleaved);
  EXPECT_EQ(choice->layout.tp, 4);
  for (const char* part : {"runs zb-h1, which Megatron-Core has no schedule for", "5 s per",
                           "schedule=interleaved", "5.25 s predicted"}) {
    EXPECT_NE(choice->note.find(part), std::string::npos) << part << " not in " << choice->note;
  }
  r.top.erase(r.top.begin(), r.top.begin() + 2);
  choice = ChooseMegatronLayout(r);
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->layout.tp, 4);
  EXPECT_EQ(choice->note, "");
}

TEST(MegatronEmit, RefusedWhenNoRankedLayoutRunsOnMegatronCore) {
  SearchResult r;
  r.top = {Ranked(ScheduleKind::kZbH2, 2, 1, 5.0), Ranked(ScheduleKind::kZbV, 2, 2, 5.1)};
  auto choice = ChooseMegatronLayout(r);
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.status().ExitCode(), 2);
  EXPECT_NE(choice.status().message().find("runs zb-h2, which Megatron-Core has no schedule"),
            std::string::npos)
      << choice.status().message();
}

// validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with tensor or context parallelism before
// Blackwell, and that it is not 1 with Megatron-FSDP.
TEST(MegatronEmit, EnvironmentWithTensorParallelism) {
  ParallelConfig c;
  EXPECT_EQ(MegatronEnvironment(c), "");
  c.tp = 2;
  EXPECT_EQ(MegatronEnvironment(c), "CUDA_DEVICE_MAX_CONNECTIONS=1");
  c.tp = 1;
  c.cp = 2;
  EXPECT_EQ(MegatronEnvironment(c), "CUDA_DEVICE_MAX_CONNECTIONS=1");
  c.fsdp = true;
  EXPECT_EQ(MegatronEnvironment(c), "CUDA_DEVICE_MAX_CONNECTIONS=32");
}

// The plan file of a search fixed to ZB-H1 says why it has no flags rather than giving 1F1B's; one
// whose winner Megatron-Core runs carries its flags and, with tp > 1, the environment.
TEST(MegatronEmit, PlanFileKeys) {
  auto m = LoadModel("gpt-1.7b");
  auto c = LoadCluster("selene", 8);
  ASSERT_TRUE(m.ok() && c.ok());
  SearchOptions o;
  o.global_batch = 64;
  o.fix = *ParseFix("tp=2,pp=2,dp=2,mbs=1,schedule=zb-h1");
  auto zb = Search(*m, *c, o);
  ASSERT_TRUE(zb.ok()) << zb.status().message();
  auto plan = MakePlanFile(*m, *c, *zb, 0);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_FALSE(plan->extra.contains("megatron_args"));
  EXPECT_NE(plan->extra.value("megatron_note", "").find("runs zb-h1"), std::string::npos);
  o.fix = *ParseFix("tp=2,pp=2,dp=2,mbs=1,schedule=1f1b");
  auto ofb = Search(*m, *c, o);
  ASSERT_TRUE(ofb.ok()) << ofb.status().message();
  plan = MakePlanFile(*m, *c, *ofb, 0);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_TRUE(plan->extra.contains("megatron_args"));
  EXPECT_FALSE(plan->extra.contains("megatron_note"));
  EXPECT_EQ(plan->extra.value("megatron_env", ""), "CUDA_DEVICE_MAX_CONNECTIONS=1");
}

}  // namespace
}  // namespace ptdp::planner
