// What the Hugging Face Llama-family folder tests share (hf_llama_test.cc, hf_glm_test.cc): a
// small Llama-style model, and a safetensors header of a model's tensors, edited, matched against
// its config.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/model.h"
#include "runtime/checkpoint/hf_llama.h"
#include "runtime/checkpoint/safetensors.h"

namespace ptdp::runtime::hf_test {

// 6 query heads of 4 over 2 key/value heads (group 3), SwiGLU of 10, untied.
inline ModelSpec SmallLlamaModel() {
  ModelSpec m;
  m.name = "small-llama";
  m.layers = 2;
  m.hidden = 24;
  m.heads = 6;
  m.kv_heads = 2;
  m.ffn_hidden = 10;
  m.seq_len = 8;
  m.vocab = 13;
  m.rmsnorm = m.swiglu = m.rotary = true;
  m.linear_bias = false;
  m.tied_embeddings = false;
  m.rotary_base = 500000;
  return m;
}

// "ok", or MatchHfLlamaHeader's error for a header of m's tensors (HfLlamaTensors) after `edit`.
inline std::string MatchEditedHeader(const ModelSpec& m,
                                     const std::function<void(std::vector<StTensor>&)>& edit) {
  std::vector<StTensor> t;
  for (const auto& s : HfLlamaTensors(m)) t.push_back({HfFileName(s), "F32", s.hf_shape});
  edit(t);
  const std::string header = EncodeSafetensorsHeader(&t, {{"format", "pt"}});
  auto h = ParseSafetensorsHeader(header, int64_t(header.size()) + (t.empty() ? 0 : t.back().end),
                                  "m.st");
  if (!h.ok()) return h.status().message();
  auto r = MatchHfLlamaHeader(*h, m, "m.st");
  return r.ok() ? "ok" : r.status().message();
}

}  // namespace ptdp::runtime::hf_test
