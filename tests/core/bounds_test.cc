// Bad input of every class the bounds issue lists: each is refused with one message naming the
// field, never a crash, a wrap or a silent acceptance.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/cluster.h"
#include "core/json.h"
#include "core/model.h"
#include "core/parallel.h"

namespace ptdp {
namespace {

std::string MessageOf(const Status& s) {
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  return s.message();
}

TEST(JsonBounds, NumberBeyondADoubleNamesThePath) {
  auto r = ParseJson(R"({"model": {"layers": [1, 1e400]}})", "m.json");
  EXPECT_EQ(MessageOf(r.status()),
            "m.json: model.layers[1]: number 1e400 is outside the range of a double");
}

TEST(JsonBounds, DuplicateKeyIsRefused) {
  auto r = ParseJson(R"({"a": {"x": 1, "x": 2}})", "m.json");
  EXPECT_EQ(MessageOf(r.status()), "m.json: a.x: duplicate key");
  // The same key in different objects is fine.
  EXPECT_TRUE(ParseJson(R"({"a": {"x": 1}, "b": {"x": 2}})", "m.json").ok());
}

TEST(JsonBounds, DepthLimitStopsBeforeRecursion) {
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  std::string m = MessageOf(ParseJson(deep, "d.json").status());
  EXPECT_NE(m.find("nested deeper than 64 levels"), std::string::npos) << m;
  EXPECT_LT(m.size(), 200u);
  // 64 levels exactly is allowed.
  std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(ParseJson(ok, "d.json").ok());
  std::string over = std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']');
  EXPECT_FALSE(ParseJson(over, "d.json").ok());
}

TEST(JsonBounds, ParsedValuesAreUnchanged) {
  auto r = ParseJson(
      R"({"a": [1, -2, 3.5, "s", true, null, {"b": []}], "u": 18446744073709551615})", "x");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, Json::parse(R"({"a": [1, -2, 3.5, "s", true, null, {"b": []}],
                                "u": 18446744073709551615})"));
}

TEST(FileBounds, OnlyRegularFilesWithinTheCap) {
  EXPECT_EQ(MessageOf(ReadJsonFile("/dev/zero").status()), "/dev/zero: not a regular file");
  auto dir = std::filesystem::temp_directory_path();
  EXPECT_NE(MessageOf(ReadJsonFile(dir.string()).status()).find("not a regular file"),
            std::string::npos);
  auto path = dir / ("ptdp_bounds_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream out(path);
    out << "{\"a\": 1}";
  }
  EXPECT_TRUE(ReadJsonFile(path.string()).ok());
  EXPECT_NE(MessageOf(ReadJsonFile(path.string(), 4).status()).find("over the 4-byte limit"),
            std::string::npos);
  std::filesystem::remove(path);
}

ModelSpec Tiny() {
  return *LoadModel("tiny");
}

TEST(ModelBounds, FieldsOutsideTheirRange) {
  ModelSpec m = Tiny();
  m.hidden = 4000000000000000000;
  EXPECT_NE(MessageOf(m.Validate()).find("hidden: 4000000000000000000 is outside [1, 1048576]"),
            std::string::npos);
  m = Tiny();
  m.vocab = 9000000000000000000;
  EXPECT_NE(MessageOf(m.Validate()).find("vocab: 9000000000000000000 is outside [1, 16777216]"),
            std::string::npos);
  m = Tiny();
  m.layers = 1000000;
  EXPECT_NE(MessageOf(m.Validate()).find("layers: 1000000 is outside [1, 10000]"),
            std::string::npos);
  m = Tiny();
  m.dropout = 1.0;
  EXPECT_NE(MessageOf(m.Validate()).find("dropout: 1 is outside [0, 1)"), std::string::npos);
}

TEST(ModelBounds, EveryPresetIsInRange) {
  for (const auto& p : ModelPresets()) {
    EXPECT_TRUE(p.spec.Validate().ok()) << p.spec.name;
    EXPECT_GT(ParameterCount(p.spec, 8), 0) << p.spec.name;
  }
}

TEST(ModelBounds, LargestModelInRangeDoesNotOverflow) {
  ModelSpec m = Tiny();
  m.layers = int(kMaxLayers);
  m.hidden = kMaxHidden;
  m.heads = 4096;
  m.ffn_hidden = kMaxFfnHidden;
  m.vocab = kMaxVocab;
  m.vocab_divisible_by = int(kMaxVocabDivisibleBy);
  m.tied_embeddings = false;
  ASSERT_TRUE(m.Validate().ok());
  EXPECT_GT(ParameterCount(m, 4096), 0);
  EXPECT_EQ(PaddedVocab(m, 4096) % (int64_t(65536) * 4096), 0);
}

TEST(LayoutBounds, PipelineProductNoLongerWraps) {
  ModelSpec m = Tiny();
  ParallelConfig c;
  c.pp = 65536;
  c.vp = 65536;
  c.schedule = ScheduleKind::kInterleaved;
  c.global_batch = 8;
  EXPECT_EQ(MessageOf(c.Validate(m)), "pp: 65536 is outside [1, 10000]");
  c.pp = 10000;
  c.vp = 10000;
  EXPECT_EQ(MessageOf(c.Validate(m)), "pp: pp*vp = 100000000 does not divide the 4 layers");
}

TEST(LayoutBounds, WorldSizeCapped) {
  ModelSpec m = Tiny();
  ParallelConfig c;
  c.tp = 4;
  c.pp = 4;
  c.dp = 1 << 20;
  c.global_batch = 1 << 20;
  EXPECT_EQ(MessageOf(c.Validate(m)), "tp*cp*pp*dp: 16777216 GPUs is outside [1, 1048576]");
  c.dp = 0;
  EXPECT_EQ(MessageOf(c.Validate(m)), "dp: 0 is outside [1, 1048576]");
  c.dp = 1;
  c.cp = 2048;
  EXPECT_EQ(MessageOf(c.Validate(m)), "cp: 2048 is outside [1, 1024]");
}

TEST(LayoutBounds, ActivationSizeOverflowIsRefused) {
  ModelSpec m = Tiny();
  m.layers = 10000;
  m.hidden = 4096;
  m.heads = 4096;
  m.seq_len = kMaxSeqLen;
  ParallelConfig c;
  c.mbs = 65536;
  c.global_batch = 65536;
  EXPECT_NE(MessageOf(c.Validate(m)).find("overflows a 64-bit integer"), std::string::npos);
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() /
              ("ptdp_bounds_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path) << text;
  return path.string();
}

TEST(ProfileBounds, FiguresOutsideTheirRange) {
  Json j = *ParseJson(EmbeddedProfiles()[0].json, "p");
  j["gpus_per_node"]["value"] = 1e10;
  EXPECT_EQ(MessageOf(HardwareProfileFromJson(j, "p").status()),
            "p.gpus_per_node.value: 1e+10 is outside (0, 1024]");
  j = *ParseJson(EmbeddedProfiles()[0].json, "p");
  j["inter_node"]["latency_us"]["value"] = 1e300;
  EXPECT_EQ(MessageOf(HardwareProfileFromJson(j, "p").status()),
            "p.inter_node.latency_us.value: 1e+300 is outside [0, 1e+06]");
  j = *ParseJson(EmbeddedProfiles()[0].json, "p");
  j["peak_tflops"]["value"] = 1e6;
  EXPECT_EQ(MessageOf(HardwareProfileFromJson(j, "p").status()),
            "p.peak_tflops.value: 1e+06 is outside (0, 100000]");
}

TEST(ProfileBounds, EveryBuiltInProfileIsInRange) {
  for (const auto& p : EmbeddedProfiles()) EXPECT_TRUE(LoadProfile(p.name).ok()) << p.name;
}

TEST(ClusterBounds, GpuCountsDoNotWrap) {
  std::string path =
      WriteTemp("cl.json", R"({"profile": "selene", "gpus_per_node": 65536, "nodes": 65536})");
  EXPECT_NE(MessageOf(LoadCluster(path).status()).find("gpus_per_node: 65536 is outside [1, 1024]"),
            std::string::npos);
  std::filesystem::remove(path);
  EXPECT_EQ(MessageOf(LoadCluster("selene", 0, 1 << 20).status()),
            "nodes x gpus_per_node: 8388608 GPUs is outside [1, 1048576]");
  EXPECT_EQ(MessageOf(LoadCluster("selene", -8, 0).status()), "--gpus: -8 is outside [1, 1048576]");
}

}  // namespace
}  // namespace ptdp
