// ModelSpec: a GPT model as the planner and the runtime see it (pre-LayerNorm decoder, learned
// position embeddings, GeLU MLP, output layer tied to the input embedding by default).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/status.h"

namespace ptdp {

// Ranges of ModelSpec's fields, checked by Validate (and so by every reader). Generous (gpt-1t
// has l 128, h 25600, a 160, s 2048, V 51200) yet small enough that every size the planner and
// the runtime compute from them (parameter counts, padded vocabulary, per-layer tensors) fits
// in 64 bits.
inline constexpr int64_t kMaxLayers = 10000;
inline constexpr int64_t kMaxHidden = int64_t(1) << 20;  // 1048576
inline constexpr int64_t kMaxHeads = 4096;
inline constexpr int64_t kMaxFfnHidden = int64_t(1) << 22;  // 4194304; 0 means 4h
inline constexpr int64_t kMaxSeqLen = int64_t(1) << 20;     // 1048576
inline constexpr int64_t kMaxVocab = int64_t(1) << 24;      // 16777216
inline constexpr int64_t kMaxVocabDivisibleBy = 65536;
// dropout: [0, 1)

struct ModelSpec {
  std::string name;              // preset or file name, for reports
  int layers = 0;                // l: transformer layers
  int64_t hidden = 0;            // h
  int heads = 0;                 // a: attention heads; h % a == 0
  int64_t ffn_hidden = 0;        // MLP inner size; 0 means 4h
  int64_t seq_len = 0;           // s
  int64_t vocab = 0;             // V as given (unpadded); see PaddedVocab
  bool tied_embeddings = true;   // output layer shares the input embedding's weights
  int vocab_divisible_by = 128;  // Megatron-LM's --make-vocab-size-divisible-by
  double dropout = 0.0;  // hidden and attention dropout probability (Megatron-LM's default is 0.1)

  int64_t FfnHidden() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
  int64_t HeadDim() const { return hidden / heads; }
  // Every violated constraint, joined by "; ", each naming the field. `path` is where the model
  // was read, as the user sees it ("plan.model", "model"): fields are then named by their key path
  // ("plan.model.hidden: 0 is outside [1, 1048576]"); without one the message starts
  // "model <name>: " (a preset or a model built in code).
  Status Validate(const std::string& path = "") const;
};

// Megatron-LM pads the vocabulary to a multiple of vocab_divisible_by * tp so that every tensor
// rank holds an equal slice (megatron/training/tokenizer: _vocab_size_with_padding).
int64_t PaddedVocab(const ModelSpec& m, int tp);

// Exact parameter count of the unsharded model with the padded vocabulary for `tp`: per layer
// 12h^2 + 13h (with ffn = 4h), word and position embeddings, final LayerNorm, and a separate output
// matrix when embeddings are not tied.
int64_t ParameterCount(const ModelSpec& m, int tp = 1);
// The paper's eq. (2): 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)).
double ParameterCountEq2(const ModelSpec& m);

// Built-in models: the ten of the paper's Table 1, gpt3-175b, GPT-2 sizes and small test models.
struct ModelPreset {
  ModelSpec spec;
  std::string about;
};
const std::vector<ModelPreset>& ModelPresets();

// A preset name, a path to a JSON file in our schema, or a Hugging Face GPT-2 style config.json.
Result<ModelSpec> LoadModel(const std::string& name_or_path);
// Our schema: {"name", "layers", "hidden", "heads", "seq_len", "vocab", optional "ffn_hidden",
// "tied_embeddings", "vocab_divisible_by", "dropout"}; or HF GPT-2 keys (n_layer, n_embd, n_head,
// n_positions, vocab_size, n_inner). `path` prefixes error key paths.
Result<ModelSpec> ModelFromJson(const Json& j, const std::string& path);
OrderedJson ModelToJson(const ModelSpec& m);

}  // namespace ptdp
