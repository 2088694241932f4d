// The split backward in the IR (BI / W), the zero-bubble generators' shapes (Qi et al., "Zero
// Bubble Pipeline Parallelism", ICLR 2024, section 3.1) and Validate()'s rules for split
// backwards. Their timing and memory against the paper's closed forms:
// tests/simulator/zero_bubble_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/program.h"
#include "schedule/schedule.h"

namespace ptdp::schedule {
namespace {

Program Parse(const std::string& text) {
  auto p = ProgramFromText(text);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}

int Count(const std::vector<Instr>& ins, Op op) {
  return static_cast<int>(
      std::count_if(ins.begin(), ins.end(), [&](const Instr& in) { return in.op == op; }));
}

TEST(SplitBackwardText, TokensRoundTrip) {
  auto bi = InstrFromText("BI3.1r", "t");
  ASSERT_TRUE(bi.ok()) << bi.status().ToString();
  EXPECT_EQ(bi->op, Op::kBackwardInput);
  EXPECT_EQ(bi->microbatch, 3);
  EXPECT_EQ(bi->chunk, 1);
  EXPECT_TRUE(bi->recompute);
  EXPECT_EQ(InstrToText(*bi), "BI3.1r");
  auto w = InstrFromText("W12", "t");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->op, Op::kBackwardWeight);
  EXPECT_EQ(InstrToText(*w, false), "W12");
  EXPECT_FALSE(InstrFromText("W3r", "t").ok());  // W recomputes nothing
  EXPECT_EQ(*ParseOpName("backward_weight"), Op::kBackwardWeight);
  EXPECT_EQ(*ParseOpName(OpName(Op::kBackwardInput)), Op::kBackwardInput);
}

TEST(SplitBackwardText, ProgramsRoundTrip) {
  for (ScheduleKind kind : {ScheduleKind::kZbH1, ScheduleKind::kZbH2}) {
    auto c = GenerateSchedule(kind, 3, 7, 1);
    ASSERT_TRUE(c.ok());
    auto l = Lower(*c, 4096, true);
    ASSERT_TRUE(l.ok());
    auto q = ProgramFromText(ProgramToText(*l));
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    EXPECT_EQ(q->kind, kind);
    for (size_t r = 0; r < l->ranks.size(); ++r) EXPECT_EQ(q->ranks[r].instrs, l->ranks[r].instrs);
    auto j = ProgramFromJson(Json::parse(ProgramToJson(*l).dump()));
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    EXPECT_EQ(j->ranks[2].instrs, l->ranks[2].instrs);
  }
}

TEST(ZeroBubbleGenerators, EveryProgramValidates) {
  int checked = 0;
  for (ScheduleKind kind : {ScheduleKind::kZbH1, ScheduleKind::kZbH2}) {
    for (int pp = 1; pp <= 8; ++pp) {
      for (int64_t m = 1; m <= 24; ++m) {
        auto c = GenerateSchedule(kind, pp, m, 1);
        ASSERT_TRUE(c.ok()) << c.status().ToString();
        Status s = Validate(*c);
        EXPECT_TRUE(s.ok()) << s.ToString() << "\n" << ProgramToText(*c);
        for (bool rc : {false, true}) {
          auto l = Lower(*c, 64, rc);
          ASSERT_TRUE(l.ok());
          Status t = Validate(*l);
          EXPECT_TRUE(t.ok()) << t.ToString() << "\n" << ProgramToText(*l);
        }
        for (const RankProgram& r : c->ranks) {
          EXPECT_EQ(Count(r.instrs, Op::kBackward), 0);
          EXPECT_EQ(Count(r.instrs, Op::kBackwardInput), m);
          EXPECT_EQ(Count(r.instrs, Op::kBackwardWeight), m);
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 2 * 8 * 24);
}

// Section 3.1: ZB-H1 keeps 1F1B's warm-up (p - r - 1 forwards on rank r), rank 0 runs each W
// right after its B, and rank r holds back r of them (1F1B's p in flight on every rank); ZB-H2
// warms up with 2(p - r - 1) + 1 forwards, so rank 0 runs 2p - 1.
TEST(ZeroBubbleGenerators, WarmUpsOfSection3) {
  const int pp = 4;
  auto h1 = GenerateSchedule(ScheduleKind::kZbH1, pp, 8, 1);
  auto h2 = GenerateSchedule(ScheduleKind::kZbH2, pp, 8, 1);
  ASSERT_TRUE(h1.ok() && h2.ok());
  for (int r = 0; r < pp; ++r) {
    auto warmup = [](const std::vector<Instr>& ins) {
      return std::find_if(ins.begin(), ins.end(),
                          [](const Instr& in) { return in.op != Op::kForward; }) -
             ins.begin();
    };
    EXPECT_EQ(warmup(h1->ranks[r].instrs), pp - r) << r;  // the warm-up and the first steady F
    EXPECT_EQ(warmup(h2->ranks[r].instrs), 2 * (pp - r - 1) + 1) << r;
  }
  const auto& first = h1->ranks[0].instrs;  // p - 1 warm-up forwards, then (F, B, W) steps
  for (size_t i = pp - 1; i + 2 < first.size() && first[i].op == Op::kForward; i += 3) {
    EXPECT_EQ(first[i + 1].op, Op::kBackwardInput) << i;
    EXPECT_EQ(first[i + 2].op, Op::kBackwardWeight) << i;
    EXPECT_EQ(first[i + 2].microbatch, first[i + 1].microbatch) << i;
  }
  for (int r = 0; r < pp; ++r) {  // the first W comes after r + 1 B passes on rank r
    const auto& ins = h1->ranks[r].instrs;
    auto w = std::find_if(ins.begin(), ins.end(),
                          [](const Instr& in) { return in.op == Op::kBackwardWeight; });
    EXPECT_EQ(
        std::count_if(ins.begin(), w, [](const Instr& in) { return in.op == Op::kBackwardInput; }),
        r + 1)
        << r;
  }
}

TEST(ZeroBubbleGenerators, OneChunkPerRank) {
  auto a = GenerateSchedule(ScheduleKind::kZbH1, 4, 8, 2);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("vp"), std::string::npos) << a.status().message();
  EXPECT_FALSE(GenerateSchedule(ScheduleKind::kZbH2, 4, 0, 1).ok());
}

TEST(ZeroBubbleLower, InputHalfCarriesTheMessagesWeightHalfNone) {
  auto c = GenerateSchedule(ScheduleKind::kZbH1, 2, 2, 1);
  ASSERT_TRUE(c.ok());
  auto l = Lower(*c, 100, true);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(ProgramToText(*l),
            "program kind=zb-h1 pp=2 vp=1 microbatches=2\n"
            "rank 0: F0 SA0>1:100 F1 SA1>1:100 RG0<1:100 BI0r W0 RG1<1:100 BI1r W1 AR OPT\n"
            "rank 1: RA0<0:100 F0 BI0r SG0>0:100 RA1<0:100 F1 BI1r SG1>0:100 W0 W1 AR OPT\n");
}

TEST(ZeroBubbleValidate, SplitBackwardRulesAreNamed) {
  auto fails = [](const std::string& text, const std::string& want) {
    Status s = Validate(Parse(text));
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
  };
  const std::string head = "program kind=zb-h1 pp=1 vp=1 microbatches=1\nrank 0: ";
  fails(head + "F0 W0 BI0\n",
        "instruction 1 (W0): weight gradient before its input-gradient pass (BI)");
  fails(head + "F0 BI0\n", "microbatch 0 chunk 0 lacks its weight gradient (W)");
  fails(head + "F0 B0 W0\n", "(W0): weight gradient before its input-gradient pass");
  fails(head + "F0 BI0 B0 W0\n", "(B0): a second backward");
  fails(head + "F0 BI0 W0 W0\n", "a second weight gradient");
  fails(head + "BI0 F0 W0\n", "(BI0): backward before its forward");
  EXPECT_TRUE(Validate(Parse(head + "F0 BI0 W0\n")).ok());
}

// A split backward keeps its microbatch in flight until its W (W needs the layer inputs).
TEST(ZeroBubbleStash, InFlightUntilTheWeightGradient) {
  Program p = Parse(
      "program kind=zb-h1 pp=1 vp=1 microbatches=3\n"
      "rank 0: F0 BI0 F1 BI1 F2 W0 BI2 W1 W2\n");
  EXPECT_EQ(PeakStashedMicrobatches(p)[0], 3);
}

}  // namespace
}  // namespace ptdp::schedule
