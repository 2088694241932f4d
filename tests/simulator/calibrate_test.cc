// Calibration (costmodel/calibrate.h) against a "measurement" made by the simulator under a known
// profile A: starting from another profile B (the cpu preset), the fit must recover A's figures
// and bring the per-instruction error to about 0; runs of another layout are refused.
#include "costmodel/calibrate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "core/cluster.h"
#include "core/timeline_compare.h"
#include "costmodel/estimate.h"
#include "costmodel/gemm.h"
#include "schedule/schedule.h"
#include "simulator/refine.h"

namespace ptdp::costmodel {
namespace {

ParallelConfig Layout(int pp, int dp, int64_t global_batch) {
  ParallelConfig c;
  c.pp = pp;
  c.dp = dp;
  c.global_batch = global_batch;
  c.precision = Precision::kFp32;  // the cpu profile's
  return c;
}

// The figures the "machine" really has, as multiples of the cpu preset's: every fitted one far
// from 1 (the launch cost is not fitted, costmodel/calibrate.h, so the truth keeps the preset's).
CalibrationParams Truth() {
  CalibrationParams a;
  a.gemm_forward = 0.5;
  a.gemm_backward = 0.35;  // backwards relatively slower than the forward table says
  a.memory_bound = 0.3;
  a.p2p[0] = 0.3;
  a.collective[0] = 0.16;
  return a;
}

struct MeasuredRun {
  ModelSpec model;
  ClusterSpec start;  // profile B
  ParallelConfig layout;
  Program program;
  Timeline measured;  // simulated under A
};

// `optimizer_rate` > 0: the starting profile prices the optimizer step by that many G parameters/s.
MeasuredRun MakeRun(const ParallelConfig& layout, const CalibrationParams& truth_params = Truth(),
                    double optimizer_rate = 0) {
  MeasuredRun r;
  r.model = *LoadModel("tiny");
  r.start = *LoadCluster("cpu", layout.WorldSize());
  if (optimizer_rate > 0) r.start.profile.optimizer_Gparams_per_s = {optimizer_rate, "test rate"};
  r.layout = layout;
  ClusterSpec truth = r.start;
  truth.profile = ApplyCalibration(r.start.profile, truth_params, "test truth");
  sim::SimOptions o;
  o.record_timeline = true;
  auto s = sim::SimulateLayout(r.model, truth, layout, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  r.program = s->program;
  r.measured = s->result.timeline;
  return r;
}

void ExpectRecovered(const ParallelConfig& layout, bool has_reduce) {
  const MeasuredRun run = MakeRun(layout);
  auto fit = Calibrate(run.model, run.start, layout, run.program, run.measured, "test");
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  const CalibrationParams& x = fit->params;
  const CalibrationParams a = Truth();
  // The weak pull towards the starting figures biases a figure by less than this.
  EXPECT_NEAR(x.gemm_forward / a.gemm_forward, 1.0, 0.01) << layout.ToString();
  EXPECT_NEAR(x.gemm_backward / a.gemm_backward, 1.0, 0.01) << layout.ToString();
  EXPECT_NEAR(x.memory_bound / a.memory_bound, 1.0, 0.01) << layout.ToString();
  EXPECT_EQ(x.kernel_launch, 1.0);
  EXPECT_EQ(x.optimizer, 1.0);  // the preset has no optimizer rate: the step is memory_bound's
  // Links: the simulator's receives take exactly their transfer, so the fit is exact.
  EXPECT_NEAR(x.p2p[0] / a.p2p[0], 1.0, 1e-3) << layout.ToString();
  if (has_reduce) {
    EXPECT_NEAR(x.collective[0] / a.collective[0], 1.0, 1e-3) << layout.ToString();
  }
  EXPECT_EQ(x.p2p[1], 1.0);  // one node: the inter-node link is left alone
  EXPECT_GT(fit->median_error_before, 0.3);
  EXPECT_LT(fit->median_error_after, 0.01);

  // The fitted profile, simulated, reproduces the "measurement" instruction by instruction.
  ClusterSpec fitted = run.start;
  fitted.profile = fit->profile;
  sim::SimOptions o;
  o.record_timeline = true;
  auto again = sim::SimulateLayout(run.model, fitted, layout, o, false, nullptr, &run.program);
  ASSERT_TRUE(again.ok());
  auto cmp = CompareTimelines(again->result.timeline, run.measured, 0);
  ASSERT_TRUE(cmp.ok());
  EXPECT_LT(cmp->median_relative_error, 0.01) << layout.ToString();
  EXPECT_NEAR(cmp->predicted_step_s / cmp->measured_step_s, 1.0, 0.02) << layout.ToString();
}

TEST(Calibrate, RecoversTheProfileOfASimulatedRunPp4) {
  ExpectRecovered(Layout(4, 1, 8), true);
}

TEST(Calibrate, RecoversTheProfileOfASimulatedRunPp2Dp2) {
  ExpectRecovered(Layout(2, 2, 8), true);
}

// A profile with the optimizer step's rate: the step's own multiple is fitted from the
// optimizer-step instructions alone (calibrate.h), recovering the truth's, while memory_bound is
// still found from the layers' elementwise bytes (less sharply); the fitted profile's rate is that
// multiple of the starting one, with its source saying so.
TEST(Calibrate, FitsTheOptimizerRateApartFromMemoryBound) {
  CalibrationParams truth = Truth();
  truth.optimizer = 0.4;
  const MeasuredRun run = MakeRun(Layout(2, 1, 8), truth, /*optimizer_rate=*/0.13);
  auto fit = Calibrate(run.model, run.start, run.layout, run.program, run.measured, "opt");
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  const CalibrationParams& x = fit->params;
  // The step's classes price nothing else: its multiple is the truth's to the fit's precision.
  EXPECT_NEAR(x.optimizer / truth.optimizer, 1.0, 1e-3);
  // memory_bound, no longer pinned by the step, is told from the GEMM multiples only by the
  // layers' elementwise bytes, which every forward and backward class holds in nearly one ratio
  // to its GEMMs: the weak pull towards 1 biases it more than with the step (2.6% here, 0.5% on
  // the GEMMs, against under 1% above), and the predictions stay exact.
  EXPECT_NEAR(x.memory_bound / truth.memory_bound, 1.0, 0.03);
  EXPECT_NEAR(x.gemm_forward / truth.gemm_forward, 1.0, 0.01);
  EXPECT_LT(fit->median_error_after, 0.01);
  EXPECT_NEAR(fit->profile.optimizer_Gparams_per_s.value, 0.13 * x.optimizer, 1e-12);
  EXPECT_NE(fit->profile.optimizer_Gparams_per_s.source.find("opt"), std::string::npos);
  bool listed = false;
  for (const FittedFigure& f : fit->figures) listed |= f.name == "optimizer_Gparams_per_s";
  EXPECT_TRUE(listed);
}

// One GPU (bench/gpu/run_all.sh's calibrate stage): no receive and no reduce-grads, so the compute
// figures are fitted and every link figure stays the starting one, source and all; with one
// microbatch (three instructions: forward, backward, optimizer step) as with several.
TEST(Calibrate, OneRankFitsTheComputeAndLeavesTheLinks) {
  for (int64_t microbatches : {1, 4}) {
    const MeasuredRun run = MakeRun(Layout(1, 1, microbatches));
    auto fit = Calibrate(run.model, run.start, run.layout, run.program, run.measured, "one");
    ASSERT_TRUE(fit.ok()) << fit.status().ToString();
    const CalibrationParams& x = fit->params;
    const CalibrationParams a = Truth();
    EXPECT_NEAR(x.gemm_forward / a.gemm_forward, 1.0, 0.01) << microbatches;
    EXPECT_NEAR(x.gemm_backward / a.gemm_backward, 1.0, 0.01) << microbatches;
    EXPECT_NEAR(x.memory_bound / a.memory_bound, 1.0, 0.01) << microbatches;
    for (int c = 0; c < 2; ++c) {
      EXPECT_EQ(x.p2p[c], 1.0);
      EXPECT_EQ(x.collective[c], 1.0);
      EXPECT_EQ(x.latency[c], 1.0);
    }
    EXPECT_EQ(HardwareProfileToJson(fit->profile)["intra_node"].dump(),
              HardwareProfileToJson(run.start.profile)["intra_node"].dump());
    for (const FittedFigure& f : fit->figures) {
      EXPECT_EQ(f.name.find("node."), std::string::npos) << f.name;
    }
    EXPECT_GT(fit->median_error_before, 0.3);
    EXPECT_LT(fit->median_error_after, 0.01) << microbatches;
  }
}

TEST(Calibrate, FittedFiguresNameTheirSource) {
  const MeasuredRun run = MakeRun(Layout(4, 1, 8));
  auto fit = Calibrate(run.model, run.start, run.layout, run.program, run.measured, "RUN-X");
  ASSERT_TRUE(fit.ok());
  const HardwareProfile& p = fit->profile;
  for (const std::string* s :
       {&p.memory_bound_GBps.source, &p.gemm.source, &p.gemm_backward_efficiency.source,
        &p.intra_node.send_recv_GBps.source}) {
    EXPECT_EQ(s->rfind("RUN-X", 0), 0u) << *s;
  }
  // Not fitted.
  EXPECT_EQ(p.peak_tflops.source, run.start.profile.peak_tflops.source);
  EXPECT_EQ(p.kernel_launch_us.source, run.start.profile.kernel_launch_us.source);
  auto back = HardwareProfileFromJson(Json::parse(HardwareProfileToJson(p).dump()), "fitted");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_DOUBLE_EQ(back->gemm_backward_efficiency.value, p.gemm_backward_efficiency.value);
}

// A run of the starting profile itself moves nothing: the fitted profile is the starting one,
// figure for figure and source for source.
TEST(Calibrate, ARunOfTheStartingProfileLeavesItAlone) {
  const ParallelConfig layout = Layout(2, 2, 8);
  const ModelSpec model = *LoadModel("tiny");
  const ClusterSpec cpu = *LoadCluster("cpu", 4);
  sim::SimOptions o;
  o.record_timeline = true;
  auto s = sim::SimulateLayout(model, cpu, layout, o);
  ASSERT_TRUE(s.ok());
  auto fit = Calibrate(model, cpu, layout, s->program, s->result.timeline, "self");
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_EQ(HardwareProfileToJson(fit->profile).dump(), HardwareProfileToJson(cpu.profile).dump());
  EXPECT_LT(fit->median_error_before, 1e-6);
}

// A link's busbw curve is the figure its collective is priced at: a fitted multiplier scales it
// with the constant it replaces (send/recv curves with the point-to-point one), naming the fit.
TEST(Calibrate, ScalesBusbwCurvesWithTheirConstants) {
  HardwareProfile start = LoadCluster("selene", 8)->profile;
  start.inter_node.busbw_curves = {BusbwCurve{"all_reduce", 0, "test", {1e6, 1e8}, {40, 160}},
                                   BusbwCurve{"send_recv", 0, "test", {1e6}, {20}}};
  CalibrationParams x;
  x.collective[1] = 0.5;
  x.p2p[1] = 2;
  const HardwareProfile fitted = ApplyCalibration(start, x, "fit");
  EXPECT_EQ(fitted.inter_node.busbw_curves[0].busbw_GBps, (std::vector<double>{20, 80}));
  EXPECT_EQ(fitted.inter_node.busbw_curves[1].busbw_GBps, (std::vector<double>{40}));
  EXPECT_NE(fitted.inter_node.busbw_curves[0].source.find("fit: every point x 0.5"),
            std::string::npos);
  EXPECT_EQ(fitted.intra_node.busbw_curves.size(), 0u);
}

// The fused-attention rates are not fitted (no multiplier of CalibrationParams prices them), and
// the two move together: a model with dropout and one without keep the ratio of their rates.
TEST(Calibrate, KeepsTheTwoAttentionRatesConsistent) {
  HardwareProfile start = LoadCluster("selene", 8)->profile;
  start.attention_tflops = {400, "test"};
  start.attention_dropout_tflops = {260, "test with dropout"};
  CalibrationParams x;
  x.gemm_forward = 0.5, x.gemm_backward = 0.7, x.gemm_size = 0.9, x.memory_bound = 2;
  const HardwareProfile fitted = ApplyCalibration(start, x, "fit");
  EXPECT_EQ(fitted.attention_dropout_tflops.value / start.attention_dropout_tflops.value,
            fitted.attention_tflops.value / start.attention_tflops.value);
  EXPECT_EQ(fitted.attention_dropout_tflops.source.find("fit") != std::string::npos,
            fitted.attention_tflops.source.find("fit") != std::string::npos);
}

TEST(Calibrate, RefusesARunOfAnotherLayout) {
  const MeasuredRun pp4 = MakeRun(Layout(4, 1, 8));
  const MeasuredRun pp2 = MakeRun(Layout(2, 2, 8));
  auto r = Calibrate(pp4.model, pp4.start, pp4.layout, pp4.program, pp2.measured, "x");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("another layout"), std::string::npos) << r.status().message();
  // Same shape, but an instruction the Program does not have.
  Timeline odd = pp4.measured;
  odd.events.front().instr.microbatch = 99;
  r = Calibrate(pp4.model, pp4.start, pp4.layout, pp4.program, odd, "x");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not in the plan's Program"), std::string::npos)
      << r.status().message();
}

// The quantile the fit matches: half of every compute class's instances stretched threefold (a
// shared machine's preemption only adds time) move the median, not the lower quartile; a quantile
// outside (0, 1] is refused.
TEST(Calibrate, TheQuantileChoosesWhatNoiseItIgnores) {
  const MeasuredRun run = MakeRun(Layout(4, 1, 32));
  Timeline noisy = run.measured;
  std::map<std::tuple<int32_t, Op, int32_t>, int> seen;
  for (TimelineEvent& e : noisy.events) {
    if (e.instr.op != Op::kForward && e.instr.op != Op::kBackward) continue;
    if (seen[{e.pp_rank, e.instr.op, e.instr.chunk}]++ % 2 == 1) e.end_ns += 2 * e.Duration();
  }
  auto lower = Calibrate(run.model, run.start, run.layout, run.program, noisy, "q", 0.25);
  ASSERT_TRUE(lower.ok()) << lower.status().ToString();
  EXPECT_NEAR(lower->params.gemm_forward / Truth().gemm_forward, 1.0, 0.01);
  EXPECT_NEAR(lower->params.memory_bound / Truth().memory_bound, 1.0, 0.01);
  auto median = Calibrate(run.model, run.start, run.layout, run.program, noisy, "q", 0.5);
  ASSERT_TRUE(median.ok()) << median.status().ToString();
  EXPECT_LT(median->params.gemm_forward / Truth().gemm_forward, 0.8);
  for (double q : {0.0, -0.5, 1.5}) {
    auto bad = Calibrate(run.model, run.start, run.layout, run.program, noisy, "q", q);
    ASSERT_FALSE(bad.ok()) << q;
    EXPECT_NE(bad.status().message().find("quantile"), std::string::npos);
  }
}

// Two runs whose messages differ in size (microbatch 1 and 4) tell the link's latency from its
// bandwidth, and GEMMs of other sizes the table's size dependence, which one run cannot: fitted
// together they recover both, and every compute figure.
TEST(Calibrate, TwoRunsOfOtherMessageSizesFitTheLatency) {
  CalibrationParams truth = Truth();
  truth.latency[0] = 4;   // a link slower to start than the preset says
  truth.gemm_size = 0.9;  // and large GEMMs slower than the preset's table says
  const ModelSpec model = *LoadModel("tiny");
  ParallelConfig big = Layout(4, 1, 16);
  big.mbs = 4;
  std::vector<Program> programs;
  std::vector<Timeline> timelines;
  std::vector<ParallelConfig> layouts = {Layout(4, 1, 16), big};
  const ClusterSpec start = *LoadCluster("cpu", 4);
  ClusterSpec machine = start;
  machine.profile = ApplyCalibration(start.profile, truth, "test truth");
  for (const ParallelConfig& c : layouts) {
    sim::SimOptions o;
    o.record_timeline = true;
    auto s = sim::SimulateLayout(model, machine, c, o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    programs.push_back(s->program);
    timelines.push_back(s->result.timeline);
  }
  std::vector<CalibrationRun> runs;
  for (size_t i = 0; i < layouts.size(); ++i) {
    runs.push_back({&model, start, layouts[i], &programs[i], &timelines[i]});
  }
  auto both = Calibrate(runs, start.profile, "two runs");
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_NEAR(both->params.latency[0] / truth.latency[0], 1.0, 0.01);
  EXPECT_NEAR(both->params.p2p[0] / truth.p2p[0], 1.0, 0.01);
  EXPECT_NEAR(both->params.gemm_forward / truth.gemm_forward, 1.0, 0.01);
  EXPECT_NEAR(both->params.memory_bound / truth.memory_bound, 1.0, 0.01);
  EXPECT_NEAR(both->params.gemm_size / truth.gemm_size, 1.0, 0.01);
  EXPECT_NE(both->profile.intra_node.latency_us.source.find("two runs"), std::string::npos);
  // One run alone has one message size: the latency is kept, the bandwidth takes it all.
  auto one = Calibrate({runs[0]}, start.profile, "one run");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->params.latency[0], 1.0);
  EXPECT_EQ(one->params.gemm_size, 1.0);  // nor the size dependence: one size of GEMMs
  // A run that is not of its plan is named.
  runs[1].measured = &timelines[0];
  auto bad = Calibrate(runs, start.profile, "x");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("run 2", 0), 0u) << bad.status().message();
}

// Measured GeLU rates are kept by the fit (costmodel/calibrate.h): a run simulated under A with
// the rates of a CPU profile (the GeLU then a large share of each layer) is fitted from the start
// with the same rates, recovering A's multiples as without them; the fitted profile carries the
// rates with their sources unchanged and reads back; and a run of the starting profile moves
// nothing.
TEST(Calibrate, KeepsTheMeasuredGeluRates) {
  const ModelSpec model = *LoadModel("tiny");
  const ParallelConfig layout = Layout(2, 1, 8);
  ClusterSpec start = *LoadCluster("cpu", 2);
  start.profile.gelu_forward_Gelems_per_s = {0.086, "a test forward rate"};
  start.profile.gelu_backward_Gelems_per_s = {0.066, "a test backward rate"};
  ClusterSpec machine = start;
  machine.profile = ApplyCalibration(start.profile, Truth(), "test truth");
  EXPECT_EQ(machine.profile.gelu_forward_Gelems_per_s.source, "a test forward rate");
  EXPECT_EQ(machine.profile.gelu_backward_Gelems_per_s.value, 0.066);
  sim::SimOptions o;
  o.record_timeline = true;
  auto s = sim::SimulateLayout(model, machine, layout, o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto fit = Calibrate(model, start, layout, s->program, s->result.timeline, "gelu");
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_NEAR(fit->params.gemm_forward / Truth().gemm_forward, 1.0, 0.01);
  EXPECT_NEAR(fit->params.gemm_backward / Truth().gemm_backward, 1.0, 0.01);
  EXPECT_NEAR(fit->params.memory_bound / Truth().memory_bound, 1.0, 0.01);
  EXPECT_LT(fit->median_error_after, 0.01);
  auto back =
      HardwareProfileFromJson(Json::parse(HardwareProfileToJson(fit->profile).dump()), "fitted");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->gelu_forward_Gelems_per_s.value, 0.086);
  EXPECT_EQ(back->gelu_forward_Gelems_per_s.source, "a test forward rate");
  EXPECT_EQ(back->gelu_backward_Gelems_per_s.source, "a test backward rate");
  auto self = sim::SimulateLayout(model, start, layout, o);
  ASSERT_TRUE(self.ok());
  auto same = Calibrate(model, start, layout, self->program, self->result.timeline, "self");
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(HardwareProfileToJson(same->profile).dump(),
            HardwareProfileToJson(start.profile).dump());
}

// Absent, the backward efficiency leaves every backward GEMM time bit for bit; 0.5 doubles the
// FLOP time and keeps the launches.
TEST(Calibrate, BackwardEfficiencyDividesTheFlopTime) {
  const ClusterSpec c = *LoadCluster("cpu", 1);
  HardwareProfile half = c.profile;
  half.gemm_backward_efficiency = {0.5, "test"};
  const Seconds launch = 2 * c.profile.kernel_launch_us.value * kUs;
  const Seconds one = GemmBackwardTime(c.profile, 512, 256, 1024);
  EXPECT_DOUBLE_EQ(GemmBackwardTime(half, 512, 256, 1024), 2 * (one - launch) + launch);
}

}  // namespace
}  // namespace ptdp::costmodel
