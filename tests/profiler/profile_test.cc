// The cpu profile end to end in-process: measure a tiny grid, convert to a HardwareProfile, write
// it as JSON and read it back with core's strict reader; and the conversion rules for links.
#include <gtest/gtest.h>

#include "core/hardware.h"
#include "profiler/profiler.h"
#include "runtime/comm/world.h"
#include "tests/profiler/cpu_delegate.h"

namespace ptdp::profiler {
namespace {

ProfileOptions TinyOptions() {
  ProfileOptions o;
  o.quick = true;
  o.gemm_m = {16, 64};
  o.gemm_n = {16, 32};
  o.gemm_k = {8, 64};
  o.host = "testhost";
  o.date = "2026-11-25";
  return o;
}

TEST(ProfileTest, CpuProfileRoundTripsThroughTheStrictReader) {
  auto backend = MakeBackend("cpu");
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  auto self = runtime::SelfComm(0);
  auto report = RunProfile(**backend, *self, *self, TinyOptions());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->gemm.size(), 8u);
  for (const auto& g : report->gemm) {
    EXPECT_GT(g.seconds, 0);
    EXPECT_NEAR(g.tflops, 2.0 * g.m * g.n * g.k / g.seconds / 1e12, 1e-9 * g.tflops);
  }
  EXPECT_TRUE(report->collectives.empty());  // one rank
  EXPECT_GT(report->stream_add_GBps, 0);
  EXPECT_GT(report->gelu_GBps, 0);
  EXPECT_GT(report->att_seconds, 0);

  auto profile = ToHardwareProfile(*report, "test-cpu", std::nullopt, LinkFallback{});
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  const Json j = Json::parse(HardwareProfileToJson(*profile).dump());
  auto back = HardwareProfileFromJson(j, "x.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->name, "test-cpu");
  EXPECT_EQ(back->precision, Precision::kFp32);
  EXPECT_EQ(back->gemm.dtype, "fp32");
  EXPECT_EQ(back->gemm.m, (std::vector<double>{16, 64}));
  ASSERT_EQ(back->gemm.tflops.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(back->gemm.tflops[i], report->gemm[i].tflops);
  // The backward GEMMs on the same grid, through CpuOps' calls, written as their own tables.
  ASSERT_EQ(report->gemm_backward_data.size(), 8u);
  ASSERT_EQ(report->gemm_backward_weight.size(), 8u);
  ASSERT_EQ(back->gemm_backward_data.tflops.size(), 8u);
  ASSERT_EQ(back->gemm_backward_weight.tflops.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_GT(report->gemm_backward_data[i].seconds, 0);
    EXPECT_DOUBLE_EQ(back->gemm_backward_data.tflops[i], report->gemm_backward_data[i].tflops);
    EXPECT_DOUBLE_EQ(back->gemm_backward_weight.tflops[i], report->gemm_backward_weight[i].tflops);
  }
  EXPECT_EQ(back->gemm_backward_data.m, back->gemm.m);
  EXPECT_NE(back->gemm_backward_data.source.find("LinearBackwardData"), std::string::npos);
  EXPECT_NE(back->gemm_backward_weight.source.find("LinearBackwardWeight"), std::string::npos);
  EXPECT_EQ(back->gpus_per_node.value, 1);
  EXPECT_NE(back->gemm.source.find("ptdp profile run on "), std::string::npos);
  EXPECT_NE(back->hbm_GBps.source.find("2026-11-25"), std::string::npos);
  EXPECT_NE(back->intra_node.send_recv_GBps.source.find("not measured (one rank"),
            std::string::npos);
  // The default peak is the best measured GEMM and says so.
  double best = 0;
  for (const auto& g : report->gemm) best = std::max(best, g.tflops);
  EXPECT_DOUBLE_EQ(back->peak_tflops.value, best);
  EXPECT_NE(back->peak_tflops.source.find("not a datasheet peak"), std::string::npos);
  // Attention forward and backward as CpuOps' fused form, written as the fused-attention rate.
  ASSERT_GT(report->att_backward_seconds, 0);
  EXPECT_DOUBLE_EQ(back->attention_tflops.value, report->att_train_tflops);
  EXPECT_NE(back->attention_tflops.source.find("fused form"), std::string::npos);
  // The cross-entropy's rate: its logits over its measured time, written with what was timed.
  ASSERT_GT(report->ce_seconds, 0);
  EXPECT_NEAR(back->cross_entropy_Glogits_per_s.value,
              double(report->ce_rows) * report->ce_vocab / report->ce_seconds / 1e9,
              1e-9 * back->cross_entropy_Glogits_per_s.value);
  EXPECT_NE(back->cross_entropy_Glogits_per_s.source.find("cross-entropy forward"),
            std::string::npos);
  // The GeLU timed by its elements both ways; the elementwise bytes then at the streaming rate.
  ASSERT_GT(report->gelu_forward_seconds, 0);
  ASSERT_GT(report->gelu_backward_seconds, 0);
  EXPECT_DOUBLE_EQ(back->gelu_forward_Gelems_per_s.value,
                   double(report->gelu_elements) / report->gelu_forward_seconds / 1e9);
  EXPECT_DOUBLE_EQ(back->gelu_backward_Gelems_per_s.value,
                   double(report->gelu_elements) / report->gelu_backward_seconds / 1e9);
  EXPECT_NE(back->gelu_backward_Gelems_per_s.source.find("GeluBackward"), std::string::npos);
  EXPECT_DOUBLE_EQ(back->memory_bound_GBps.value, report->stream_add_GBps);
  EXPECT_NE(back->memory_bound_GBps.source.find("streaming"), std::string::npos);
  // The whole optimizer step timed by its parameters (weight, gradient, m and v spanning the
  // streaming add's bytes), written as the step's rate with what was timed.
  ASSERT_GT(report->optimizer_seconds, 0);
  EXPECT_EQ(report->optimizer_params, int64_t(report->stream_bytes / 16));
  EXPECT_DOUBLE_EQ(back->optimizer_Gparams_per_s.value,
                   double(report->optimizer_params) / report->optimizer_seconds / 1e9);
  EXPECT_NE(back->optimizer_Gparams_per_s.source.find("AdamWMany"), std::string::npos);
}

TEST(ProfileTest, RejectsABadGrid) {
  auto backend = MakeBackend("cpu");
  ASSERT_TRUE(backend.ok());
  auto self = runtime::SelfComm(0);
  ProfileOptions o = TinyOptions();
  o.gemm_k = {64, 8};
  auto report = RunProfile(**backend, *self, *self, o);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(report.status().message().find("--gemm-k"), std::string::npos);
}

// --attention picks the timed shape; anything but 4 positive sizes is bad input naming the flag.
TEST(ProfileTest, AttentionAtAGivenShape) {
  auto backend = MakeBackend("cpu");
  ASSERT_TRUE(backend.ok());
  auto self = runtime::SelfComm(0);
  ProfileOptions o = TinyOptions();
  o.attention = {1, 32, 0, 16};
  auto bad = RunProfile(**backend, *self, *self, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--attention"), std::string::npos);
  o.attention = {2, 32, 4, 16};
  auto report = RunProfile(**backend, *self, *self, o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->att_b, 2);
  EXPECT_EQ(report->att_s, 32);
  EXPECT_EQ(report->att_heads, 4);
  EXPECT_EQ(report->att_d, 16);
}

// The attention is timed a second time with dropout 0.1 at the same shape, through CpuOps' fused
// form with the mask regenerated, and written as attention_dropout_tflops with its run and shape;
// the raw JSON and the text print both rates.
TEST(ProfileTest, AttentionWithDropoutAtTheSameShape) {
  auto backend = MakeBackend("cpu");
  ASSERT_TRUE(backend.ok());
  auto self = runtime::SelfComm(0);
  ProfileOptions o = TinyOptions();
  o.attention = {2, 32, 4, 16};
  auto report = RunProfile(**backend, *self, *self, o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->att_dropout_p, 0.1);
  ASSERT_GT(report->att_dropout_seconds, 0);
  ASSERT_GT(report->att_dropout_backward_seconds, 0);
  const double causal_train_flops = 7.0 * 2 * 32 * 32 * 4 * 16;
  EXPECT_NEAR(report->att_dropout_train_tflops,
              causal_train_flops /
                  (report->att_dropout_seconds + report->att_dropout_backward_seconds) / 1e12,
              1e-9 * report->att_dropout_train_tflops);
  EXPECT_NE(report->attention_dropout_kind.find("attention dropout 0.1"), std::string::npos);
  EXPECT_NE(report->attention_kind.find("no dropout"), std::string::npos);

  auto profile = ToHardwareProfile(*report, "test-cpu", std::nullopt, LinkFallback{});
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  auto back = HardwareProfileFromJson(Json::parse(HardwareProfileToJson(*profile).dump()), "x");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_DOUBLE_EQ(back->attention_dropout_tflops.value, report->att_dropout_train_tflops);
  EXPECT_DOUBLE_EQ(back->attention_tflops.value, report->att_train_tflops);
  const std::string& src = back->attention_dropout_tflops.source;
  EXPECT_NE(src.find("ptdp profile run on "), std::string::npos) << src;
  EXPECT_NE(
      src.find("causal attention forward + backward with dropout 0.1 (b=2 s=32 heads=4 d=16)"),
      std::string::npos)
      << src;
  EXPECT_NE(src.find("fused form"), std::string::npos) << src;

  const OrderedJson raw = ReportToJson(*report);
  EXPECT_EQ(raw["attention"]["forward_backward_causal_tflops"].get<double>(),
            report->att_train_tflops);
  EXPECT_EQ(raw["attention"]["dropout"]["p"].get<double>(), 0.1);
  EXPECT_EQ(raw["attention"]["dropout"]["forward_backward_causal_tflops"].get<double>(),
            report->att_dropout_train_tflops);
  const std::string text = ReportToText(*report);
  EXPECT_NE(text.find("# attention backward"), std::string::npos) << text;
  EXPECT_NE(text.find("# attention with dropout 0.1: forward"), std::string::npos) << text;
}

// A backend whose attention with dropout ran another kernel than without (cuDNN refusing the
// dropout graph) answers 0 for its backward: the profile then has no attention_dropout_tflops,
// and the raw report no dropout figures, rather than another kernel's rate.
class DropoutRefusedBackend final : public testing::CpuDelegate {
 public:
  Result<double> TimeAttentionBackward(int64_t b, int64_t s, int64_t h, int64_t d, double p,
                                       const TimingOptions& t) override {
    if (p > 0) return 0.0;
    return cpu().TimeAttentionBackward(b, s, h, d, p, t);
  }
};

TEST(ProfileTest, ADropoutAttentionOnAnotherKernelIsNotWritten) {
  DropoutRefusedBackend backend;
  auto self = runtime::SelfComm(0);
  auto report = RunProfile(backend, *self, *self, TinyOptions());
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_GT(report->att_train_tflops, 0);
  EXPECT_EQ(report->att_dropout_train_tflops, 0);
  EXPECT_EQ(report->att_dropout_seconds, 0);
  auto profile = ToHardwareProfile(*report, "x", std::nullopt, LinkFallback{});
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  const OrderedJson j = HardwareProfileToJson(*profile);
  EXPECT_TRUE(j.contains("attention_tflops"));
  EXPECT_FALSE(j.contains("attention_dropout_tflops"));
  EXPECT_FALSE(ReportToJson(*report)["attention"].contains("dropout"));
  EXPECT_EQ(ReportToText(*report).find("attention with dropout"), std::string::npos);
}

TEST(ProfileTest, UnknownBackendIsBadInput) {
  auto b = MakeBackend("tpu");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
}

// A synthetic report with collectives: the links take the largest message's bus bandwidth and the
// smallest all-reduce's time as latency.
ProfileReport SyntheticReport(const std::string& backend, int ranks) {
  ProfileReport r;
  r.backend = backend;
  r.device = "Test GPU";
  r.host = "h";
  r.date = "2026-11-25";
  r.gemm_dtype = backend == "cuda" ? "bf16" : "fp32";
  r.precision = backend == "cuda" ? Precision::kBf16 : Precision::kFp32;
  r.ranks = ranks;
  r.gemm_m = {1};
  r.gemm_n = {1};
  r.gemm_k = {1};
  r.gemm = {GemmSample{1, 1, 1, 1e-6, 2e-6}};
  r.stream_bytes = 1 << 20;
  r.stream_add_GBps = 100;
  r.gelu_GBps = 80;
  r.launch_us = 3;
  r.memory_bytes = 80.0 * (1 << 30);
  r.workspace_bytes = 1 << 25;
  if (ranks > 1) {
    for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                         Collective::kSendRecv}) {
      for (Bytes size : {Bytes(4096), Bytes(1) << 30}) {
        CollectiveSample s;
        s.op = c;
        s.ranks = c == Collective::kSendRecv ? 2 : ranks;
        s.size = size;
        s.seconds = size == 4096 ? 20e-6 : 0.01;
        s.algbw_GBps = AlgorithmBandwidth(size, s.seconds) / 1e9;
        s.busbw_GBps = BusBandwidth(c, s.ranks, size, s.seconds) / 1e9;
        r.collectives.push_back(s);
      }
    }
  }
  return r;
}

TEST(ProfileTest, MeasuredLinksUseLargestMessageAndSmallestLatency) {
  auto p = ToHardwareProfile(SyntheticReport("cuda", 8), "x", std::nullopt, LinkFallback{});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const double algbw = double(Bytes(1) << 30) / 0.01 / 1e9;
  EXPECT_DOUBLE_EQ(p->intra_node.all_reduce_busbw_GBps.value, algbw * 1.75);
  EXPECT_DOUBLE_EQ(p->intra_node.all_gather_busbw_GBps.value, algbw * 0.875);
  EXPECT_DOUBLE_EQ(p->intra_node.send_recv_GBps.value, algbw);
  EXPECT_DOUBLE_EQ(p->intra_node.latency_us.value, 20);
  // Each collective's sizes as a busbw curve measured with its ranks, naming the run.
  ASSERT_EQ(p->intra_node.busbw_curves.size(), 4u);
  const BusbwCurve& ar = p->intra_node.busbw_curves[0];
  EXPECT_EQ(ar.collective, "all_reduce");
  EXPECT_EQ(ar.ranks, 8);
  EXPECT_EQ(ar.bytes, (std::vector<double>{4096, double(Bytes(1) << 30)}));
  EXPECT_DOUBLE_EQ(ar.busbw_GBps[0], 4096 / 20e-6 / 1e9 * 1.75);
  EXPECT_DOUBLE_EQ(ar.busbw_GBps[1], algbw * 1.75);
  EXPECT_NE(ar.source.find("ptdp profile run on Test GPU"), std::string::npos) << ar.source;
  EXPECT_EQ(p->intra_node.busbw_curves[3].ranks, 2);
  EXPECT_EQ(p->gpus_per_node.value, 8);
  EXPECT_EQ(p->precision, Precision::kBf16);
  // One node: the inter-node figures are the intra-node ones, and say so.
  EXPECT_DOUBLE_EQ(p->inter_node.all_reduce_busbw_GBps.value,
                   p->intra_node.all_reduce_busbw_GBps.value);
  EXPECT_NE(p->inter_node.all_reduce_busbw_GBps.source.find("not measured (one node)"),
            std::string::npos);
}

// A backend that does not time the GeLU by its elements (cuda) keeps memory_bound_GBps from its
// GeLU kernel's bytes, as GPU profiles always had it, and writes no GeLU rates.
TEST(ProfileTest, CudaKeepsTheGeluBandwidthAsMemoryBound) {
  auto p = ToHardwareProfile(SyntheticReport("cuda", 8), "x", std::nullopt, LinkFallback{});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_DOUBLE_EQ(p->memory_bound_GBps.value, 80);
  EXPECT_NE(p->memory_bound_GBps.source.find("GeLU forward kernel"), std::string::npos);
  EXPECT_EQ(p->gelu_forward_Gelems_per_s.value, 0.0);
  EXPECT_FALSE(HardwareProfileToJson(*p).contains("gelu_forward_Gelems_per_s"));
  // Nor an optimizer rate: its step keeps its bytes at memory_bound_GBps.
  EXPECT_EQ(p->optimizer_Gparams_per_s.value, 0.0);
  EXPECT_FALSE(HardwareProfileToJson(*p).contains("optimizer_Gparams_per_s"));
}

TEST(ProfileTest, OneGpuNeedsLinksFromAnotherProfile) {
  auto p = ToHardwareProfile(SyntheticReport("cuda", 1), "x", std::nullopt, LinkFallback{});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("--links-from"), std::string::npos);

  auto donor = ToHardwareProfile(SyntheticReport("cuda", 8), "donor", std::nullopt, LinkFallback{});
  ASSERT_TRUE(donor.ok());
  LinkFallback fb{&*donor, "donor.json"};
  auto q = ToHardwareProfile(SyntheticReport("cuda", 1), "x", Sourced{989, "datasheet"}, fb);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_DOUBLE_EQ(q->intra_node.all_reduce_busbw_GBps.value,
                   donor->intra_node.all_reduce_busbw_GBps.value);
  EXPECT_NE(q->intra_node.all_reduce_busbw_GBps.source.find("copied from donor.json"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(q->peak_tflops.value, 989);
  EXPECT_EQ(q->peak_tflops.source, "datasheet");
}

}  // namespace
}  // namespace ptdp::profiler
