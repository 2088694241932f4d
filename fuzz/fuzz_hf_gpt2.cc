// Hugging Face GPT-2 folders (`ptdp train --init-from DIR`, `ptdp forward --hf DIR`): the parsers
// of their untrusted bytes. The input is a 2-byte little-endian length L, L bytes of config.json
// (ParseJson + HfGpt2ConfigFromJson; a refused config falls back to a small fixed one so that the
// header is always matched), then a whole model.safetensors (ParseSafetensorsHeader,
// MatchHfGpt2Header against the config, and every matched tensor decoded and converted to the
// runtime's orientation and back). Each must return a Status, never crash.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/json.h"
#include "fuzz/fuzz_util.h"
#include "runtime/checkpoint/hf_gpt2.h"
#include "runtime/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  if (size < 2) return 0;
  const size_t len = std::min<size_t>(size - 2, size_t(data[0]) | (size_t(data[1]) << 8));
  const std::string config = fuzz::AsString(data + 2, len);
  const std::string file = fuzz::AsString(data + 2 + len, size - 2 - len);
  runtime::HfGpt2Config c;
  c.model.name = "fuzz";
  c.model.layers = 1;
  c.model.hidden = 4;
  c.model.heads = 2;
  c.model.seq_len = c.n_positions = 3;
  c.model.vocab = 5;
  if (auto j = ParseJson(config, "config.json"); j.ok()) {
    if (auto parsed = runtime::HfGpt2ConfigFromJson(*j, "config.json"); parsed.ok()) {
      c = *parsed;
      // What export writes for it must read back.
      auto again = ParseJson(runtime::HfGpt2ConfigToJson(c.model).dump(), "again");
      if (!again.ok() || !runtime::HfGpt2ConfigFromJson(*again, "again").ok()) __builtin_trap();
    }
  }
  auto h = runtime::ParseSafetensorsHeader(file, int64_t(file.size()), "model.safetensors");
  if (!h.ok()) return 0;
  auto matched = runtime::MatchHfGpt2Header(*h, c, "model.safetensors");
  if (!matched.ok()) return 0;
  for (const auto& s : runtime::HfGpt2Tensors(c.model, c.n_positions)) {
    const runtime::StTensor& t = matched->at(s.ptdp);
    std::vector<float> v;
    if (!runtime::DecodeFloats(t.dtype, file.data() + h->data_start + t.begin, t.end - t.begin,
                               &v)) {
      __builtin_trap();  // a matched tensor is a float tensor inside the file
    }
    const std::vector<float> rt = runtime::HfToRuntime(s, c.model.heads, v);
    (void)runtime::RuntimeToHf(s, c.model.heads, rt);
  }
  return 0;
}
