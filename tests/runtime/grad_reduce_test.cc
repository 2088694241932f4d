// The overlapped data-parallel reduction's plan (runtime/executor/grad_reduce.h): the instruction
// that completes each chunk's gradients, found on hand-made Programs and on a zero-bubble one, and
// the buckets an arena range is cut into.
#include "runtime/executor/grad_reduce.h"

#include <gtest/gtest.h>

#include "schedule/schedule.h"
#include "tests/costmodel/test_profile.h"

namespace ptdp::runtime {
namespace {

Instr I(Op op, int mb, int chunk) {
  Instr in;
  in.op = op;
  in.microbatch = mb;
  in.chunk = chunk;
  return in;
}

TEST(LastGradientInstr, InterleavedHandMade) {
  // Two chunks, two microbatches: chunk 1's gradients are final before chunk 0's.
  const std::vector<Instr> prog = {
      I(Op::kForward, 0, 0),      I(Op::kForward, 0, 1),       I(Op::kForward, 1, 0),
      I(Op::kBackward, 0, 1),     I(Op::kForward, 1, 1),       I(Op::kBackward, 0, 0),
      I(Op::kBackward, 1, 1),     I(Op::kSendGrad, 1, 1),      I(Op::kBackward, 1, 0),
      I(Op::kReduceGrads, -1, 0), I(Op::kOptimizerStep, -1, 0)};
  EXPECT_EQ(LastGradientInstr(prog, 2), (std::vector<int>{8, 6}));
}

TEST(LastGradientInstr, SplitBackwardEndsAtItsWeightHalf) {
  // B of microbatch 1 runs after W of microbatch 0; the chunk is done at the last W.
  const std::vector<Instr> prog = {I(Op::kForward, 0, 0),        I(Op::kForward, 1, 0),
                                   I(Op::kBackwardInput, 0, 0),  I(Op::kBackwardWeight, 0, 0),
                                   I(Op::kBackwardInput, 1, 0),  I(Op::kSendGrad, 1, 0),
                                   I(Op::kBackwardWeight, 1, 0), I(Op::kReduceGrads, -1, 0)};
  EXPECT_EQ(LastGradientInstr(prog, 1), (std::vector<int>{6}));
}

TEST(LastGradientInstr, ChunkWithoutBackwardHasNone) {
  const std::vector<Instr> prog = {I(Op::kForward, 0, 0), I(Op::kBackward, 0, 0)};
  EXPECT_EQ(LastGradientInstr(prog, 2), (std::vector<int>{1, -1}));
  EXPECT_EQ(LastGradientInstr({}, 1), (std::vector<int>{-1}));
}

TEST(LastGradientInstr, ZeroBubbleProgramEndsEveryRankAtAWeightHalf) {
  ModelSpec m = testing::TinyModel();
  m.layers = 4;
  ParallelConfig c;
  c.pp = 2;
  c.mbs = 1;
  c.global_batch = 4;
  c.schedule = ScheduleKind::kZbH1;
  auto p = schedule::BuildProgram(m, c);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (const RankProgram& r : p->ranks) {
    const std::vector<int> last = LastGradientInstr(r.instrs, 1);
    ASSERT_GE(last[0], 0);
    EXPECT_EQ(r.instrs[static_cast<size_t>(last[0])].op, Op::kBackwardWeight);
    for (size_t i = static_cast<size_t>(last[0]) + 1; i < r.instrs.size(); ++i) {
      EXPECT_FALSE(r.instrs[i].op == Op::kBackwardWeight || ComputesInputGrad(r.instrs[i].op))
          << "rank " << r.pp_rank << " instruction " << i;
    }
  }
}

TEST(GradBuckets, CutAtMultiplesOfTheBucket) {
  using R = ElementRange;
  EXPECT_EQ(GradBuckets({0, 25}, 10), (std::vector<R>{{0, 10}, {10, 20}, {20, 25}}));
  // A range that starts inside a bucket is cut where the whole arena's reduction cuts it.
  EXPECT_EQ(GradBuckets({15, 42}, 10), (std::vector<R>{{15, 20}, {20, 30}, {30, 40}, {40, 42}}));
  EXPECT_EQ(GradBuckets({3, 3}, 10), (std::vector<R>{}));
  EXPECT_EQ(GradBuckets({0, 5}, 1), (std::vector<R>{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}}));
}

TEST(GradBuckets, HeldRangesAreLeftOut) {
  using R = ElementRange;
  EXPECT_EQ(GradBuckets({15, 42}, 10, {{22, 35}}),
            (std::vector<R>{{15, 20}, {20, 22}, {35, 40}, {40, 42}}));
  EXPECT_EQ(GradBuckets({0, 20}, 10, {{0, 20}}), (std::vector<R>{}));
  EXPECT_EQ(GradBuckets({0, 20}, 10, {{30, 40}}), (std::vector<R>{{0, 10}, {10, 20}}));
  EXPECT_EQ(GradBuckets({0, 20}, 100, {{0, 4}, {16, 30}}), (std::vector<R>{{4, 16}}));
}

}  // namespace
}  // namespace ptdp::runtime
