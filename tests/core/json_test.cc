#include "core/json.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

namespace ptdp {
namespace {

TEST(Json, MalformedTextNamesTheSource) {
  auto r = ParseJson("{\"a\": 1,", "model.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("model.json: malformed JSON"), std::string::npos);
}

TEST(Json, UnknownKeyIsAnErrorNamingThePath) {
  Json j = Json::parse(R"({"x": 1, "typo": 2})");
  JsonObjectReader r(j, "cluster.links");
  int x = 0;
  r.Required("x", &x);
  Status s = r.Finish();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "cluster.links.typo: unknown key");
}

TEST(Json, WrongTypeNamesKeyAndTypes) {
  Json j = Json::parse(R"({"layers": "four", "hidden": 1.5, "flag": 1})");
  {
    JsonObjectReader r(j, "model");
    int layers = 0;
    r.Required("layers", &layers);
    EXPECT_EQ(r.status().message(), "model.layers: expected an integer, got string");
  }
  {
    JsonObjectReader r(j, "model");
    int64_t hidden = 0;
    r.Required("hidden", &hidden);
    EXPECT_EQ(r.status().message(), "model.hidden: expected an integer, got number");
  }
  {
    JsonObjectReader r(j, "");
    bool flag = false;
    r.Required("flag", &flag);
    EXPECT_EQ(r.status().message(), "flag: expected true or false, got integer");
  }
}

TEST(Json, MissingRequiredKey) {
  Json j = Json::parse(R"({})");
  JsonObjectReader r(j, "model");
  int layers = 0;
  r.Required("layers", &layers);
  EXPECT_EQ(r.Finish().message(), "model.layers: missing required key");
}

TEST(Json, OptionalKeepsDefaultAndIntegralFloatIsAnInteger) {
  Json j = Json::parse(R"({"n": 4.0})");
  JsonObjectReader r(j, "");
  int n = 0, m = 7;
  r.Required("n", &n);
  r.Optional("m", &m);
  ASSERT_TRUE(r.Finish().ok());
  EXPECT_EQ(n, 4);
  EXPECT_EQ(m, 7);
}

TEST(Json, AtomicWriteLeavesNoPartialFile) {
  auto dir = std::filesystem::temp_directory_path() / "ptdp_json_test";
  std::filesystem::create_directories(dir);
  auto path = (dir / "out.json").string();
  ASSERT_TRUE(WriteFileAtomic(path, "{}\n").ok());
  EXPECT_EQ(ReadTextFile(path).value(), "{}\n");
  // A directory that does not exist: an error, and nothing written.
  auto bad = (dir / "missing" / "out.json").string();
  EXPECT_FALSE(WriteFileAtomic(bad, "{}").ok());
  EXPECT_FALSE(std::filesystem::exists(bad));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ptdp
