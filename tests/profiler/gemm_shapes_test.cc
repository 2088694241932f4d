// --gemm-shapes-of: the flags parsed into the models' shapes (each once), bad flags refused with
// one line naming the flag, and the points timed by a backend's three GEMM calls (a backend that
// times no backward GEMM refused).
#include "profiler/gemm_shapes.h"

#include <gtest/gtest.h>

#include <set>

#include "core/gemm_points.h"
#include "tests/profiler/cpu_delegate.h"

namespace ptdp::profiler {
namespace {

// tiny (h 64, ffn 256, V 256) twice, at t 1 and 2: fc1's shape equals the logits' at either t,
// and the second tiny adds nothing, so 4 shapes per (mbs, t).
TEST(GemmShapes, EveryShapeOnce) {
  ProfileOptions o;
  ASSERT_TRUE(ParseGemmShapes("tiny,tiny", "1,2", "1,2", &o).ok());
  std::set<GemmShape> want;
  for (const int t : {1, 2}) {
    for (const int b : {1, 2}) {
      for (const GemmShape& s : LinearGemmShapes(*LoadModel("tiny"), t, b)) want.insert(s);
    }
  }
  EXPECT_EQ(want.size(), 16u);
  EXPECT_EQ(o.gemm_shapes, std::vector<GemmShape>(want.begin(), want.end()));
  EXPECT_NE(o.gemm_shapes_of.find("of tiny,tiny at microbatch 1,2, t 1,2"), std::string::npos);
  ProfileOptions none;
  ASSERT_TRUE(ParseGemmShapes("", "", "", &none).ok());
  EXPECT_TRUE(none.gemm_shapes.empty());
}

TEST(GemmShapes, BadFlagsNameTheFlag) {
  const auto refused = [](const std::string& of, const std::string& mbs, const std::string& tp,
                          const std::string& want) {
    ProfileOptions o;
    const Status st = ParseGemmShapes(of, mbs, tp, &o);
    ASSERT_FALSE(st.ok()) << want;
    EXPECT_EQ(st.message().rfind(want, 0), 0u) << st.message();
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  };
  refused("", "2", "", "--gemm-shapes-mbs: needs --gemm-shapes-of");
  refused("", "", "2", "--gemm-shapes-tp: needs --gemm-shapes-of");
  refused("tiny", "", "", "--gemm-shapes-of: needs --gemm-shapes-mbs");
  refused("tiny", "0", "", "--gemm-shapes-mbs: \"0\" is not");
  refused("tiny", "1,,2", "", "--gemm-shapes-mbs: \"1,,2\" is not");
  refused("tiny", "1", "two", "--gemm-shapes-tp: \"two\" is not");
  refused("tiny", "1", "3", "--gemm-shapes-tp: 3 does not divide");
  refused("tiny,", "1", "", "--gemm-shapes-of: an empty model name");
  refused("no-such-model", "1", "", "--gemm-shapes-of: ");
  refused("gpt-1t", "1048576", "", "--gemm-shapes-mbs: 1048576 sequences of gpt-1t are over 1e9");
}

// The cpu backend's three calls at each shape, written as 2 m n k over each median time.
TEST(GemmShapes, TimedByTheThreeCalls) {
  ProfileOptions o;
  ASSERT_TRUE(ParseGemmShapes("tiny", "1", "", &o).ok());
  auto backend = MakeBackend("cpu");
  ASSERT_TRUE(backend.ok());
  const TimingOptions quick{0.001, 3, 50};
  ProfileReport r;
  r.gemm_dtype = "fp32";
  ASSERT_TRUE(MeasureGemmPoints(**backend, quick, o, &r).ok());
  ASSERT_EQ(r.gemm_points.size(), o.gemm_shapes.size());
  HardwareProfile p;
  ASSERT_TRUE(AddGemmPoints(r, "a run", &p).ok());
  for (size_t i = 0; i < r.gemm_points.size(); ++i) {
    const GemmPointSample& s = r.gemm_points[i];
    EXPECT_EQ((GemmShape{s.m, s.n, s.k}), o.gemm_shapes[i]);
    const GemmPoint* point = p.gemm_points.Find(s.m, s.n, s.k);
    ASSERT_NE(point, nullptr);
    const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
    EXPECT_DOUBLE_EQ(point->forward_tflops, flops / s.forward / 1e12);
    EXPECT_DOUBLE_EQ(point->backward_data_tflops, flops / s.backward_data / 1e12);
    EXPECT_DOUBLE_EQ(point->backward_weight_tflops, flops / s.backward_weight / 1e12);
  }
  EXPECT_EQ(p.gemm_points.source.rfind("a run: fp32 the Linear GEMMs", 0), 0u);
  // A backend that times no backward GEMM (the stand-in answers "not measured") is refused.
  testing::CpuDelegate forward_only;
  ProfileReport r2;
  const Status st = MeasureGemmPoints(forward_only, quick, o, &r2);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("--gemm-shapes-of: the cpu backend does not time all three", 0), 0u)
      << st.message();
}

}  // namespace
}  // namespace ptdp::profiler
