// `ptdp profile --attention-grid`: the cpu backend times every (s, d) of a small grid without and
// with dropout, each call holding the --attention shape's tokens and width, and the profile gets
// an attention_table beside the scalar rates; a point whose kernel differs or fails is left out,
// and a table that is then no grid is not written. Bad flags name --attention-grid.
#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "core/hardware.h"
#include "profiler/attention_grid.h"
#include "profiler/profiler.h"
#include "runtime/comm/world.h"
#include "tests/profiler/cpu_delegate.h"

namespace ptdp::profiler {
namespace {

// --attention 1 32 2 16 (T = 32 tokens, W = 32 wide); grid s {16, 32} x d {8, 16}.
ProfileOptions GridOptions() {
  ProfileOptions o;
  o.quick = true;
  o.gemm_m = o.gemm_n = o.gemm_k = {16};
  o.attention = {1, 32, 2, 16};
  o.attention_grid_s = {16, 32};
  o.attention_grid_d = {8, 16};
  o.host = "testhost";
  o.date = "2026-11-27";
  return o;
}

TEST(AttentionGrid, CpuGridBecomesTheProfilesTable) {
  auto backend = MakeBackend("cpu");
  ASSERT_TRUE(backend.ok());
  auto self = runtime::SelfComm(0);
  auto r = RunProfile(**backend, *self, *self, GridOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->att_grid.size(), 4u);
  EXPECT_EQ(r->att_grid_tokens, 32);
  EXPECT_EQ(r->att_grid_width, 32);
  // s-major; b = 32 / s sequences, heads = 32 / d.
  const std::pair<int64_t, int64_t> bh[] = {{2, 4}, {2, 2}, {1, 4}, {1, 2}};
  for (size_t i = 0; i < 4; ++i) {
    const AttentionGridSample& x = r->att_grid[i];
    EXPECT_EQ(x.s, i < 2 ? 16 : 32);
    EXPECT_EQ(x.d, i % 2 ? 16 : 8);
    EXPECT_EQ(x.b, bh[i].first);
    EXPECT_EQ(x.heads, bh[i].second);
    ASSERT_GT(x.tflops, 0) << x.note;
    ASSERT_GT(x.dropout_tflops, 0) << x.dropout_note;
    EXPECT_NEAR(x.tflops, 7.0 * x.b * x.s * x.s * x.heads * x.d / (x.forward + x.backward) / 1e12,
                1e-9 * x.tflops);
    EXPECT_NEAR(
        x.dropout_tflops,
        7.0 * x.b * x.s * x.s * x.heads * x.d / (x.dropout_forward + x.dropout_backward) / 1e12,
        1e-9 * x.dropout_tflops);
  }
  // (32, 16) is the --attention shape itself: its figures, not a second timing.
  EXPECT_EQ(r->att_grid[3].tflops, r->att_train_tflops);
  EXPECT_EQ(r->att_grid[3].dropout_tflops, r->att_dropout_train_tflops);

  auto p = ToHardwareProfile(*r, "grid", std::nullopt, LinkFallback{});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto back = HardwareProfileFromJson(Json::parse(HardwareProfileToJson(*p).dump()), "x");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const AttentionTable& t = back->attention_table;
  EXPECT_EQ(t.s, (std::vector<double>{16, 32}));
  EXPECT_EQ(t.d, (std::vector<double>{8, 16}));
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(t.tflops[i], r->att_grid[i].tflops);
    EXPECT_DOUBLE_EQ(t.dropout_tflops[i], r->att_grid[i].dropout_tflops);
  }
  EXPECT_NE(t.source.find("ptdp profile run on "), std::string::npos) << t.source;
  EXPECT_NE(t.source.find("b = round(32 / s) sequences and heads = round(32 / d)"),
            std::string::npos)
      << t.source;
  EXPECT_NE(t.source.find("dropout_tflops: "), std::string::npos) << t.source;
  // The scalar keys stay, at the --attention shape, for readers of one rate.
  EXPECT_DOUBLE_EQ(back->attention_tflops.value, r->att_train_tflops);
  EXPECT_DOUBLE_EQ(back->attention_dropout_tflops.value, r->att_dropout_train_tflops);
  const OrderedJson raw = ReportToJson(*r);
  ASSERT_EQ(raw["attention"]["grid"].size(), 4u);
  EXPECT_EQ(raw["attention"]["grid"][0]["heads"].get<int64_t>(), 4);
  EXPECT_TRUE(raw["attention"]["grid"][0].contains("dropout"));
  EXPECT_NE(ReportToText(*r).find("# attention grid"), std::string::npos);
}

// The cpu backend, but attention at some shapes runs "another kernel" (as cuDNN refusing a shape
// makes CudaOps fall back to kernels/cuda), fails, or refuses its dropout graph.
class ShapeQuirkBackend final : public testing::CpuDelegate {
 public:
  std::set<std::pair<int64_t, int64_t>> other_kernel, fails, no_dropout;

  Result<double> TimeAttention(int64_t b, int64_t s, int64_t h, int64_t d, double p,
                               const TimingOptions& t) override {
    if (fails.count({s, d})) return Status::Internal("attention at this shape failed");
    return cpu().TimeAttention(b, s, h, d, p, t);
  }
  Result<double> TimeAttentionBackward(int64_t b, int64_t s, int64_t h, int64_t d, double p,
                                       const TimingOptions& t) override {
    last_ = {s, d};
    if (p > 0 && no_dropout.count({s, d})) return 0.0;
    return cpu().TimeAttentionBackward(b, s, h, d, p, t);
  }
  std::string attention_kind(double p) const override {
    return other_kernel.count(last_) ? "another kernel" : cpu().attention_kind(p);
  }

 private:
  std::pair<int64_t, int64_t> last_;
};

Result<ProfileReport> RunQuirky(ShapeQuirkBackend& backend) {
  auto self = runtime::SelfComm(0);
  return RunProfile(backend, *self, *self, GridOptions());
}

// One point on another kernel: left out, which breaks the grid, so no table; the scalars stay.
TEST(AttentionGrid, APointOnAnotherKernelBreaksTheGrid) {
  ShapeQuirkBackend backend;
  backend.other_kernel = {{16, 8}};
  auto r = RunQuirky(backend);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->att_grid[0].tflops, 0);
  EXPECT_NE(r->att_grid[0].note.find("ran another kernel, not the kernel of attention_tflops"),
            std::string::npos)
      << r->att_grid[0].note;
  auto p = ToHardwareProfile(*r, "x", std::nullopt, LinkFallback{});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->attention_table.empty());
  EXPECT_GT(p->attention_tflops.value, 0);
  EXPECT_EQ(ReportToJson(*r)["attention"]["grid"][0]["left_out"].get<std::string>(),
            r->att_grid[0].note);
}

// A failing column (every s at d = 8) leaves a smaller grid, which is written; a point whose
// dropout graph is refused keeps its rate without dropout, and the table then has no complete
// dropout column.
TEST(AttentionGrid, FailuresLeaveOutPointsNotTheProfile) {
  ShapeQuirkBackend backend;
  backend.fails = {{16, 8}, {32, 8}};
  backend.no_dropout = {{16, 16}};
  auto r = RunQuirky(backend);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->att_grid[0].note.find("failed: attention at this shape failed"), std::string::npos);
  EXPECT_GT(r->att_grid[1].tflops, 0);
  EXPECT_EQ(r->att_grid[1].dropout_tflops, 0);
  auto p = ToHardwareProfile(*r, "x", std::nullopt, LinkFallback{});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const AttentionTable& t = p->attention_table;
  EXPECT_EQ(t.s, (std::vector<double>{16, 32}));
  EXPECT_EQ(t.d, (std::vector<double>{16}));
  EXPECT_EQ(t.tflops[0], r->att_grid[1].tflops);
  EXPECT_FALSE(t.HasDropout());
  EXPECT_EQ(t.dropout_tflops[1], r->att_grid[3].dropout_tflops);
}

TEST(AttentionGrid, BadFlagsNameTheFlag) {
  const auto bad = [](const std::vector<std::string>& args) {
    ProfileOptions o;
    const Status st = ParseAttentionGrid(args, &o);
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("--attention-grid"), std::string::npos) << st.message();
  };
  bad({"1024,abc", "64"});
  bad({"1024,", "64"});
  bad({"1024", "0"});
  bad({"1024", "-64"});
  bad({"1024"});
  ProfileOptions o;
  ASSERT_TRUE(ParseAttentionGrid({"1024,2048,4096", "64,128"}, &o).ok());
  EXPECT_EQ(o.attention_grid_s, (std::vector<int64_t>{1024, 2048, 4096}));
  EXPECT_EQ(o.attention_grid_d, (std::vector<int64_t>{64, 128}));
  EXPECT_TRUE(CheckAttentionGrid(o).ok());
  o.attention_grid_d = {128, 64};
  const Status st = CheckAttentionGrid(o);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--attention-grid: head dimensions must be positive integers, "
                              "increasing"),
            std::string::npos)
      << st.message();
  // RunProfile refuses it before measuring anything.
  auto backend = MakeBackend("cpu");
  ASSERT_TRUE(backend.ok());
  auto self = runtime::SelfComm(0);
  ProfileOptions run = GridOptions();
  run.attention_grid_d.clear();
  auto r = RunProfile(**backend, *self, *self, run);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--attention-grid: needs both"), std::string::npos);
}

}  // namespace
}  // namespace ptdp::profiler
