// The GeLU epilogues and the bias gradient in `ptdp profile` (profiler/epilogues.h): the shapes
// they are timed at, the keys written from the timings with their sources (read back by core's
// strict reader), the keys left out when an epilogue does not resolve, and none on the cpu.
#include <gtest/gtest.h>

#include <vector>

#include "core/hardware.h"
#include "profiler/epilogues.h"
#include "profiler/profiler.h"
#include "runtime/comm/world.h"
#include "tests/profiler/cpu_delegate.h"

namespace ptdp::profiler {
namespace {

ProfileOptions Options() {
  ProfileOptions o;
  o.quick = true;
  o.gemm_m = o.gemm_n = o.gemm_k = {16};
  o.attention = {1, 64, 2, 16};  // T = 64 tokens, h = 32, f = 128
  o.host = "testhost";
  o.date = "2026-11-27";
  return o;
}

// A backend whose epilogues add 1 ps (forward) and 2 ps (backward) per GeLU element to the op
// without them (1 us; `forward_added` overrides the forward's), and whose bias gradient takes
// 4 ps per element; it records the shapes it was asked for.
class EpilogueBackend final : public testing::CpuDelegate {
 public:
  explicit EpilogueBackend(double forward_added = 1e-12) : forward_added_(forward_added) {}
  Result<EpilogueTimes> TimeGeluEpilogue(int64_t n, int64_t c, int64_t oc, bool backward,
                                         const TimingOptions&) override {
    calls.push_back({n, c, oc, backward ? 1 : 0});
    const double elements = double(n) * double(backward ? c : oc);
    return EpilogueTimes{1e-6 + elements * (backward ? 2e-12 : forward_added_), 1e-6};
  }
  Result<double> TimeBiasGrad(int64_t n, int64_t oc, const TimingOptions&) override {
    calls.push_back({n, oc, 0, 2});
    return double(n) * double(oc) * 4e-12;
  }
  std::vector<std::vector<int64_t>> calls;

 private:
  double forward_added_;
};

TEST(Epilogues, TimedAtTheAttentionModelsShapesAndWrittenWithSources) {
  EpilogueBackend backend;
  auto self = runtime::SelfComm(0);
  auto report = RunProfile(backend, *self, *self, Options());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  // fc1 forward (n, c, oc) = (T, h, f), fc2's input gradient (T, f, h), fc1's bias (T, f).
  EXPECT_EQ(backend.calls, (std::vector<std::vector<int64_t>>{
                               {64, 32, 128, 0}, {64, 128, 32, 1}, {64, 128, 0, 2}}));
  EXPECT_EQ(report->epi_tokens, 64);
  EXPECT_EQ(report->epi_hidden, 32);
  EXPECT_EQ(report->epi_ffn, 128);
  auto profile = ToHardwareProfile(*report, "x", std::nullopt, LinkFallback{});
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  auto back = HardwareProfileFromJson(Json::parse(HardwareProfileToJson(*profile).dump()), "x");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  // 1 ps, 2 ps and 4 ps per element: 1000, 500 and 250 G elements/s.
  EXPECT_NEAR(back->gelu_epilogue_Gelems_per_s.value, 1000, 1e-6);
  EXPECT_NEAR(back->dgelu_epilogue_Gelems_per_s.value, 500, 1e-6);
  EXPECT_NEAR(back->bias_grad_Gelems_per_s.value, 250, 1e-9);
  for (const Sourced* s : {&back->gelu_epilogue_Gelems_per_s, &back->dgelu_epilogue_Gelems_per_s,
                           &back->bias_grad_Gelems_per_s}) {
    EXPECT_NE(s->source.find("ptdp profile run on"), std::string::npos) << s->source;
    EXPECT_NE(s->source.find("2026-11-27"), std::string::npos) << s->source;
  }
  EXPECT_NE(back->gelu_epilogue_Gelems_per_s.source.find("GELU_AUX_BIAS"), std::string::npos);
  EXPECT_NE(back->dgelu_epilogue_Gelems_per_s.source.find("DGELU"), std::string::npos);
  const OrderedJson raw = ReportToJson(*report);
  ASSERT_TRUE(raw.contains("epilogues"));
  EXPECT_DOUBLE_EQ(raw["epilogues"]["bias_grad_time_us"].get<double>(), 64 * 128 * 4e-6);
  const std::string text = ReportToText(*report);
  EXPECT_NE(text.find("# gelu-aux epilogue (fc1 forward)"), std::string::npos) << text;
  EXPECT_NE(text.find("# bias gradient (64 x 128)"), std::string::npos) << text;
}

// An epilogue no slower than its op (timing noise) resolves no rate: neither epilogue key is
// written (both or neither), the text says so; the bias gradient's key stands alone.
TEST(Epilogues, AnUnresolvedEpilogueWritesNeither) {
  EpilogueBackend backend(0.0);
  auto self = runtime::SelfComm(0);
  auto report = RunProfile(backend, *self, *self, Options());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  auto profile = ToHardwareProfile(*report, "x", std::nullopt, LinkFallback{});
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  const OrderedJson j = HardwareProfileToJson(*profile);
  EXPECT_FALSE(j.contains("gelu_epilogue_Gelems_per_s"));
  EXPECT_FALSE(j.contains("dgelu_epilogue_Gelems_per_s"));
  EXPECT_TRUE(j.contains("bias_grad_Gelems_per_s"));
  EXPECT_TRUE(HardwareProfileFromJson(Json::parse(j.dump()), "x").ok());
  const std::string text = ReportToText(*report);
  EXPECT_NE(text.find("not resolved"), std::string::npos) << text;
  EXPECT_NE(text.find("both or neither"), std::string::npos) << text;
}

// Added time: positive, and a rate the profile may state (at most kMaxEpilogueGelemsPerSecond).
TEST(Epilogues, AddedSecondsOnlyWhereARateResolves) {
  EXPECT_DOUBLE_EQ(EpilogueAddedSeconds({3e-6, 1e-6}, 1e6), 2e-6);
  EXPECT_EQ(EpilogueAddedSeconds({1e-6, 1e-6}, 1e6), 0.0);
  EXPECT_EQ(EpilogueAddedSeconds({1e-6, 2e-6}, 1e6), 0.0);
  EXPECT_EQ(EpilogueAddedSeconds({0, 0}, 1e6), 0.0);
  // 1e-18 s over 1e6 elements: 1e24 elements/s, beyond any epilogue.
  EXPECT_EQ(EpilogueAddedSeconds({1e-6 + 1e-18 * 1e6, 1e-6}, 1e6), 0.0);
}

// The cpu backend runs no GeLU epilogue and no separate bias gradient: nothing timed or written.
TEST(Epilogues, NoneOnTheCpu) {
  auto backend = MakeBackend("cpu");
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  auto self = runtime::SelfComm(0);
  auto report = RunProfile(**backend, *self, *self, Options());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->epi_tokens, 0);
  auto profile = ToHardwareProfile(*report, "x", std::nullopt, LinkFallback{});
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  const OrderedJson j = HardwareProfileToJson(*profile);
  EXPECT_FALSE(j.contains("gelu_epilogue_Gelems_per_s"));
  EXPECT_FALSE(j.contains("bias_grad_Gelems_per_s"));
  EXPECT_FALSE(ReportToJson(*report).contains("epilogues"));
  EXPECT_EQ(EpiloguesText(*report), "");
}

}  // namespace
}  // namespace ptdp::profiler
