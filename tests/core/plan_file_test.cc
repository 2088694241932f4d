// The plan file: version 2 carries the layout's Program, which round-trips exactly; a version-1
// file (no program) is refused where a Program is needed, with the field and the remedy named.
#include "core/plan_file.h"

#include <gtest/gtest.h>

namespace ptdp {
namespace {

// A tiny plan: tp=1, pp=2, dp=1, 2 microbatches, 1F1B, with its lowered Program written by hand
// (core cannot call the schedule generators; tests/schedule checks they agree).
PlanFile TinyPlan() {
  PlanFile p;
  p.model = LoadModel("tiny").value();
  p.cluster = {"cpu", 2, 2};
  p.layout.pp = 2;
  p.layout.mbs = 1;
  p.layout.global_batch = 2;
  auto prog = ProgramFromText(
      "program kind=1f1b pp=2 vp=1 microbatches=2\n"
      "rank 0: F0 SA0>1:8192 F1 SA1>1:8192 RG0<1:8192 B0 RG1<1:8192 B1 AR OPT\n"
      "rank 1: RA0<0:8192 F0 B0 SG0>0:8192 RA1<0:8192 F1 B1 SG1>0:8192 AR OPT\n");
  EXPECT_TRUE(prog.ok()) << prog.status().ToString();
  p.program = *prog;
  p.has_program = true;
  return p;
}

Json ToJson(const PlanFile& p) {
  return Json::parse(PlanToJson(p).dump());
}

bool SameProgram(const Program& a, const Program& b) {
  if (a.kind != b.kind || a.pp != b.pp || a.vp != b.vp || a.microbatches != b.microbatches ||
      a.ranks.size() != b.ranks.size())
    return false;
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    if (a.ranks[r].pp_rank != b.ranks[r].pp_rank || a.ranks[r].instrs != b.ranks[r].instrs)
      return false;
  }
  return true;
}

TEST(PlanFile, RoundTripsTheProgram) {
  const PlanFile p = TinyPlan();
  const Json j = ToJson(p);
  EXPECT_EQ(j["ptdp_plan_version"].get<int>(), 2);
  ASSERT_TRUE(j.contains("program"));
  EXPECT_EQ(j["program"]["ranks"][0]["instrs"][1].get<std::string>(), "SA0.0>1:8192");
  auto back = PlanFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->has_program);
  EXPECT_TRUE(SameProgram(back->program, p.program)) << ProgramToText(back->program);
  EXPECT_EQ(ProgramToText(back->program), ProgramToText(p.program));
  EXPECT_EQ(back->layout.ToString(), p.layout.ToString());
  // Written again, the same document.
  EXPECT_EQ(PlanToJson(*back).dump(), PlanToJson(p).dump());
}

// A model field read from a plan file is named by its key path, as the user finds it in the file.
TEST(PlanFile, ModelFieldOutOfRangeIsNamedByItsPath) {
  Json j = ToJson(TinyPlan());
  j["model"]["hidden"] = 0;
  j["model"]["layers"] = 1000000;
  auto back = PlanFromJson(j);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().message(),
            "plan.model.layers: 1000000 is outside [1, 10000]; plan.model.hidden: 0 is outside "
            "[1, 1048576]");
}

TEST(PlanFile, VersionOneWithoutProgramIsRefusedWithTheRemedy) {
  Json j = ToJson(TinyPlan());
  j.erase("program");
  j["ptdp_plan_version"] = 1;
  auto p = PlanFromJson(j);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "plan.program: missing (plan file version 1; re-run ptdp plan)");
  EXPECT_EQ(p.status().ExitCode(), 2);
  // Read without a Program when the caller is about to give it one.
  auto lax = PlanFromJson(j, /*require_program=*/false);
  ASSERT_TRUE(lax.ok()) << lax.status().ToString();
  EXPECT_FALSE(lax->has_program);
  EXPECT_FALSE(PlanToJson(*lax).contains("program"));
  j["ptdp_plan_version"] = 2;
  auto v2 = PlanFromJson(j);
  ASSERT_FALSE(v2.ok());
  EXPECT_EQ(v2.status().message(), "plan.program: missing");
  j["ptdp_plan_version"] = 3;
  auto v3 = PlanFromJson(j, false);
  ASSERT_FALSE(v3.ok());
  EXPECT_NE(v3.status().message().find("plan.ptdp_plan_version: 3"), std::string::npos);
}

TEST(PlanFile, MalformedProgramNamesTheInstruction) {
  Json j = ToJson(TinyPlan());
  j["program"]["ranks"][1]["instrs"][3] = "SG0>0:x";
  auto p = PlanFromJson(j);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("plan.program.ranks[1].instrs[3]"), std::string::npos)
      << p.status().message();
  j = ToJson(TinyPlan());
  j["program"]["bogus"] = 1;
  p = PlanFromJson(j);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("bogus"), std::string::npos) << p.status().message();
}

}  // namespace
}  // namespace ptdp
