// The hardware profiles' schema: the embedded presets, optional keys, strict reading and the
// precision field (split from planner_test.cc).
#include <gtest/gtest.h>

#include <functional>

#include "core/cluster.h"
#include "core/json.h"

namespace ptdp::planner {
namespace {

TEST(Cluster, PresetsLoadAndAreStrict) {
  for (const auto& e : EmbeddedProfiles()) {
    auto p = LoadProfile(e.name);
    ASSERT_TRUE(p.ok()) << e.name << ": " << p.status().message();
    EXPECT_EQ(p->name, e.name);
  }
  auto c = LoadCluster("selene", 3072);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->nodes, 384);
  EXPECT_EQ(c->gpus_per_node, 8);
  EXPECT_DOUBLE_EQ(c->profile.peak_tflops.value, 312);
  EXPECT_FALSE(LoadCluster("selene", 3001).ok());  // not a multiple of 8
  auto unknown = LoadCluster("no-such-cluster", 8);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  auto partial = LoadCluster("cpu", 4);
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->Gpus(), 4);
}

// The embedded copy is the file in profiles/.
TEST(Cluster, EmbeddedProfileEqualsFile) {
  auto file = LoadProfile(std::string(PTDP_SOURCE_DIR) + "/profiles/selene.json");
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto emb = LoadProfile("selene");
  ASSERT_TRUE(emb.ok());
  EXPECT_EQ(HardwareProfileToJson(*file).dump(), HardwareProfileToJson(*emb).dump());
}

Json SeleneJson() {
  auto j = ReadJsonFile(std::string(PTDP_SOURCE_DIR) + "/profiles/selene.json");
  PTDP_CHECK(j.ok());
  return *j;
}

// attention_tflops is optional (absent in selene.json: 0), needs a source, and round-trips.
TEST(ProfileSchema, OptionalAttentionTflops) {
  EXPECT_EQ(HardwareProfileFromJson(SeleneJson(), "p")->attention_tflops.value, 0.0);
  Json with = SeleneJson();
  with["attention_tflops"] = {{"value", 150.0}, {"source", "a test figure"}};
  auto a = HardwareProfileFromJson(with, "p");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->attention_tflops.value, 150.0);
  auto back = HardwareProfileFromJson(Json::parse(HardwareProfileToJson(*a).dump()), "p");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->attention_tflops.source, "a test figure");
  with["attention_tflops"].erase("source");
  auto b = HardwareProfileFromJson(with, "p");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("p.attention_tflops"), std::string::npos)
      << b.status().message();
}

// attention_dropout_tflops: optional (0 when absent), read and round-tripped with its source,
// refused without a source, outside (0, 1e5], or without attention_tflops, each naming the field.
TEST(ProfileSchema, OptionalAttentionDropoutTflops) {
  EXPECT_EQ(HardwareProfileFromJson(SeleneJson(), "p")->attention_dropout_tflops.value, 0.0);
  Json with = SeleneJson();
  with["attention_tflops"] = {{"value", 150.0}, {"source", "a test figure"}};
  with["attention_dropout_tflops"] = {{"value", 120.0}, {"source", "a dropout figure"}};
  auto a = HardwareProfileFromJson(with, "p");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->attention_dropout_tflops.value, 120.0);
  EXPECT_EQ(a->attention_tflops.value, 150.0);
  auto back = HardwareProfileFromJson(Json::parse(HardwareProfileToJson(*a).dump()), "p");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->attention_dropout_tflops.value, 120.0);
  EXPECT_EQ(back->attention_dropout_tflops.source, "a dropout figure");
  // A profile without the key writes none.
  EXPECT_FALSE(HardwareProfileToJson(*HardwareProfileFromJson(SeleneJson(), "p"))
                   .contains("attention_dropout_tflops"));
  const auto refused = [](const Json& j, const std::string& want) {
    auto b = HardwareProfileFromJson(j, "p");
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.status().message().find(want), std::string::npos) << b.status().message();
  };
  Json no_source = with;
  no_source["attention_dropout_tflops"].erase("source");
  refused(no_source, "p.attention_dropout_tflops");
  Json empty_source = with;
  empty_source["attention_dropout_tflops"]["source"] = "";
  refused(empty_source, "p.attention_dropout_tflops");
  Json zero = with;
  zero["attention_dropout_tflops"]["value"] = 0;
  refused(zero, "p.attention_dropout_tflops.value: 0 is outside (0,");
  Json huge = with;
  huge["attention_dropout_tflops"]["value"] = 2e5;
  refused(huge, "p.attention_dropout_tflops.value: ");
  Json alone = with;
  alone.erase("attention_tflops");
  refused(alone, "p.attention_dropout_tflops: needs attention_tflops");
}

// attention_table: optional (empty when absent), points in any order read into a grid, written
// s-major and round-tripped with the source; each bad table refused with one line naming the field.
Json AttentionTableJson() {
  return {{"source", "a test grid"},
          {"points",
           {{{"s", 2048}, {"d", 128}, {"tflops", 420.0}, {"dropout_tflops", 260.0}},
            {{"s", 1024}, {"d", 64}, {"tflops", 200.0}},
            {{"s", 1024}, {"d", 128}, {"tflops", 300.0}, {"dropout_tflops", 180.0}},
            {{"s", 2048}, {"d", 64}, {"tflops", 280.0}, {"dropout_tflops", 170.0}}}}};
}

TEST(ProfileSchema, OptionalAttentionTable) {
  EXPECT_TRUE(HardwareProfileFromJson(SeleneJson(), "p")->attention_table.empty());
  EXPECT_FALSE(HardwareProfileToJson(*HardwareProfileFromJson(SeleneJson(), "p"))
                   .contains("attention_table"));
  Json with = SeleneJson();
  with["attention_table"] = AttentionTableJson();
  auto a = HardwareProfileFromJson(with, "p");
  ASSERT_TRUE(a.ok()) << a.status().message();
  const AttentionTable& t = a->attention_table;
  EXPECT_EQ(t.source, "a test grid");
  EXPECT_EQ(t.s, (std::vector<double>{1024, 2048}));
  EXPECT_EQ(t.d, (std::vector<double>{64, 128}));
  EXPECT_EQ(t.tflops, (std::vector<double>{200, 300, 280, 420}));
  EXPECT_EQ(t.dropout_tflops, (std::vector<double>{0, 180, 170, 260}));
  EXPECT_FALSE(t.HasDropout());  // (1024, 64) has none
  const OrderedJson written = HardwareProfileToJson(*a);
  EXPECT_FALSE(written["attention_table"]["points"][0].contains("dropout_tflops"));
  EXPECT_EQ(written["attention_table"]["points"][3]["s"].get<double>(), 2048);
  auto back = HardwareProfileFromJson(Json::parse(written.dump()), "p");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(HardwareProfileToJson(*back).dump(), written.dump());
  EXPECT_EQ(back->attention_table.tflops, t.tflops);
  EXPECT_EQ(back->attention_table.dropout_tflops, t.dropout_tflops);
  EXPECT_EQ(back->attention_table.source, "a test grid");
}

TEST(ProfileSchema, AttentionTableRefusals) {
  const auto refused = [](const std::function<void(Json&)>& edit, const std::string& want) {
    Json j = SeleneJson();
    j["attention_table"] = AttentionTableJson();
    edit(j["attention_table"]);
    auto b = HardwareProfileFromJson(j, "p");
    ASSERT_FALSE(b.ok()) << want;
    EXPECT_NE(b.status().message().find(want), std::string::npos) << b.status().message();
    EXPECT_EQ(b.status().message().find('\n'), std::string::npos) << b.status().message();
  };
  refused([](Json& t) { t.erase("source"); }, "p.attention_table.source");
  refused([](Json& t) { t["source"] = ""; }, "p.attention_table.source: must name");
  refused([](Json& t) { t["extra"] = 1; }, "p.attention_table");
  refused([](Json& t) { t["points"] = 5; }, "p.attention_table.points: expected a list");
  refused([](Json& t) { t["points"] = Json::array(); }, "p.attention_table.points: needs at least");
  refused([](Json& t) { t["points"][1].erase("tflops"); }, "p.attention_table.points[1]");
  refused([](Json& t) { t["points"][1]["heads"] = 16; }, "p.attention_table.points[1]");
  refused([](Json& t) { t["points"][1]["s"] = 0; },
          "p.attention_table.points[1].s: 0 is outside (0,");
  refused([](Json& t) { t["points"][1]["d"] = -64; }, "p.attention_table.points[1].d: -64");
  refused([](Json& t) { t["points"][2]["tflops"] = 2e5; },
          "p.attention_table.points[2].tflops: 200000 is outside (0, 100000]");
  refused([](Json& t) { t["points"][2]["dropout_tflops"] = 0; },
          "p.attention_table.points[2].dropout_tflops: 0 is outside");
  refused([](Json& t) { t["points"][3]["d"] = 128; },
          "p.attention_table.points[3]: (s, d) = (2048, 128) again (points[0] has it)");
  refused([](Json& t) { t["points"].erase(3); },
          "p.attention_table.points: no point at (s, d) = (2048, 64): every s needs every d");
}

// cross_entropy_Glogits_per_s: optional (0 when absent), round-trips, and a value out of
// (0, 1e5] is refused naming the field.
TEST(ProfileSchema, OptionalCrossEntropyRate) {
  EXPECT_EQ(HardwareProfileFromJson(SeleneJson(), "p")->cross_entropy_Glogits_per_s.value, 0.0);
  Json with = SeleneJson();
  with["cross_entropy_Glogits_per_s"] = {{"value", 0.09}, {"source", "a test figure"}};
  auto a = HardwareProfileFromJson(with, "p");
  ASSERT_TRUE(a.ok()) << a.status().message();
  auto back = HardwareProfileFromJson(Json::parse(HardwareProfileToJson(*a).dump()), "p");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->cross_entropy_Glogits_per_s.value, 0.09);
  EXPECT_EQ(back->cross_entropy_Glogits_per_s.source, "a test figure");
  with["cross_entropy_Glogits_per_s"]["value"] = 0;
  auto b = HardwareProfileFromJson(with, "p");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("p.cross_entropy_Glogits_per_s.value: 0 is outside (0,"),
            std::string::npos)
      << b.status().message();
}

// device_share: optional (absent: the whole device), round-trips with its source, and a value out
// of (0, 1] is refused naming the field.
TEST(ProfileSchema, OptionalDeviceShare) {
  auto whole = HardwareProfileFromJson(SeleneJson(), "p");
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->DeviceCopies(), 1.0);
  EXPECT_FALSE(HardwareProfileToJson(*whole).contains("device_share"));
  Json with = SeleneJson();
  with["device_share"] = {{"value", 0.25}, {"source", "four MPS clients"}};
  auto a = HardwareProfileFromJson(with, "p");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->DeviceCopies(), 4.0);
  auto back = HardwareProfileFromJson(Json::parse(HardwareProfileToJson(*a).dump()), "p");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->device_share.value, 0.25);
  EXPECT_EQ(back->device_share.source, "four MPS clients");
  for (double bad : {0.0, 1.5}) {
    with["device_share"]["value"] = bad;
    auto b = HardwareProfileFromJson(with, "p");
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.status().message().find("p.device_share.value: "), std::string::npos)
        << b.status().message();
  }
}

// The GeLU's rates: optional (0 when absent), both or neither, round-trip with their sources, and
// refused without a source or out of (0, 1e5], naming the field.
TEST(ProfileSchema, OptionalGeluRates) {
  const auto none = HardwareProfileFromJson(SeleneJson(), "p");
  EXPECT_EQ(none->gelu_forward_Gelems_per_s.value, 0.0);
  EXPECT_EQ(none->gelu_backward_Gelems_per_s.value, 0.0);
  EXPECT_FALSE(HardwareProfileToJson(*none).contains("gelu_forward_Gelems_per_s"));
  Json with = SeleneJson();
  with["gelu_forward_Gelems_per_s"] = {{"value", 0.086}, {"source", "a forward figure"}};
  with["gelu_backward_Gelems_per_s"] = {{"value", 0.066}, {"source", "a backward figure"}};
  auto a = HardwareProfileFromJson(with, "p");
  ASSERT_TRUE(a.ok()) << a.status().message();
  auto back = HardwareProfileFromJson(Json::parse(HardwareProfileToJson(*a).dump()), "p");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->gelu_forward_Gelems_per_s.value, 0.086);
  EXPECT_EQ(back->gelu_forward_Gelems_per_s.source, "a forward figure");
  EXPECT_EQ(back->gelu_backward_Gelems_per_s.value, 0.066);
  EXPECT_EQ(back->gelu_backward_Gelems_per_s.source, "a backward figure");
  const auto refused = [](const Json& j, const std::string& what) {
    auto r = HardwareProfileFromJson(j, "p");
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  };
  Json one = with;
  one.erase("gelu_backward_Gelems_per_s");
  refused(one, "p.gelu_forward_Gelems_per_s: needs gelu_backward_Gelems_per_s too");
  Json sourceless = with;
  sourceless["gelu_backward_Gelems_per_s"].erase("source");
  refused(sourceless, "p.gelu_backward_Gelems_per_s");
  Json zero = with;
  zero["gelu_forward_Gelems_per_s"]["value"] = 0;
  refused(zero, "p.gelu_forward_Gelems_per_s.value: 0 is outside (0,");
  Json huge = with;
  huge["gelu_backward_Gelems_per_s"]["value"] = 2e5;
  refused(huge, "p.gelu_backward_Gelems_per_s.value: 200000 is outside (0,");
}

// The optimizer step's rate: optional (0 when absent, not written), round-trips with its source,
// and is refused without a source or out of (0, 1e5], naming the field.
TEST(ProfileSchema, OptionalOptimizerRate) {
  const auto none = HardwareProfileFromJson(SeleneJson(), "p");
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(none->optimizer_Gparams_per_s.value, 0.0);
  EXPECT_FALSE(HardwareProfileToJson(*none).contains("optimizer_Gparams_per_s"));
  Json with = SeleneJson();
  with["optimizer_Gparams_per_s"] = {{"value", 0.13}, {"source", "an optimizer figure"}};
  auto a = HardwareProfileFromJson(with, "p");
  ASSERT_TRUE(a.ok()) << a.status().message();
  auto back = HardwareProfileFromJson(Json::parse(HardwareProfileToJson(*a).dump()), "p");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->optimizer_Gparams_per_s.value, 0.13);
  EXPECT_EQ(back->optimizer_Gparams_per_s.source, "an optimizer figure");
  const auto refused = [](const Json& j, const std::string& what) {
    auto r = HardwareProfileFromJson(j, "p");
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  };
  Json sourceless = with;
  sourceless["optimizer_Gparams_per_s"].erase("source");
  refused(sourceless, "p.optimizer_Gparams_per_s");
  Json zero = with;
  zero["optimizer_Gparams_per_s"]["value"] = 0;
  refused(zero, "p.optimizer_Gparams_per_s.value: 0 is outside (0,");
  Json huge = with;
  huge["optimizer_Gparams_per_s"]["value"] = 2e5;
  refused(huge, "p.optimizer_Gparams_per_s.value: 200000 is outside (0,");
}

// The GeLU epilogues' rates (both or neither) and the bias gradient's: optional (0 when absent,
// not written), round-tripped with their sources, refused without a source, alone (an epilogue)
// or out of range, naming the field.
TEST(ProfileSchema, OptionalEpilogueAndBiasGradRates) {
  const auto none = HardwareProfileFromJson(SeleneJson(), "p");
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(none->gelu_epilogue_Gelems_per_s.value, 0.0);
  EXPECT_EQ(none->bias_grad_Gelems_per_s.value, 0.0);
  const OrderedJson written = HardwareProfileToJson(*none);
  for (const char* key :
       {"gelu_epilogue_Gelems_per_s", "dgelu_epilogue_Gelems_per_s", "bias_grad_Gelems_per_s"}) {
    EXPECT_FALSE(written.contains(key)) << key;
  }
  Json with = SeleneJson();
  with["gelu_epilogue_Gelems_per_s"] = {{"value", 2556.0}, {"source", "a forward epilogue"}};
  with["dgelu_epilogue_Gelems_per_s"] = {{"value", 2049.0}, {"source", "a backward epilogue"}};
  with["bias_grad_Gelems_per_s"] = {{"value", 1500.0}, {"source", "a bias gradient"}};
  auto a = HardwareProfileFromJson(with, "p");
  ASSERT_TRUE(a.ok()) << a.status().message();
  auto back = HardwareProfileFromJson(Json::parse(HardwareProfileToJson(*a).dump()), "p");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->gelu_epilogue_Gelems_per_s.value, 2556.0);
  EXPECT_EQ(back->gelu_epilogue_Gelems_per_s.source, "a forward epilogue");
  EXPECT_EQ(back->dgelu_epilogue_Gelems_per_s.value, 2049.0);
  EXPECT_EQ(back->dgelu_epilogue_Gelems_per_s.source, "a backward epilogue");
  EXPECT_EQ(back->bias_grad_Gelems_per_s.value, 1500.0);
  EXPECT_EQ(back->bias_grad_Gelems_per_s.source, "a bias gradient");
  const auto refused = [](const Json& j, const std::string& what) {
    auto r = HardwareProfileFromJson(j, "p");
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  };
  Json one = with;
  one.erase("gelu_epilogue_Gelems_per_s");
  refused(one, "p.dgelu_epilogue_Gelems_per_s: needs gelu_epilogue_Gelems_per_s too");
  Json bias_alone = SeleneJson();  // the bias gradient stands alone
  bias_alone["bias_grad_Gelems_per_s"] = with["bias_grad_Gelems_per_s"];
  EXPECT_TRUE(HardwareProfileFromJson(bias_alone, "p").ok());
  Json sourceless = with;
  sourceless["bias_grad_Gelems_per_s"].erase("source");
  refused(sourceless, "p.bias_grad_Gelems_per_s");
  Json zero = with;
  zero["gelu_epilogue_Gelems_per_s"]["value"] = 0;
  refused(zero, "p.gelu_epilogue_Gelems_per_s.value: 0 is outside (0,");
  Json huge = with;
  huge["dgelu_epilogue_Gelems_per_s"]["value"] = 2e7;
  refused(huge, "p.dgelu_epilogue_Gelems_per_s.value: 2e+07 is outside (0, 1e+07]");
  Json huge_bias = with;
  huge_bias["bias_grad_Gelems_per_s"]["value"] = 2e5;
  refused(huge_bias, "p.bias_grad_Gelems_per_s.value: 200000 is outside (0,");
}

// The backward GEMM tables: optional, read with the forward table's checks, round-tripped, and
// refused in another dtype than the forward table's.
TEST(ProfileSchema, OptionalBackwardGemmTables) {
  EXPECT_TRUE(HardwareProfileFromJson(SeleneJson(), "p")->gemm_backward_data.empty());
  Json with = SeleneJson();
  with["gemm_backward_data"] = with["gemm"];
  with["gemm_backward_weight"] = with["gemm"];
  with["gemm_backward_weight"]["source"] = "a test table";
  auto a = HardwareProfileFromJson(with, "p");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->gemm_backward_data.tflops, a->gemm.tflops);
  auto back = HardwareProfileFromJson(Json::parse(HardwareProfileToJson(*a).dump()), "p");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->gemm_backward_weight.source, "a test table");
  Json other = with;
  other["gemm_backward_data"]["dtype"] = "fp32";
  auto b = HardwareProfileFromJson(other, "p");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("p.gemm_backward_data.dtype"), std::string::npos)
      << b.status().message();
  Json shrunk = with;
  shrunk["gemm_backward_weight"]["tflops"].erase(0);
  auto c = HardwareProfileFromJson(shrunk, "p");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("p.gemm_backward_weight"), std::string::npos)
      << c.status().message();
}

TEST(ProfileSchema, UnknownKeyWrongTypeMissingSource) {
  ASSERT_TRUE(HardwareProfileFromJson(SeleneJson(), "p").ok());
  Json unknown = SeleneJson();
  unknown["hbm_bandwidth"] = 3;
  auto a = HardwareProfileFromJson(unknown, "p");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("hbm_bandwidth"), std::string::npos) << a.status().message();

  Json wrong = SeleneJson();
  wrong["intra_node"]["latency_us"]["value"] = "ten";
  auto b = HardwareProfileFromJson(wrong, "p");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("p.intra_node.latency_us.value"), std::string::npos)
      << b.status().message();

  Json nosource = SeleneJson();
  nosource["peak_tflops"].erase("source");
  auto c = HardwareProfileFromJson(nosource, "p");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("peak_tflops.source"), std::string::npos)
      << c.status().message();

  Json bare = SeleneJson();
  bare["memory_GiB"] = 80;  // a number without its source
  auto d = HardwareProfileFromJson(bare, "p");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("memory_GiB"), std::string::npos);

  Json grid = SeleneJson();
  grid["gemm"]["tflops"].erase(0);
  EXPECT_FALSE(HardwareProfileFromJson(grid, "p").ok());

  // How gradients are accumulated is the software profile's fact now (core/software.h): a
  // hardware profile that still carries it is refused, naming the key and where it went.
  Json moved = SeleneJson();
  moved["grad_accumulate_bytes_per_param"] = {{"value", 6}, {"source", "2021 software"}};
  auto f = HardwareProfileFromJson(moved, "p");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("p.grad_accumulate_bytes_per_param: moved to the software"),
            std::string::npos)
      << f.status().message();
}

// The profile's precision: {"value": fp32 | bf16 | fp16, "source"}; the presets' are selene fp16
// (the paper's runs), dgx-h100 bf16, cpu fp32; the old key is refused with its new name, and a
// 16-bit profile cannot say fp32 (its GEMM table is 16-bit).
TEST(ProfileSchema, Precision) {
  auto sel = HardwareProfileFromJson(SeleneJson(), "p");
  ASSERT_TRUE(sel.ok());
  EXPECT_EQ(sel->precision, Precision::kFp16);
  EXPECT_NE(sel->precision_source.find("--fp16"), std::string::npos);
  EXPECT_EQ(LoadProfile("dgx-h100")->precision, Precision::kBf16);
  EXPECT_EQ(LoadProfile("cpu")->precision, Precision::kFp32);
  Json bf16 = SeleneJson();
  bf16["precision"]["value"] = "bf16";
  EXPECT_EQ(HardwareProfileFromJson(bf16, "p")->precision, Precision::kBf16);
  Json fp32 = SeleneJson();
  fp32["precision"]["value"] = "fp32";
  auto a = HardwareProfileFromJson(fp32, "p");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("p.gemm.dtype"), std::string::npos) << a.status().message();
  Json fp8 = SeleneJson();
  fp8["precision"]["value"] = "fp8";
  auto b = HardwareProfileFromJson(fp8, "p");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("p.precision.value"), std::string::npos)
      << b.status().message();
  Json old = SeleneJson();
  old.erase("precision");
  old["training_precision"] = "mixed";
  auto c = HardwareProfileFromJson(old, "p");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("renamed to \"precision\""), std::string::npos)
      << c.status().message();
  // It round-trips.
  auto back = HardwareProfileFromJson(Json::parse(HardwareProfileToJson(*sel).dump()), "p");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->precision, Precision::kFp16);
  EXPECT_EQ(back->precision_source, sel->precision_source);
}

}  // namespace
}  // namespace ptdp::planner
