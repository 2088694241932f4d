// Hugging Face GPT-2 folders (runtime/checkpoint/hf_gpt2.h, param_io.h): config.json read back
// from what export writes and each unsupported or malformed field refused by name; the tensor
// mapping (Conv1D transposes, the QKV column order) and its inverse; safetensors headers matched
// against the config (prefixes, mask buffers, duplicates, missing tensors, wrong shapes and
// dtypes); F16 and BF16 decoding; a folder on disk read into a store of another tensor-parallel
// size.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>

#include "runtime/backend/registry.h"
#include "runtime/checkpoint/hf_gpt2.h"
#include "runtime/checkpoint/param_io.h"

namespace ptdp::runtime {
namespace {

ModelSpec Small() {
  ModelSpec m;
  m.name = "small";
  m.layers = 2;
  m.hidden = 8;
  m.heads = 2;
  m.seq_len = 6;
  m.vocab = 11;
  return m;
}

Json ConfigOf(const ModelSpec& m) {
  return Json::parse(HfGpt2ConfigToJson(m).dump());
}

std::string ConfigError(const Json& j) {
  auto c = HfGpt2ConfigFromJson(j, "cfg.json");
  return c.ok() ? "ok" : c.status().message();
}

TEST(HfGpt2Config, ReadsWhatExportWrites) {
  ModelSpec m = Small();
  m.ffn_hidden = 20;
  m.tied_embeddings = false;
  auto c = HfGpt2ConfigFromJson(ConfigOf(m), "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->model.layers, 2);
  EXPECT_EQ(c->model.hidden, 8);
  EXPECT_EQ(c->model.heads, 2);
  EXPECT_EQ(c->model.FfnHidden(), 20);
  EXPECT_EQ(c->model.vocab, 11);
  EXPECT_EQ(c->n_positions, 6);
  EXPECT_FALSE(c->model.tied_embeddings);
  // n_inner null means 4h.
  auto d = HfGpt2ConfigFromJson(ConfigOf(Small()), "cfg.json");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->model.FfnHidden(), 32);
  EXPECT_TRUE(d->model.tied_embeddings);
}

// `ptdp plan --model OUT/config.json` (core/model.h ModelFromJson) reads what export writes.
TEST(HfGpt2Config, PlannerReadsTheExportedConfig) {
  ModelSpec m = Small();
  m.ffn_hidden = 20;
  auto back = ModelFromJson(ConfigOf(m), "model");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->layers, m.layers);
  EXPECT_EQ(back->hidden, m.hidden);
  EXPECT_EQ(back->heads, m.heads);
  EXPECT_EQ(back->FfnHidden(), 20);
  EXPECT_EQ(back->seq_len, m.seq_len);
  EXPECT_EQ(back->vocab, m.vocab);
  EXPECT_TRUE(back->tied_embeddings);
}

TEST(HfGpt2Config, RefusesWhatTheRuntimeCannotCompute) {
  const Json base = ConfigOf(Small());
  auto with = [&](const std::string& key, const Json& v) {
    Json j = base;
    j[key] = v;
    return ConfigError(j);
  };
  auto without = [&](const std::string& key) {
    Json j = base;
    j.erase(key);
    return ConfigError(j);
  };
  EXPECT_NE(with("activation_function", "gelu").find("cfg.json: activation_function: 'gelu'"),
            std::string::npos);
  EXPECT_EQ(with("activation_function", "gelu_pytorch_tanh"), "ok");
  EXPECT_NE(with("layer_norm_epsilon", 1e-6).find("cfg.json: layer_norm_epsilon"),
            std::string::npos);
  EXPECT_NE(with("scale_attn_by_inverse_layer_idx", true).find("scale_attn_by_inverse_layer_idx"),
            std::string::npos);
  EXPECT_NE(with("scale_attn_weights", false).find("scale_attn_weights"), std::string::npos);
  EXPECT_NE(with("add_cross_attention", true).find("add_cross_attention"), std::string::npos);
  EXPECT_NE(with("model_type", "llama").find("model_type"), std::string::npos);
  EXPECT_NE(with("n_head", 3).find("n_embd: 8 is not divisible by n_head 3"), std::string::npos);
  EXPECT_NE(with("n_layer", 2.5).find("n_layer: expected an integer"), std::string::npos);
  EXPECT_NE(with("n_layer", -1).find("n_layer: -1 is outside"), std::string::npos);
  EXPECT_NE(with("vocab_size", Json(uint64_t(1) << 63)).find("vocab_size"), std::string::npos);
  EXPECT_NE(with("tie_word_embeddings", "yes").find("tie_word_embeddings"), std::string::npos);
  EXPECT_NE(without("n_embd").find("cfg.json: n_embd: missing"), std::string::npos);
  EXPECT_EQ(with("some_future_key", 1), "ok");  // keys that change nothing are ignored
  EXPECT_NE(ConfigError(Json::array()).find("expected a JSON object"), std::string::npos);
}

TEST(HfGpt2Tensors, MappingAndInverse) {
  const ModelSpec m = Small();
  const int64_t h = m.hidden, D = h / m.heads;
  for (const auto& s : HfGpt2Tensors(m, m.seq_len)) {
    int64_t n = 1;
    for (int64_t d : s.hf_shape) n *= d;
    std::vector<float> hf(static_cast<size_t>(n));
    std::iota(hf.begin(), hf.end(), 0.0f);
    EXPECT_EQ(RuntimeToHf(s, m.heads, HfToRuntime(s, m.heads, hf)), hf) << s.hf;
    if (s.layout == HfLayout::kQkvWeight) {
      const std::vector<float> rt = HfToRuntime(s, m.heads, hf);
      // Runtime row (head 1, k, d 2) = HF column k * h + 1 * D + 2, input i = 3: hf[3][col].
      const int64_t row = 1 * 3 * D + 1 * D + 2, col = 1 * h + 1 * D + 2;
      EXPECT_EQ(rt[size_t(row * h + 3)], hf[size_t(3 * 3 * h + col)]);
    }
    if (s.layout == HfLayout::kTranspose) {
      const std::vector<float> rt = HfToRuntime(s, m.heads, hf);
      const int64_t in = s.hf_shape[0], out = s.hf_shape[1];
      EXPECT_EQ(rt[size_t(1 * in + 2)], hf[size_t(2 * out + 1)]);  // rt[o=1][i=2] = hf[2][1]
    }
  }
}

std::string Header(std::vector<StTensor> t, int64_t* data_bytes) {
  const std::string h = EncodeSafetensorsHeader(&t, {{"format", "pt"}});
  *data_bytes = t.empty() ? 0 : t.back().end;
  return h;
}

// A header for Small() under `prefix`, with `edit` applied to its tensor list.
std::string Match(const std::function<void(std::vector<StTensor>&)>& edit,
                  const std::string& prefix = "transformer.") {
  auto c = HfGpt2ConfigFromJson(ConfigOf(Small()), "cfg.json");
  std::vector<StTensor> t;
  for (const auto& s : HfGpt2Tensors(c->model, c->n_positions)) {
    t.push_back({(s.hf == "lm_head.weight" ? "" : prefix) + s.hf, "F32", s.hf_shape});
  }
  edit(t);
  int64_t n = 0;
  const std::string file = Header(t, &n);
  auto h = ParseSafetensorsHeader(file, int64_t(file.size()) + n, "m.st");
  if (!h.ok()) return h.status().message();
  auto r = MatchHfGpt2Header(*h, *c, "m.st");
  return r.ok() ? "ok" : r.status().message();
}

TEST(HfGpt2Header, MatchesAgainstTheConfig) {
  auto none = [](std::vector<StTensor>&) {};
  EXPECT_EQ(Match(none), "ok");
  EXPECT_EQ(Match(none, ""), "ok");
  EXPECT_EQ(Match([](auto& t) {
              t.push_back({"h.0.attn.bias", "F32", {1, 1, 6, 6}});
              t.push_back({"transformer.h.1.attn.masked_bias", "F32", {}});
              t.push_back({"lm_head.weight", "F32", {11, 8}});  // tied: the embedding is used
            }),
            "ok");
  EXPECT_NE(Match([](auto& t) {
              t.push_back({"transformer.h.9.mlp.extra", "F32", {1}});
            }).find("tensor 'transformer.h.9.mlp.extra' is not a parameter"),
            std::string::npos);
  EXPECT_NE(Match([](auto& t) {
              t.push_back({"wte.weight", "F32", {11, 8}});
            }).find("'wte.weight' appears twice"),
            std::string::npos);
  EXPECT_NE(Match([](auto& t) {
              t.erase(t.begin() + 3);
            }).find("missing tensor 'transformer.h.0.ln_1.bias'"),
            std::string::npos);
  EXPECT_NE(Match([](auto& t) {
              t[1].shape = {5, 8};
            }).find("'transformer.wpe.weight' has shape [5, 8], config.json needs [6, 8]"),
            std::string::npos);
  EXPECT_NE(Match([](auto& t) { t[0].dtype = "I32"; }).find("dtype I32 is not a floating-point"),
            std::string::npos);
}

TEST(HfGpt2, DecodesHalfPrecision) {
  const uint16_t f16[] = {0x3c00, 0xc000, 0x0001, 0x7bff};
  std::vector<float> out;
  ASSERT_TRUE(DecodeFloats("F16", reinterpret_cast<const char*>(f16), 8, &out));
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(out[3], 65504.0f);
  const uint16_t bf16[] = {0x3f80, 0xc040};
  ASSERT_TRUE(DecodeFloats("BF16", reinterpret_cast<const char*>(bf16), 4, &out));
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  EXPECT_FALSE(DecodeFloats("I32", reinterpret_cast<const char*>(bf16), 4, &out));
  EXPECT_FALSE(DecodeFloats("F16", reinterpret_cast<const char*>(bf16), 3, &out));
}

// A folder on disk with value(tensor k, element i) = k + i / 1e4, in F32: read into a store of
// t = 2, tensor rank 1, every element lands at its converted global position.
TEST(HfFolder, LoadsIntoATensorParallelStore) {
  const ModelSpec m = Small();
  const std::string dir = ::testing::TempDir() + "/hf_gpt2_folder";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  { std::ofstream(dir + "/config.json") << HfGpt2ConfigToJson(m).dump(); }
  const auto specs = HfGpt2Tensors(m, m.seq_len);
  std::vector<StTensor> t;
  for (const auto& s : specs) t.push_back({HfFileName(s), "F32", s.hf_shape});
  std::string file = EncodeSafetensorsHeader(&t, {{"format", "pt"}});
  std::map<std::string, std::vector<float>> hf_values;
  for (size_t k = 0; k < specs.size(); ++k) {
    std::vector<float> v(size_t((t[k].end - t[k].begin) / 4));
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(k) + float(i) / 1e4f;
    file.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
    hf_values[specs[k].ptdp] = v;
  }
  { std::ofstream(dir + "/model.safetensors", std::ios::binary) << file; }
  auto f = HfFolder::Open(dir);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_TRUE(CheckHfMatchesModel(f->config(), m, "c").ok());
  ModelSpec longer = m;
  longer.seq_len = 7;
  EXPECT_NE(CheckHfMatchesModel(f->config(), longer, "c").message().find("n_positions is 6"),
            std::string::npos);
  // A GPT-2 folder holds LayerNorm weights themselves, not LayerNorm1P's offsets from 1.
  ModelSpec offsets = m;
  offsets.layernorm_1p = true;
  EXPECT_NE(CheckHfMatchesModel(f->config(), offsets, "c").message().find("(layernorm_1p)"),
            std::string::npos);
  auto dev = CreateDevice("cpu");
  ASSERT_TRUE(dev.ok());
  ParallelConfig c;
  c.tp = 2;
  auto store = ParamStore::Create(dev->get(), m, c, 0, 1, DType::kFp32);
  ASSERT_TRUE(store.ok()) << store.status().message();
  ASSERT_TRUE(LoadHfParams(&*store, *f).ok());
  int checked = 0;
  for (int i = 0; i < int(store->entries().size()); ++i) {
    const ParamTensor& p = store->entries()[i].spec;
    const HfTensorSpec* s = nullptr;
    for (const auto& x : specs) s = x.ptdp == p.name ? &x : s;
    ASSERT_NE(s, nullptr) << p.name;
    const std::vector<float> rt = HfToRuntime(*s, m.heads, hf_values[p.name]);
    const std::vector<float> got = store->HostMaster(i);
    for (int64_t j = 0; j < int64_t(got.size()); ++j) {
      const int64_t g = ParamStore::GlobalIndex(p, 1, j);
      if (g < int64_t(rt.size())) {
        ASSERT_EQ(got[size_t(j)], rt[size_t(g)]) << p.name << " element " << j;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 500);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ptdp::runtime
