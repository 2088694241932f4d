// The zero-bubble schedules against their published closed forms (Qi et al., "Zero Bubble
// Pipeline Parallelism", ICLR 2024, section 3.1 and Table 1), to the nanosecond.
//
// Costs per microbatch and stage: F the forward, B the whole backward, W its weight-gradient part
// (so the paper's T_F = F, T_B = B - W, T_W = W). The paper's bubble of a schedule is the idle time
// of a rank between its first forward and its last pass (RankStats::span_idle_ns): its schedules
// start the next iteration's forwards on rank 0 while later ranks still finish (the optimizer
// post-validation of section 4), so a rank's own span is what it pays. Table 1:
//   1F1B   (p - 1)(T_F + T_B + T_W) = (p - 1)(F + B)        peak p microbatches in flight
//   ZB-H1  (p - 1)(T_F + T_B - T_W) = (p - 1)(F + B - 2W)   peak p
//   ZB-H2  (p - 1)(T_F + T_B - 2T_W) = (p - 1)(F + B - 3W)  peak 2p - 1
// The handcrafted schedules assume m >= p (ZB-H1) and m >= 2p - 1 (ZB-H2), and T_W <= T_B <= T_F
// is where the paper's figures place them (the cost triples below; equal costs included).
// The bubble is rank 0's; rank r of our generators idles (p - 1 - r) times the same per-stage
// amount (each rank starts one forward later and ends one B-hop earlier), which the test also
// holds them to.
#include <gtest/gtest.h>

#include <algorithm>

#include "schedule/schedule.h"
#include "simulator/simulator.h"
#include "tests/simulator/zero_bubble_costs.h"

namespace ptdp::sim {
namespace {

using Costs = ZeroBubbleCosts;
// Equal costs, then unequal ones with T_W <= T_B <= T_F, in whole nanoseconds.
const Costs kCosts[] = {{1000, 1000, 1000}, {3000, 2000, 1000}, {2000, 2000, 1000},
                        {4000, 3000, 2000}, {3000, 3000, 1000}, {7, 5, 3}};

Result<SimResult> SimulateKind(ScheduleKind kind, int pp, int64_t m, const Costs& c,
                               Bytes stash = 0) {
  PTDP_ASSIGN_OR_RETURN(Program compute, schedule::GenerateSchedule(kind, pp, m, 1));
  PTDP_ASSIGN_OR_RETURN(Program p, schedule::Lower(compute, 4096, false));
  PTDP_RETURN_IF_ERROR(schedule::Validate(p));
  return Simulate(
      p, UniformCosts(pp, 1, ToSeconds(c.f), ToSeconds(c.b_input + c.w), stash, ToSeconds(c.w)));
}

// Per-stage bubble of Table 1, in the paper's T_F, T_B, T_W.
Nanoseconds PublishedStageBubble(ScheduleKind kind, const Costs& c) {
  switch (kind) {
    case ScheduleKind::kZbH1:
      return c.f + c.b_input - c.w;
    case ScheduleKind::kZbH2:
      return c.f + c.b_input - 2 * c.w;
    default:
      return c.f + c.b_input + c.w;  // 1F1B
  }
}

TEST(ZeroBubble, BubbleMatchesThePublishedClosedFormToTheNanosecond) {
  int cases = 0;
  for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kZbH1, ScheduleKind::kZbH2}) {
    for (int pp : {1, 2, 3, 4, 5, 8, 16}) {
      const int64_t min_m = kind == ScheduleKind::kZbH2 ? 2 * pp - 1 : pp;
      for (int64_t m : {min_m, min_m + 1, 2 * min_m + 3, 4 * int64_t(pp), int64_t{64}}) {
        if (m < min_m) continue;
        for (const Costs& c : kCosts) {
          // 1F1B runs the backward whole: its table is the same, its Program has no W.
          auto r = SimulateKind(kind, pp, m, c);
          ASSERT_TRUE(r.ok()) << r.status().ToString();
          const Nanoseconds stage = PublishedStageBubble(kind, c);
          Nanoseconds worst = 0;
          for (int rank = 0; rank < pp; ++rank) {
            const RankStats& rs = r->ranks[rank];
            EXPECT_EQ(rs.compute_ns, m * (c.f + c.b_input + c.w));
            EXPECT_EQ(rs.span_idle_ns, (pp - 1 - rank) * stage)
                << ScheduleName(kind) << " p=" << pp << " m=" << m << " rank " << rank
                << " F,B,W=" << c.f << "," << c.b_input << "," << c.w;
            worst = std::max(worst, rs.span_idle_ns);
          }
          EXPECT_EQ(worst, (pp - 1) * stage) << ScheduleName(kind) << " p=" << pp << " m=" << m;
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 300);
}

// With F = B_input = W the ZB-H2 bubble is zero: every rank runs 3m passes back to back.
TEST(ZeroBubble, ZbH2HasNoBubbleWithEqualCosts) {
  for (int pp : {2, 4, 8}) {
    auto r = SimulateKind(ScheduleKind::kZbH2, pp, 3 * pp, Costs{1000, 1000, 1000});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (const RankStats& rs : r->ranks) {
      EXPECT_EQ(rs.span_idle_ns, 0);
      EXPECT_EQ(rs.flush_ns - rs.start_ns, 3 * pp * 3000);
    }
  }
}

// Peak microbatches in flight (forward done, W not yet: W needs the layer inputs), Table 1:
// ZB-H1 p (1F1B's peak, here on every rank), ZB-H2 2p - 1. The simulator's counter and the
// compute order's count (schedule::PeakStashedMicrobatches) agree.
TEST(ZeroBubble, PeakInFlightMatchesThePublishedMemory) {
  for (int pp : {1, 2, 3, 4, 8}) {
    for (ScheduleKind kind : {ScheduleKind::kZbH1, ScheduleKind::kZbH2}) {
      const int want = kind == ScheduleKind::kZbH1 ? pp : 2 * pp - 1;
      const int64_t m = 4 * int64_t(pp);
      auto r = SimulateKind(kind, pp, m, Costs{1000, 1000, 1000}, /*stash=*/1 << 20);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      auto compute = schedule::GenerateSchedule(kind, pp, m, 1);
      ASSERT_TRUE(compute.ok());
      const std::vector<int> peaks = schedule::PeakStashedMicrobatches(*compute);
      for (int rank = 0; rank < pp; ++rank) {
        EXPECT_EQ(r->ranks[rank].peak_stashed, want) << ScheduleName(kind) << " rank " << rank;
        EXPECT_EQ(peaks[rank], want);
      }
    }
  }
}

// A split backward costs what the whole one does: BI runs B - W, W runs W, so a Program that
// keeps kBackward is unchanged by a weight-gradient time in the table.
TEST(ZeroBubble, WeightGradientTimeLeavesWholeBackwardsAlone) {
  auto compute = schedule::GenerateSchedule(ScheduleKind::k1F1B, 4, 8, 1);
  ASSERT_TRUE(compute.ok());
  auto p = schedule::Lower(*compute, 0, false);
  ASSERT_TRUE(p.ok());
  auto plain = Simulate(*p, UniformCosts(4, 1, 1e-6, 2e-6));
  auto with_w = Simulate(*p, UniformCosts(4, 1, 1e-6, 2e-6, 0, 1e-6));
  ASSERT_TRUE(plain.ok() && with_w.ok());
  EXPECT_EQ(plain->pipeline_ns, with_w->pipeline_ns);
  EXPECT_EQ(plain->iteration_ns, with_w->iteration_ns);
}

TEST(ZeroBubble, WeightGradientLongerThanTheBackwardIsRefused) {
  auto compute = schedule::GenerateSchedule(ScheduleKind::kZbH1, 2, 4, 1);
  ASSERT_TRUE(compute.ok());
  auto p = schedule::Lower(*compute, 0, false);
  ASSERT_TRUE(p.ok());
  auto r = Simulate(*p, UniformCosts(2, 1, 1e-6, 2e-6, 0, 3e-6));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("weight-gradient time is more than its whole backward"),
            std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace ptdp::sim
