// Generators, lowering and Validate(): every generated Program validates; hand-broken ones are
// rejected with the instruction named.
#include "schedule/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace ptdp::schedule {
namespace {

std::string Text(const Program& p) {
  return ProgramToText(p);
}

Program MustLower(ScheduleKind kind, int pp, int64_t m, int vp, Bytes bytes = 64) {
  auto c = GenerateSchedule(kind, pp, m, vp);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  auto l = Lower(*c, bytes, false);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return *l;
}

TEST(Generators, OneFOneBMatchesFigure4Top) {
  // Narayanan et al. 2021, Figure 4 (top): p = 4, m = 8. Rank r warms up with p - r - 1 forwards.
  auto p = GenerateSchedule(ScheduleKind::k1F1B, 4, 8, 1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(Text(*p),
            "program kind=1f1b pp=4 vp=1 microbatches=8\n"
            "rank 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7\n"
            "rank 1: F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7\n"
            "rank 2: F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7\n"
            "rank 3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7\n");
}

TEST(Generators, GPipeAllForwardsThenAllBackwards) {
  auto p = GenerateSchedule(ScheduleKind::kGPipe, 2, 3, 1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(Text(*p),
            "program kind=gpipe pp=2 vp=1 microbatches=3\n"
            "rank 0: F0 F1 F2 B0 B1 B2\n"
            "rank 1: F0 F1 F2 B0 B1 B2\n");
}

TEST(Generators, InterleavedMatchesMegatronOrder) {
  // p = 4, m = 8, v = 2 (Figure 4 bottom). Rank 0 warms up with (p-1)*2 + (v-1)*p = 10 forwards:
  // microbatches 0-3 of chunk 0, 0-3 of chunk 1, then 4-5 of chunk 0.
  auto p = GenerateSchedule(ScheduleKind::kInterleaved, 4, 8, 2);
  ASSERT_TRUE(p.ok());
  const auto& r0 = p->ranks[0].instrs;
  std::string first;
  for (int i = 0; i < 12; ++i) first += InstrToText(r0[i]) + " ";
  EXPECT_EQ(first, "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 F6.0 B0.1 ");
  // The last rank warms up with (v-1)*p = 4 forwards.
  const auto& r3 = p->ranks[3].instrs;
  std::string last;
  for (int i = 0; i < 6; ++i) last += InstrToText(r3[i]) + " ";
  EXPECT_EQ(last, "F0.0 F1.0 F2.0 F3.0 F0.1 B0.1 ");
}

TEST(Generators, RejectsShapesWithTheReason) {
  auto a = GenerateSchedule(ScheduleKind::kInterleaved, 4, 3, 2);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("at least pp = 4"), std::string::npos)
      << a.status().message();
  auto b = GenerateSchedule(ScheduleKind::kInterleaved, 4, 8, 1);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("vp"), std::string::npos);
  auto c = GenerateSchedule(ScheduleKind::kInterleaved, 1, 8, 2);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("pp"), std::string::npos);
  auto d = GenerateSchedule(ScheduleKind::k1F1B, 4, 8, 2);
  ASSERT_FALSE(d.ok());
  auto e = GenerateSchedule(ScheduleKind::kGPipe, 4, 0, 1);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("microbatches"), std::string::npos);
}

TEST(Validate, EveryGeneratedProgramValidates) {
  int checked = 0;
  for (ScheduleKind kind :
       {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved}) {
    for (int pp : {1, 2, 3, 4, 8}) {
      for (int64_t m : {1, 2, 3, 4, 7, 8, 16, 24}) {
        for (int vp : {1, 2, 3, 4}) {
          if (!CheckScheduleShape(kind, pp, m, vp).ok()) continue;
          auto c = GenerateSchedule(kind, pp, m, vp);
          ASSERT_TRUE(c.ok());
          EXPECT_TRUE(Validate(*c).ok()) << Validate(*c).ToString() << "\n" << Text(*c);
          for (bool rc : {false, true}) {
            auto l = Lower(*c, 1024, rc);
            ASSERT_TRUE(l.ok());
            Status s = Validate(*l);
            EXPECT_TRUE(s.ok()) << s.ToString() << "\n" << Text(*l);
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(Lower, InsertsMessagesAroundCompute) {
  Program p = MustLower(ScheduleKind::k1F1B, 2, 2, 1, 100);
  EXPECT_EQ(Text(p),
            "program kind=1f1b pp=2 vp=1 microbatches=2\n"
            "rank 0: F0 SA0>1:100 F1 SA1>1:100 RG0<1:100 B0 RG1<1:100 B1 AR OPT\n"
            "rank 1: RA0<0:100 F0 B0 SG0>0:100 RA1<0:100 F1 B1 SG1>0:100 AR OPT\n");
}

TEST(Lower, InterleavedWrapsFromLastRankToFirst) {
  Program p = MustLower(ScheduleKind::kInterleaved, 2, 2, 2);
  // Chunk 0 on rank 1 (virtual stage 1) sends to chunk 1 on rank 0 (virtual stage 2).
  bool found_send = false, found_recv = false;
  for (const Instr& in : p.ranks[1].instrs) {
    if (in.op == Op::kSendAct && in.chunk == 0) {
      EXPECT_EQ(in.peer, 0);
      found_send = true;
    }
  }
  for (const Instr& in : p.ranks[0].instrs) {
    if (in.op == Op::kRecvAct && in.chunk == 1) {
      EXPECT_EQ(in.peer, 1);
      Instr send = in;
      send.op = Op::kSendAct;
      send.chunk = 0;
      EXPECT_EQ(MessageKey(p, 0, in), MessageKey(p, 1, send));
      found_recv = true;
    }
  }
  EXPECT_TRUE(found_send && found_recv);
}

TEST(Lower, RecomputeFlagOnBackward) {
  auto c = GenerateSchedule(ScheduleKind::k1F1B, 2, 2, 1);
  auto l = Lower(*c, 8, true);
  ASSERT_TRUE(l.ok());
  int n = 0;
  for (const auto& r : l->ranks)
    for (const Instr& in : r.instrs)
      if (in.op == Op::kBackward) {
        EXPECT_TRUE(in.recompute);
        ++n;
      }
  EXPECT_EQ(n, 4);
}

TEST(BuildProgram, BytesFromBoundaryElements) {
  ModelSpec m;
  m.name = "t";
  m.layers = 4;
  m.hidden = 64;
  m.heads = 4;
  m.seq_len = 32;
  m.vocab = 256;
  ParallelConfig c;
  c.pp = 2;
  c.tp = 2;
  c.mbs = 2;
  c.global_batch = 8;
  c.recompute = Recompute::kFull;
  c.precision = Precision::kBf16;
  auto p = BuildProgram(m, c);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->microbatches, 4);
  // b s h / t with scatter/gather, 2 bytes each.
  EXPECT_EQ(p->ranks[0].instrs[1].op, Op::kSendAct);
  EXPECT_EQ(p->ranks[0].instrs[1].bytes, 2 * 32 * 64 / 2 * 2);
  EXPECT_TRUE(Validate(*p).ok());
  c.pp = 3;  // 4 layers over 3 stages
  EXPECT_FALSE(BuildProgram(m, c).ok());
}

Program Broken(const std::string& text) {
  auto p = ProgramFromText(text);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}

TEST(Validate, MissingReceiveIsNamed) {
  Program p = Broken(
      "program kind=1f1b pp=2 vp=1 microbatches=2\n"
      "rank 0: F0 SA0>1:100 F1 SA1>1:100 RG0<1:100 B0 RG1<1:100 B1 AR OPT\n"
      "rank 1: RA0<0:100 F0 B0 SG0>0:100 F1 B1 SG1>0:100 AR OPT\n");
  Status s = Validate(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 1, instruction 4 (F1)"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("before its input activation"), std::string::npos) << s.message();
}

TEST(Validate, UnmatchedSendIsNamed) {
  // Rank 1 neither receives microbatch 1 nor needs it: drop the receive but keep the forward's
  // input by declaring it pp=2 ... the send of (1) on rank 0 has no receive.
  Program p = Broken(
      "program kind=1f1b pp=2 vp=1 microbatches=2\n"
      "rank 0: F0 SA0>1:100 F1 SA1>1:100 RG0<1:100 B0 RG1<1:100 B1 AR OPT\n"
      "rank 1: RA0<0:100 F0 B0 SG0>0:100 RA1<0:100 F1 B1 SG1>0:100 AR OPT\n");
  EXPECT_TRUE(Validate(p).ok());
  p.ranks[0].instrs[3].bytes = 99;  // SA1 with a different size from its receive
  Status s = Validate(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 1, instruction 4 (RA1<0:100)"), std::string::npos)
      << s.message();
}

TEST(Validate, SwappedOrderThatDeadlocksIsNamed) {
  // Rank 0 waits for the gradient of microbatch 0 before sending microbatch 1's activation... which
  // is fine; but here rank 1 receives microbatch 1 before running microbatch 0's backward while
  // rank 0 sends microbatch 1 only after receiving that gradient: a cycle.
  Program p = Broken(
      "program kind=1f1b pp=2 vp=1 microbatches=2\n"
      "rank 0: F0 SA0>1:100 RG0<1:100 B0 F1 SA1>1:100 RG1<1:100 B1 AR OPT\n"
      "rank 1: RA0<0:100 F0 RA1<0:100 F1 B0 SG0>0:100 B1 SG1>0:100 AR OPT\n");
  Status s = Validate(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("deadlock"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank 0, instruction 2 (RG0<1:100)"), std::string::npos)
      << s.message();
}

TEST(Validate, BackwardBeforeForwardAndWrongPeer) {
  Program p = Broken(
      "program kind=gpipe pp=1 vp=1 microbatches=1\n"
      "rank 0: B0 F0 AR OPT\n");
  Status s = Validate(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 0, instruction 0 (B0): backward before its forward"),
            std::string::npos)
      << s.message();
  Program q = MustLower(ScheduleKind::k1F1B, 3, 3, 1);
  q.ranks[1].instrs[0].peer = 2;  // RA0 from the wrong neighbour
  Status t = Validate(q);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("rank 1, instruction 0"), std::string::npos) << t.message();
  EXPECT_NE(t.message().find("peer should be rank 0"), std::string::npos) << t.message();
}

TEST(Validate, MissingBackwardIsNamed) {
  Program p = Broken(
      "program kind=gpipe pp=1 vp=1 microbatches=2\n"
      "rank 0: F0 F1 B0 AR OPT\n");
  Status s = Validate(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("microbatch 1 chunk 0 lacks its backward"), std::string::npos)
      << s.message();
}

TEST(Validate, HugeMicrobatchCountIsRefusedBeforeItsTablesAreSized) {
  // 2^28 microbatches x 8 chunks in a two-instruction rank: the per-slot table alone would be 2 GiB
  // (the program fuzzer's out-of-memory input); refused from the instruction count instead.
  Program p = Broken(
      "program kind=1f1b pp=1 vp=8 microbatches=268435456\n"
      "rank 0: F0 B0\n");
  Status s = Validate(p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 0 holds 2 instructions, fewer than the forward and backward of "
                             "its 268435456 microbatches x vp = 8 chunks (4294967296)"),
            std::string::npos)
      << s.message();
}

TEST(Stash, PeaksOfTheThreeSchedules) {
  // GPipe keeps all m; 1F1B keeps p - r on rank r (m >= p).
  auto g = GenerateSchedule(ScheduleKind::kGPipe, 4, 8, 1);
  for (int v : PeakStashedMicrobatches(*g)) EXPECT_EQ(v, 8);
  auto f = GenerateSchedule(ScheduleKind::k1F1B, 4, 8, 1);
  auto pf = PeakStashedMicrobatches(*f);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(pf[r], 4 - r);
  // Interleaved: rank r keeps its warm-up count + 1 = 2(p - r - 1) + (v - 1) p + 1 (m > p)
  // (microbatch-chunks, each holding 1/v of a stage's layers).
  auto i = GenerateSchedule(ScheduleKind::kInterleaved, 4, 8, 2);
  auto pi = PeakStashedMicrobatches(*i);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(pi[r], 2 * (4 - r - 1) + 4 + 1) << r;
}

TEST(Diagram, OneLinePerRank) {
  auto p = GenerateSchedule(ScheduleKind::kInterleaved, 2, 2, 2);
  std::string d = ScheduleDiagram(*p);
  EXPECT_EQ(std::count(d.begin(), d.end(), '\n'), 2);
  EXPECT_EQ(d.rfind("rank 0 | F0.0 F1.0 F0.1 F1.1", 0), 0u) << d;
}

}  // namespace
}  // namespace ptdp::schedule
