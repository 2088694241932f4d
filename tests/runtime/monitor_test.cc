// The monitor's analysis (runtime/executor/monitor.h) on synthetic windows: stragglers found by
// compute per expected FLOP against the median, a heavier stage not taken for one, the stage
// imbalance, the bubble and utilisation, and the wire form's round trip.
#include <gtest/gtest.h>

#include "runtime/executor/monitor.h"

namespace ptdp::runtime {
namespace {

// A rank of pipeline rank `pp` that computed `compute_s` per step for `flops` expected FLOPs.
RankWindow Rank(int rank, int pp, int dp, double compute_s, double flops = 1e9) {
  RankWindow w;
  w.rank = rank;
  w.coord = RankCoord{0, dp, pp};
  w.steps = 4;
  w.wall_s = 4 * 1.0;
  w.stage_compute_s = 4 * compute_s;
  w.busy_s = w.stage_compute_s + 4 * 0.01;
  w.comm_s = 4 * 0.2;
  w.span_s = 4 * 0.9;
  w.expected_flops = flops;
  return w;
}

TEST(Monitor, NamesTheSlowRankWithItsSlowdown) {
  // p = 2, d = 2 (ranks 0, 1: stage 0; 2, 3: stage 1); rank 2 three times slower.
  std::vector<RankWindow> w = {Rank(0, 0, 0, 0.1), Rank(1, 0, 1, 0.1), Rank(2, 1, 0, 0.3),
                               Rank(3, 1, 1, 0.1)};
  const MonitorReport r = AnalyseWindow(w, 2, 0.2, 5, 8);
  ASSERT_EQ(r.stragglers.size(), 1u);
  EXPECT_EQ(r.stragglers[0].rank, 2);
  EXPECT_EQ(r.stragglers[0].coord.pp, 1);
  EXPECT_EQ(r.stragglers[0].coord.dp, 0);
  EXPECT_DOUBLE_EQ(r.stragglers[0].slowdown, 3.0);
  EXPECT_EQ(r.slowdown, (std::vector<double>{1.0, 1.0, 3.0, 1.0}));
  // Stage 1 computes (0.3 + 0.1) / 2 = 0.2 per step, stage 0 0.1: max / mean = 0.2 / 0.15.
  ASSERT_EQ(r.stage_compute_s.size(), 2u);
  EXPECT_DOUBLE_EQ(r.stage_compute_s[1], 0.2);
  EXPECT_DOUBLE_EQ(r.imbalance, 0.2 / 0.15);
  EXPECT_EQ(r.first_step, 5);
  EXPECT_EQ(r.last_step, 8);
  const std::string line = MonitorLine(r);
  EXPECT_NE(line.find("rank 2 (pp 1, tp 0, dp 0) 3.00x"), std::string::npos) << line;
  EXPECT_NE(line.find("steps 5-8"), std::string::npos) << line;
}

TEST(Monitor, AHeavierStageIsNotAStraggler) {
  // p = 4: the last stage has 1.3x the expected FLOPs (the head) and takes 1.3x the time.
  std::vector<RankWindow> w = {Rank(0, 0, 0, 0.1), Rank(1, 1, 0, 0.1), Rank(2, 2, 0, 0.1),
                               Rank(3, 3, 0, 0.13, 1.3e9)};
  const MonitorReport r = AnalyseWindow(w, 4, 0.2, 1, 4);
  EXPECT_TRUE(r.stragglers.empty()) << MonitorLine(r);
  EXPECT_NE(MonitorLine(r).find("stragglers: none"), std::string::npos);
  EXPECT_DOUBLE_EQ(r.imbalance, 0.13 / (0.43 / 4));
  // ... but the same time for the base FLOPs on stage 2 is.
  w[2] = Rank(2, 2, 0, 0.13);
  const MonitorReport slow = AnalyseWindow(w, 4, 0.2, 1, 4);
  ASSERT_EQ(slow.stragglers.size(), 1u);
  EXPECT_EQ(slow.stragglers[0].rank, 2);
  EXPECT_NEAR(slow.stragglers[0].slowdown, 1.3, 1e-12);
}

TEST(Monitor, ThresholdAndOrder) {
  // Median of {1, 1.1, 1.5, 2} x 0.1 is 0.13: slowdowns 0.77, 0.85, 1.15, 1.54.
  std::vector<RankWindow> w = {Rank(0, 0, 0, 0.1), Rank(1, 0, 1, 0.11), Rank(2, 0, 2, 0.15),
                               Rank(3, 0, 3, 0.2)};
  const MonitorReport r = AnalyseWindow(w, 1, 0.1, 1, 4);
  ASSERT_EQ(r.stragglers.size(), 2u);
  EXPECT_EQ(r.stragglers[0].rank, 3);  // slowest first
  EXPECT_EQ(r.stragglers[1].rank, 2);
  EXPECT_NEAR(r.stragglers[1].slowdown, 0.15 / 0.13, 1e-12);
  EXPECT_EQ(AnalyseWindow(w, 1, 0.6, 1, 4).stragglers.size(), 0u);
  EXPECT_DOUBLE_EQ(r.imbalance, 1.0);  // one stage
}

TEST(Monitor, UtilisationBubbleAndIdle) {
  std::vector<RankWindow> w = {Rank(0, 0, 0, 0.3), Rank(1, 1, 0, 0.6)};
  const MonitorReport r = AnalyseWindow(w, 2, 0.2, 1, 4);
  ASSERT_EQ(r.utilisation.size(), 2u);
  EXPECT_DOUBLE_EQ(r.utilisation[0], 0.31);  // busy (compute + optimizer) / wall
  EXPECT_DOUBLE_EQ(r.utilisation[1], 0.61);
  // Bubble per rank: (span - compute) / span = 0.6 / 0.9 and 0.3 / 0.9; their mean.
  EXPECT_NEAR(r.bubble, (0.6 / 0.9 + 0.3 / 0.9) / 2, 1e-12);
  EXPECT_NEAR(r.ranks[0].idle_s(), 4 * (1.0 - 0.31 - 0.2), 1e-12);
  const OrderedJson j = MonitorJson(r);
  EXPECT_EQ(j["ranks"].size(), 2u);
  EXPECT_NEAR(j["ranks"][1]["stage_compute_s"].get<double>(), 0.6, 1e-12);  // per step
  EXPECT_TRUE(j["stragglers"].is_array());
}

TEST(Monitor, RanksWithoutWorkAreLeftOut) {
  // A window with no steps (or no expected FLOPs) neither counts in the median nor is named.
  RankWindow idle = Rank(1, 0, 1, 0.0);
  idle.steps = 0;
  std::vector<RankWindow> w = {Rank(0, 0, 0, 0.1), idle, Rank(2, 0, 2, 0.1)};
  const MonitorReport r = AnalyseWindow(w, 1, 0.2, 1, 4);
  EXPECT_TRUE(r.stragglers.empty());
  EXPECT_EQ(r.slowdown[1], 0.0);
  EXPECT_DOUBLE_EQ(r.stage_compute_s[0], 0.1);
}

TEST(Monitor, WireRoundTrip) {
  RankWindow w = Rank(5, 3, 2, 0.25, 7.5e9);
  w.coord.tp = 1;
  std::vector<double> wire(RankWindow::kWireSize);
  w.ToWire(wire.data());
  const RankWindow back = RankWindow::FromWire(wire.data());
  EXPECT_EQ(back.rank, 5);
  EXPECT_EQ(back.coord, (RankCoord{1, 2, 3}));
  EXPECT_EQ(back.steps, w.steps);
  EXPECT_EQ(back.stage_compute_s, w.stage_compute_s);
  EXPECT_EQ(back.busy_s, w.busy_s);
  EXPECT_EQ(back.comm_s, w.comm_s);
  EXPECT_EQ(back.span_s, w.span_s);
  EXPECT_EQ(back.wall_s, w.wall_s);
  EXPECT_EQ(back.expected_flops, w.expected_flops);
}

}  // namespace
}  // namespace ptdp::runtime
