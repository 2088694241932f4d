// ZB-V's Programs: accepted shapes and refusals, Validate over a grid (deadlock-free, messages in
// per-channel order), the V placement's messages, and Validate's checks of the turn on rank p - 1.
#include <gtest/gtest.h>

#include <algorithm>

#include "schedule/schedule.h"

namespace ptdp::schedule {
namespace {

TEST(ZbVSchedule, EveryAcceptedShapeValidates) {
  int validated = 0;
  for (int pp = 1; pp <= 8; ++pp) {
    for (int64_t m = 2 * pp - 1; m <= 4 * pp + 3; ++m) {
      auto compute = GenerateSchedule(ScheduleKind::kZbV, pp, m, 2);
      ASSERT_TRUE(compute.ok()) << compute.status().ToString();
      ASSERT_TRUE(Validate(*compute).ok())
          << "p=" << pp << " m=" << m << ": " << Validate(*compute).ToString();
      for (bool recompute : {false, true}) {
        auto lowered = Lower(*compute, 128, recompute);
        ASSERT_TRUE(lowered.ok());
        Status v = Validate(*lowered);
        ASSERT_TRUE(v.ok()) << "p=" << pp << " m=" << m << ": " << v.ToString();
        ++validated;
      }
    }
  }
  EXPECT_EQ(validated, 2 * 112);  // m from 2p - 1 to 4p + 3: 2p + 5 shapes per p
}

TEST(ZbVSchedule, RefusesShapesItCannotRun) {
  auto few = GenerateSchedule(ScheduleKind::kZbV, 4, 6, 2);
  ASSERT_FALSE(few.ok());
  EXPECT_EQ(few.status().message(),
            "microbatches: the zb-v schedule needs at least 2 pp - 1 = 7 microbatches (rank 0's "
            "warm-up runs 2 pp - 1 forwards of its first chunk), got 6");
  auto three = GenerateSchedule(ScheduleKind::kZbV, 4, 8, 3);
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.status().message().rfind("vp: the zb-v schedule places exactly 2 chunks", 0), 0u)
      << three.status().ToString();
}

// Stage k's neighbours: rank r's chunk 0 (stage r) talks to r - 1 and r + 1 down the V, its chunk
// 1 (stage 2p - 1 - r) to r + 1 and r - 1 back up; rank p - 1's two chunks hand over in place.
TEST(ZbVSchedule, PlacementAndPeers) {
  auto compute = GenerateSchedule(ScheduleKind::kZbV, 3, 5, 2);
  ASSERT_TRUE(compute.ok());
  auto p = Lower(*compute, 8, false);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(VirtualStageOf(*p, 0, 1), 5);
  EXPECT_EQ(VirtualStageOf(*p, 2, 1), 3);
  EXPECT_EQ(RankOfStage(*p, 4), 1);
  EXPECT_TRUE(LocalBoundary(*p, 2));
  EXPECT_FALSE(LocalBoundary(*p, 1));
  for (const RankProgram& rp : p->ranks) {
    for (const Instr& in : rp.instrs) {
      if (in.op == Op::kSendAct || in.op == Op::kSendGrad || in.op == Op::kRecvAct ||
          in.op == Op::kRecvGrad) {
        const bool to_next = in.op == Op::kSendAct || in.op == Op::kRecvGrad;
        const int want = (to_next == (in.chunk == 0)) ? rp.pp_rank + 1 : rp.pp_rank - 1;
        EXPECT_EQ(in.peer, want) << "rank " << rp.pp_rank << " " << InstrToText(in);
      }
    }
  }
}

// The turn: rank p - 1 runs chunk 1's forward of a microbatch only after chunk 0's (which hands
// it the activation) and chunk 0's backward only after chunk 1's input half.
TEST(ZbVSchedule, ValidateChecksTheTurn) {
  auto compute = GenerateSchedule(ScheduleKind::kZbV, 2, 4, 2);
  ASSERT_TRUE(compute.ok());
  auto p = Lower(*compute, 8, false);
  ASSERT_TRUE(p.ok());
  auto& last = p->ranks[1].instrs;
  auto find = [&](Op op, int mb, int chunk) {
    return std::find_if(last.begin(), last.end(), [&](const Instr& in) {
      return in.op == op && in.microbatch == mb && in.chunk == chunk;
    });
  };
  Program swapped = *p;
  {
    auto& ins = swapped.ranks[1].instrs;
    auto f0 = std::find_if(ins.begin(), ins.end(), [](const Instr& in) {
      return in.op == Op::kForward && in.microbatch == 0 && in.chunk == 0;
    });
    auto f1 = std::find_if(ins.begin(), ins.end(), [](const Instr& in) {
      return in.op == Op::kForward && in.microbatch == 0 && in.chunk == 1;
    });
    ASSERT_TRUE(f0 != ins.end() && f1 != ins.end());
    std::iter_swap(f0, f1);
  }
  Status v = Validate(swapped);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.message().find("forward before the forward of virtual stage 1 on this rank"),
            std::string::npos)
      << v.ToString();
  EXPECT_TRUE(find(Op::kSendAct, 0, 0) == last.end());  // no message across the turn
}

}  // namespace
}  // namespace ptdp::schedule
