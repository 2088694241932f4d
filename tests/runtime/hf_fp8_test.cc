// FP8 block-scaled Hugging Face folders (runtime/checkpoint/fp8.h; DeepSeek-V3's released form):
// E4M3 values against the OCP table, quantization_config read and refused, weights matched with
// their scales, and a folder on disk read back dequantized (`make hf-check` 24 compares such a
// folder's logits with transformers').
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/model.h"
#include "runtime/checkpoint/fp8.h"
#include "runtime/checkpoint/hf_llama.h"
#include "runtime/checkpoint/param_io.h"
#include "tests/runtime/hf_test_models.h"

namespace ptdp::runtime {
namespace {

// OCP 8-bit floating point (v1.0) E4M3: bias 7, S.1111.111 NaN, no infinity.
TEST(HfFp8, E4m3ValuesAreTheOcpTables) {
  EXPECT_EQ(Fp8E4m3ToFloat(0x00), 0.0f);
  EXPECT_EQ(Fp8E4m3ToFloat(0x38), 1.0f);          // exponent 7, mantissa 0
  EXPECT_EQ(Fp8E4m3ToFloat(0x3C), 1.5f);          // mantissa 4 of 8
  EXPECT_EQ(Fp8E4m3ToFloat(0xB8), -1.0f);         // the sign bit
  EXPECT_EQ(Fp8E4m3ToFloat(0x7E), 448.0f);        // the largest: 1.75 * 2^8
  EXPECT_EQ(Fp8E4m3ToFloat(0x08), 0.015625f);     // the smallest normal, 2^-6
  EXPECT_EQ(Fp8E4m3ToFloat(0x01), 0.001953125f);  // the smallest subnormal, 2^-9
  EXPECT_EQ(Fp8E4m3ToFloat(0x07), 0.013671875f);  // the largest subnormal, 7 * 2^-9
  EXPECT_TRUE(std::isnan(Fp8E4m3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(Fp8E4m3ToFloat(0xFF)));
  EXPECT_EQ(Fp8E4m3ToFloat(0x78), 256.0f);  // exponent 15 is a number but for mantissa 7
}

std::string BlocksError(const Json& q) {
  Json j = {{"model_type", "llama"}};
  j["quantization_config"] = q;
  auto b = Fp8BlocksFromConfig(j, "cfg.json");
  return b.ok() ? "ok " + std::to_string(b->rows) + "x" + std::to_string(b->cols)
                : b.status().message();
}

TEST(HfFp8, QuantizationConfigIsFp8BlocksOrRefused) {
  EXPECT_FALSE(Fp8BlocksFromConfig(Json{{"model_type", "llama"}}, "cfg.json")->On());
  const Json v3 = {{"activation_scheme", "dynamic"},
                   {"fmt", "e4m3"},
                   {"quant_method", "fp8"},
                   {"weight_block_size", {128, 128}}};
  EXPECT_EQ(BlocksError(v3), "ok 128x128");
  Json q = v3;
  q["quant_method"] = "gptq";
  EXPECT_EQ(BlocksError(q),
            "cfg.json.quantization_config.quant_method: \"gptq\" is not read: ptdp reads fp8 "
            "block-scaled weights only");
  q = v3;
  q["fmt"] = "e5m2";
  EXPECT_EQ(BlocksError(q),
            "cfg.json.quantization_config.fmt: \"e5m2\" is not read: only e4m3 "
            "(F8_E4M3)");
  for (const Json& bad :
       {Json(), Json::array({128}), Json::array({0, 128}), Json::array({128, 1.5})}) {
    q = v3;
    q["weight_block_size"] = bad;
    EXPECT_EQ(BlocksError(q),
              "cfg.json.quantization_config.weight_block_size: expected two positive integers (a "
              "block's rows and columns; per-tensor scales are not read)")
        << bad.dump();
  }
}

const char kOProj[] = "model.layers.1.self_attn.o_proj.weight";  // [24][24] in SmallLlamaModel

// MatchHfLlamaHeader's answer for SmallLlamaModel's tensors in F32 but o_proj of layer 1 in
// F8_E4M3, with blocks of 16 x 16 (a scale of [2][2]: the last blocks ragged), after `edit`.
std::string MatchFp8(const Fp8Blocks& blocks,
                     const std::function<void(std::vector<StTensor>&)>& edit) {
  const ModelSpec m = hf_test::SmallLlamaModel();
  std::vector<StTensor> t;
  for (const auto& s : HfLlamaTensors(m)) {
    t.push_back({HfFileName(s), s.hf == kOProj ? "F8_E4M3" : "F32", s.hf_shape});
  }
  t.push_back({std::string(kOProj) + kFp8ScaleSuffix, "F32", {2, 2}});
  edit(t);
  const std::string header = EncodeSafetensorsHeader(&t, {{"format", "pt"}});
  auto h = ParseSafetensorsHeader(header, int64_t(header.size()) + t.back().end, "m.st");
  if (!h.ok()) return h.status().message();
  auto r = MatchHfLlamaHeader(*h, m, "m.st", blocks);
  if (!r.ok()) return r.status().message();
  return r->count(std::string(kOProj) + kFp8ScaleSuffix) == 1 ? "ok" : "scale not matched";
}

TEST(HfFp8, WeightsMatchTheirScalesOrAreRefused) {
  const Fp8Blocks b16{16, 16};
  EXPECT_EQ(MatchFp8(b16, [](std::vector<StTensor>&) {}), "ok");
  EXPECT_EQ(MatchFp8({}, [](std::vector<StTensor>&) {}),
            "m.st: tensor 'model.layers.1.self_attn.o_proj.weight' is F8_E4M3 but config.json has "
            "no fp8 quantization_config");
  EXPECT_EQ(MatchFp8(b16, [](std::vector<StTensor>& t) { t.pop_back(); }),
            "m.st: tensor 'model.layers.1.self_attn.o_proj.weight' is F8_E4M3 without "
            "'model.layers.1.self_attn.o_proj.weight_scale_inv'");
  EXPECT_EQ(MatchFp8(b16,
                     [](std::vector<StTensor>& t) {
                       t.back().shape = {1, 2};
                     }),
            "m.st: tensor 'model.layers.1.self_attn.o_proj.weight_scale_inv': expected F32 or "
            "BF16 of [2, 2] (weight_block_size 16 x 16)");
  EXPECT_EQ(MatchFp8(b16, [](std::vector<StTensor>& t) { t.back().dtype = "I32"; }),
            "m.st: tensor 'model.layers.1.self_attn.o_proj.weight_scale_inv': expected F32 or "
            "BF16 of [2, 2] (weight_block_size 16 x 16)");
  EXPECT_EQ(
      MatchFp8(b16,
               [](std::vector<StTensor>& t) {
                 t.push_back({"model.layers.0.self_attn.o_proj.weight_scale_inv", "F32", {2, 2}});
               }),
      "m.st: tensor 'model.layers.0.self_attn.o_proj.weight_scale_inv' scales no F8_E4M3 "
      "tensor");
  EXPECT_EQ(MatchFp8(b16,
                     [](std::vector<StTensor>& t) {
                       t.back().name = "model.layers.1.self_attn.o_proj.weight_scale_inv_x";
                     }),
            "m.st: tensor 'model.layers.1.self_attn.o_proj.weight_scale_inv_x' is not a "
            "parameter of the Llama model config.json describes");
}

// A folder on disk: o_proj of layer 1 in F8_E4M3 (byte 0x38 + (i mod 8): 1, 1.125, ..., 1.875)
// with blocks of 16 x 16 scaled 1, 2, 4 and 8; read back, element (r, c) is its byte's value
// times the scale of block (r / 16, c / 16).
TEST(HfFp8, FolderReadsDequantized) {
  const ModelSpec m = hf_test::SmallLlamaModel();
  const std::string dir = ::testing::TempDir() + "/hf_fp8_folder";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Json config = Json::parse(HfLlamaConfigToJson(m).dump());
  config["quantization_config"] = {
      {"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {16, 16}}};
  { std::ofstream(dir + "/config.json") << config.dump(); }
  std::vector<StTensor> t;
  for (const auto& s : HfLlamaTensors(m)) {
    t.push_back({HfFileName(s), s.hf == kOProj ? "F8_E4M3" : "F32", s.hf_shape});
  }
  t.push_back({std::string(kOProj) + kFp8ScaleSuffix, "F32", {2, 2}});
  std::string file = EncodeSafetensorsHeader(&t, {{"format", "pt"}});
  const size_t data_start = file.size();
  size_t weight_at = 0;
  for (const StTensor& x : t) {
    if (x.dtype == "F8_E4M3") {
      weight_at = data_start + size_t(x.begin);
      for (int64_t i = 0; i < x.end - x.begin; ++i) file.push_back(char(0x38 + i % 8));
    } else if (x.name == std::string(kOProj) + kFp8ScaleSuffix) {
      const float scales[4] = {1, 2, 4, 8};
      file.append(reinterpret_cast<const char*>(scales), sizeof scales);
    } else {
      file.append(size_t(x.end - x.begin), '\0');
    }
  }
  { std::ofstream(dir + "/model.safetensors", std::ios::binary) << file; }
  auto f = HfFolder::Open(dir);
  ASSERT_TRUE(f.ok()) << f.status().message();
  auto w = f->Read("layer1.attn.proj.weight");
  ASSERT_TRUE(w.ok()) << w.status().message();
  ASSERT_EQ(w->size(), 24u * 24u);
  for (int64_t r = 0; r < 24; ++r) {
    for (int64_t c = 0; c < 24; ++c) {
      const int64_t i = r * 24 + c;
      const float scale = float(1 << ((r / 16) * 2 + c / 16));
      EXPECT_EQ((*w)[size_t(i)], (1.0f + float(i % 8) / 8.0f) * scale) << r << " " << c;
    }
  }
  // A NaN byte (0x7F) is refused by name, as any non-finite value.
  file[weight_at + 5] = char(0x7F);
  { std::ofstream(dir + "/model.safetensors", std::ios::binary) << file; }
  auto g = HfFolder::Open(dir);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_NE(g->Read("layer1.attn.proj.weight").status().message().find("non-finite value"),
            std::string::npos);
}

// DeepSeek-V3's released config.json (tests/planner/data: Megatron-Bridge's fixture of it) and its
// folder's layout: every 2-D weight of the 61 layers and of the prediction depth (layer 61) in
// F8_E4M3 beside its 128 x 128 scales, but the embeddings, the output layer and the routers (and
// the depth's copies of the first two) in BF16, as the release holds them. The config reads as the
// preset (YaRN included), and the header matches.
TEST(HfFp8, ReleasedDeepseekV3FolderMatches) {
  auto j = ReadJsonFile(std::string(PTDP_PLANNER_DATA) + "/deepseek-v3.config.json", 1 << 20);
  ASSERT_TRUE(j.ok()) << j.status().message();
  auto c = HfLlamaConfigFromJson(*j, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->fp8.rows, 128);
  EXPECT_EQ(c->fp8.cols, 128);
  ModelSpec preset = LoadModel("deepseek-v3").value();
  EXPECT_TRUE(c->model.SameRopeScaling(preset)) << c->model.RopeScalingText();
  EXPECT_TRUE(CheckHfMatchesModel(*c, preset, "config.json").ok())
      << CheckHfMatchesModel(*c, preset, "config.json").message();
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  std::vector<StTensor> t;
  int64_t scaled = 0;
  for (const auto& s : HfLlamaTensors(c->model)) {
    const bool fp8 = s.hf_shape.size() == 2 && s.hf != "model.embed_tokens.weight" &&
                     s.hf != "lm_head.weight" && !ends_with(s.hf, "mlp.gate.weight");
    t.push_back({HfFileName(s), fp8 ? "F8_E4M3" : "BF16", s.hf_shape});
    if (fp8) {
      t.push_back({HfFileName(s) + kFp8ScaleSuffix, "F32", Fp8ScaleShape(s.hf_shape, c->fp8)});
      ++scaled;
    }
  }
  for (const char* copy : {"embed_tokens.weight", "shared_head.head.weight"}) {
    t.push_back({std::string("model.layers.61.") + copy, "BF16", {129280, 7168}});
  }
  const std::string header = EncodeSafetensorsHeader(&t, {{"format", "pt"}});
  auto h = ParseSafetensorsHeader(header, int64_t(header.size()) + t.back().end, "st");
  ASSERT_TRUE(h.ok()) << h.status().message();
  auto matched = MatchHfLlamaHeader(*h, c->model, "st", c->fp8);
  ASSERT_TRUE(matched.ok()) << matched.status().message();
  // 58 layers of 256 experts' 3 weights and the depth's (3 x 256 more) dominate the count.
  EXPECT_GT(scaled, 59 * 256 * 3);
  EXPECT_EQ(int64_t(matched->size()), int64_t(HfLlamaTensors(c->model).size()) + scaled);
}

// Kimi K2's folders name their type kimi_k2 and their class DeepSeek-V3's: read as DeepSeek-V3
// (the released DeepSeek-V3 config with Kimi K2's published shape changes: 64 heads, 384 experts,
// one dense layer, no groups), the expert count and heads as its config says.
TEST(HfFp8, KimiK2TypeReadsAsDeepseekV3) {
  auto j = ReadJsonFile(std::string(PTDP_PLANNER_DATA) + "/deepseek-v3.config.json", 1 << 20);
  ASSERT_TRUE(j.ok()) << j.status().message();
  (*j)["model_type"] = "kimi_k2";
  (*j)["num_attention_heads"] = 64;
  (*j)["num_key_value_heads"] = 64;
  (*j)["n_routed_experts"] = 384;
  (*j)["first_k_dense_replace"] = 1;
  (*j)["n_group"] = 1;
  (*j)["topk_group"] = 1;
  auto c = HfLlamaConfigFromJson(*j, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(HfLlamaArchOf(c->model), HfLlamaArch::kDeepseekV3);
  EXPECT_EQ(c->model.heads, 64);
  EXPECT_EQ(c->model.moe_experts, 384);
  EXPECT_EQ(c->model.moe_dense_layers, 1);
  EXPECT_EQ(c->model.moe_router_groups, 0);
  EXPECT_TRUE(c->model.RopeYarn());
  (*j)["rope_interleave"] = false;  // as for DeepSeek-V3: only the interleaved rows are read
  EXPECT_FALSE(HfLlamaConfigFromJson(*j, "config.json").ok());
}

}  // namespace
}  // namespace ptdp::runtime
