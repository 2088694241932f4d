// Hugging Face Llama folders (`ptdp train --init-from DIR`, `ptdp forward --hf DIR` on a folder of
// model_type "llama"): the parsers of their untrusted bytes, as fuzz_hf_gpt2.cc does GPT-2's. The
// input is a 2-byte little-endian length L, L bytes of config.json (ParseJson +
// HfLlamaConfigFromJson; a refused config falls back to a small fixed one so that the header is
// always matched), then a whole model.safetensors (ParseSafetensorsHeader, MatchHfLlamaHeader
// against the config, every matched tensor decoded, and each runtime tensor assembled from its
// parts and split again, which must give the parts back). Each must return a Status, never crash.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/json.h"
#include "fuzz/fuzz_util.h"
#include "runtime/checkpoint/hf_llama.h"
#include "runtime/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  if (size < 2) return 0;
  const size_t len = std::min<size_t>(size - 2, size_t(data[0]) | (size_t(data[1]) << 8));
  const std::string config = fuzz::AsString(data + 2, len);
  const std::string file = fuzz::AsString(data + 2 + len, size - 2 - len);
  runtime::HfGpt2Config c;
  ModelSpec& m = c.model;
  m.name = "fuzz";
  m.layers = 1;
  m.hidden = 8;
  m.heads = 2;
  m.kv_heads = 1;
  m.ffn_hidden = 4;
  m.seq_len = c.n_positions = 4;
  m.vocab = 5;
  m.rmsnorm = m.swiglu = m.rotary = true;
  m.linear_bias = false;
  if (auto j = ParseJson(config, "config.json"); j.ok()) {
    if (auto parsed = runtime::HfLlamaConfigFromJson(*j, "config.json"); parsed.ok()) {
      c = *parsed;
      // What export writes for it must read back.
      auto again = ParseJson(runtime::HfLlamaConfigToJson(c.model).dump(), "again");
      if (!again.ok() || !runtime::HfLlamaConfigFromJson(*again, "again").ok()) __builtin_trap();
    }
  }
  auto h = runtime::ParseSafetensorsHeader(file, int64_t(file.size()), "model.safetensors");
  if (!h.ok()) return 0;
  auto matched = runtime::MatchHfLlamaHeader(*h, c.model, "model.safetensors", c.fp8);
  if (!matched.ok()) return 0;
  std::map<std::string, std::vector<std::pair<runtime::HfTensorSpec, std::vector<float>>>> parts;
  for (const auto& s : runtime::HfLlamaTensors(c.model)) {
    const runtime::StTensor& t = matched->at(s.hf);
    std::vector<float> v;
    if (!runtime::DecodeFloats(t.dtype, file.data() + h->data_start + t.begin, t.end - t.begin,
                               &v)) {
      __builtin_trap();  // a matched tensor is a float tensor inside the file
    }
    if (runtime::IsLlamaPart(s.layout)) parts[s.ptdp].push_back({s, std::move(v)});
  }
  for (const auto& [name, list] : parts) {
    size_t total = 0;
    for (const auto& p : list) total += p.second.size();
    std::vector<float> rt(total);
    for (const auto& p : list) runtime::LlamaPartInto(p.first, c.model.heads, p.second, &rt);
    for (const auto& p : list) {
      const std::vector<float> back = runtime::LlamaPartOf(p.first, c.model.heads, rt);
      // NaN payloads compare unequal: compare the bits.
      if (back.size() != p.second.size() ||
          !std::equal(back.begin(), back.end(), p.second.begin(),
                      [](float a, float b) { return __builtin_memcmp(&a, &b, 4) == 0; })) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
