// Text and JSON forms of the Program IR: print/parse round trips and errors that name the token.
#include <gtest/gtest.h>

#include "core/program.h"
#include "schedule/schedule.h"

namespace ptdp {
namespace {

TEST(ProgramText, RoundTripOfEveryKind) {
  for (auto [kind, pp, m, vp] :
       {std::tuple{ScheduleKind::kGPipe, 3, 5, 1}, std::tuple{ScheduleKind::k1F1B, 4, 8, 1},
        std::tuple{ScheduleKind::kInterleaved, 4, 8, 3}}) {
    auto c = schedule::GenerateSchedule(kind, pp, m, vp);
    ASSERT_TRUE(c.ok());
    for (bool rc : {false, true}) {
      auto p = schedule::Lower(*c, 123456789, rc);
      ASSERT_TRUE(p.ok());
      std::string text = ProgramToText(*p);
      auto q = ProgramFromText(text);
      ASSERT_TRUE(q.ok()) << q.status().ToString();
      EXPECT_EQ(q->kind, p->kind);
      EXPECT_EQ(q->pp, p->pp);
      EXPECT_EQ(q->vp, p->vp);
      EXPECT_EQ(q->microbatches, p->microbatches);
      ASSERT_EQ(q->ranks.size(), p->ranks.size());
      for (size_t r = 0; r < p->ranks.size(); ++r)
        EXPECT_EQ(q->ranks[r].instrs, p->ranks[r].instrs);
      EXPECT_EQ(ProgramToText(*q), text);
      auto j = ProgramFromJson(Json::parse(ProgramToJson(*p).dump()));
      ASSERT_TRUE(j.ok()) << j.status().ToString();
      for (size_t r = 0; r < p->ranks.size(); ++r)
        EXPECT_EQ(j->ranks[r].instrs, p->ranks[r].instrs);
    }
  }
}

TEST(ProgramText, InstructionTokens) {
  auto a = InstrFromText("SA12.3>4:4096", "t");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->op, Op::kSendAct);
  EXPECT_EQ(a->microbatch, 12);
  EXPECT_EQ(a->chunk, 3);
  EXPECT_EQ(a->peer, 4);
  EXPECT_EQ(a->bytes, 4096);
  auto b = InstrFromText("B7r", "t");
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->recompute);
  EXPECT_EQ(b->chunk, 0);
  EXPECT_EQ(InstrFromText("OPT", "t")->op, Op::kOptimizerStep);
  EXPECT_EQ(InstrFromText("AR", "t")->op, Op::kReduceGrads);
}

TEST(ProgramText, ErrorsNameTheToken) {
  auto a = InstrFromText("X3", "rank 1, instruction 2");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("rank 1, instruction 2: instruction 'X3'"),
            std::string::npos);
  EXPECT_FALSE(InstrFromText("SA3.1:4", "t").ok());  // no peer
  EXPECT_FALSE(InstrFromText("F3x", "t").ok());
  EXPECT_FALSE(InstrFromText("F", "t").ok());
  auto p = ProgramFromText("program kind=1f1b pp=2 vp=1 microbatches=1\nrank 0: F0 B0\n");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("pp=2"), std::string::npos);
  auto q = ProgramFromText("program kind=1f1b pp=1 vp=1 microbatches=1\nrank 0: F0 Q0\n");
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("rank 0, instruction 1"), std::string::npos)
      << q.status().message();
  EXPECT_FALSE(ProgramFromText("rank 0: F0\n").ok());
  EXPECT_FALSE(ProgramFromText("program kind=zigzag pp=1\n").ok());
}

TEST(ProgramJson, StrictKeys) {
  Json j = Json::parse(
      R"({"kind":"1f1b","pp":1,"vp":1,"microbatches":1,"ranks":[{"pp_rank":0,"instrs":["F0","B0"]}],"extra":1})");
  auto p = ProgramFromJson(j);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("extra"), std::string::npos);
}

}  // namespace
}  // namespace ptdp
