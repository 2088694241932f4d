// gemm_points (core/gemm_points.h) in a hardware profile: optional, read strictly, written back
// as read, and each bad point refused with one line naming the field.
#include <gtest/gtest.h>

#include <functional>

#include "core/cluster.h"
#include "core/json.h"

namespace ptdp::planner {
namespace {

// The H200 profile without its own points: it has both backward tables, which points need.
Json H200Json() {
  auto j = ReadJsonFile(std::string(PTDP_SOURCE_DIR) + "/profiles/h200-measured.json");
  PTDP_CHECK(j.ok());
  j->erase("gemm_points");
  return *j;
}

// The shipped profile's own points (ptdp profile --gemm-shapes-of) read as they are.
TEST(ProfileSchema, ShippedH200GemmPointsRead) {
  auto j = ReadJsonFile(std::string(PTDP_SOURCE_DIR) + "/profiles/h200-measured.json");
  ASSERT_TRUE(j.ok());
  ASSERT_TRUE(j->contains("gemm_points"));
  auto profile = HardwareProfileFromJson(*j, "h200-measured");
  ASSERT_TRUE(profile.ok()) << profile.status().message();
  EXPECT_EQ(profile->gemm_points.points.size(), (*j)["gemm_points"]["points"].size());
  EXPECT_FALSE(profile->gemm_points.empty());
}

Json PointsJson() {
  const auto point = [](int64_t m, int64_t n, int64_t k, double f, double d, double w) {
    return Json{{"m", m},
                {"n", n},
                {"k", k},
                {"forward_tflops", f},
                {"backward_data_tflops", d},
                {"backward_weight_tflops", w}};
  };
  return {{"source", "test points"},
          {"points",
           {point(32768, 2304, 768, 610.5, 580.0, 540.25), point(32768, 768, 768, 500, 480, 450)}}};
}

TEST(ProfileSchema, OptionalGemmPoints) {
  auto plain = HardwareProfileFromJson(H200Json(), "p");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_TRUE(plain->gemm_points.empty());
  EXPECT_FALSE(HardwareProfileToJson(*plain).contains("gemm_points"));
  Json with = H200Json();
  with["gemm_points"] = PointsJson();
  auto a = HardwareProfileFromJson(with, "p");
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_EQ(a->gemm_points.points.size(), 2u);
  const GemmPoint* p = a->gemm_points.Find(32768, 2304, 768);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->forward_tflops, 610.5);
  EXPECT_EQ(p->backward_data_tflops, 580.0);
  EXPECT_EQ(p->backward_weight_tflops, 540.25);
  EXPECT_EQ(a->gemm_points.Find(32768, 768, 2304), nullptr);
  const OrderedJson written = HardwareProfileToJson(*a);
  EXPECT_EQ(Json::parse(written["gemm_points"].dump()), PointsJson());
  auto back = HardwareProfileFromJson(Json::parse(written.dump()), "p");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(HardwareProfileToJson(*back).dump(), written.dump());
}

TEST(ProfileSchema, GemmPointsRefusals) {
  const auto refused = [](const std::function<void(Json&)>& edit, const std::string& want) {
    Json j = H200Json();
    j["gemm_points"] = PointsJson();
    edit(j);
    auto b = HardwareProfileFromJson(j, "p");
    ASSERT_FALSE(b.ok()) << want;
    EXPECT_NE(b.status().message().find(want), std::string::npos) << b.status().message();
    EXPECT_EQ(b.status().message().find('\n'), std::string::npos) << b.status().message();
  };
  const auto point = [](Json& j) -> Json& { return j["gemm_points"]["points"][1]; };
  refused([](Json& j) { j["gemm_points"].erase("source"); }, "p.gemm_points.source");
  refused([](Json& j) { j["gemm_points"]["source"] = ""; }, "p.gemm_points.source: must name");
  refused([](Json& j) { j["gemm_points"]["grid"] = 1; }, "p.gemm_points");
  refused([](Json& j) { j["gemm_points"]["points"] = 5; }, "p.gemm_points.points: expected a list");
  refused([](Json& j) { j["gemm_points"]["points"] = Json::array(); },
          "p.gemm_points.points: needs at least one point");
  refused([](Json& j) { j["gemm_points"]["points"][0] = 3; },
          "p.gemm_points.points[0]: expected an object");
  refused([&](Json& j) { point(j).erase("backward_weight_tflops"); }, "p.gemm_points.points[1]");
  refused([&](Json& j) { point(j)["dtype"] = "bf16"; }, "p.gemm_points.points[1]");
  refused([&](Json& j) { point(j)["m"] = 0; },
          "p.gemm_points.points[1].m: 0 is outside [1, 1000000000]");
  refused([&](Json& j) { point(j)["n"] = 768.5; }, "p.gemm_points.points[1].n");
  refused([&](Json& j) { point(j)["k"] = 2000000000; }, "p.gemm_points.points[1].k: 2000000000");
  refused([&](Json& j) { point(j)["forward_tflops"] = 0; },
          "p.gemm_points.points[1].forward_tflops: 0 is outside (0, 100000]");
  refused([&](Json& j) { point(j)["backward_data_tflops"] = -1; },
          "p.gemm_points.points[1].backward_data_tflops: -1");
  refused([&](Json& j) { point(j)["backward_weight_tflops"] = 2e5; },
          "p.gemm_points.points[1].backward_weight_tflops: 200000 is outside");
  refused([&](Json& j) { point(j)["n"] = 2304; },
          "p.gemm_points.points[1]: (m, n, k) = (32768, 2304, 768) again (points[0] has it)");
  refused([](Json& j) { j.erase("gemm_backward_weight"); },
          "p.gemm_points: needs gemm_backward_data and gemm_backward_weight");
}

}  // namespace
}  // namespace ptdp::planner
