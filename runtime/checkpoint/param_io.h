// The runtime's parameters from and to folders on disk (docs/checkpoints.md): a ptdp checkpoint
// read into any layout (`ptdp train --load`, `ptdp forward --checkpoint`), a Hugging Face GPT-2
// folder read into any layout (`ptdp train --init-from`, `ptdp forward --hf`), and a checkpoint
// written out as such a folder (`ptdp export --to hf-gpt2`).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/units.h"
#include "runtime/backend/device.h"
#include "runtime/checkpoint/hf_gpt2.h"
#include "runtime/checkpoint/hf_llama.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/model/params.h"

namespace ptdp::runtime {

// A Hugging Face GPT-2 or Llama folder, DIR/config.json and DIR/model.safetensors, opened and
// checked: the config (at most kMaxHfConfigBytes; model_type "llama": hf_llama.h
// HfLlamaConfigFromJson, else hf_gpt2.h HfGpt2ConfigFromJson) and the safetensors header
// (safetensors.h ParseSafetensorsHeader, then MatchHfLlamaHeader or MatchHfGpt2Header against the
// config). Tensor data is read only when asked for, one tensor at a time. Errors name the file and
// the reason.
class HfFolder {
 public:
  // model.safetensors, or the shards model.safetensors.index.json names (its weight_map; every
  // tensor in the file it names, once).
  static Result<HfFolder> Open(const std::string& dir);
  const HfGpt2Config& config() const { return config_; }
  const std::string& dir() const { return dir_; }
  // The runtime's view (hf_gpt2.h HfToRuntime; Llama's QKV and fc1 assembled from their parts,
  // hf_llama.h LlamaPartInto) of the tensor that becomes `ptdp_name` (a global name;
  // output.word_copy reads embedding.word): unpadded vocabulary rows, wpe's n_positions rows. A
  // non-finite value is an error naming the tensor.
  Result<std::vector<float>> Read(const std::string& ptdp_name) const;

 private:
  // One HF tensor's values as floats, checked finite.
  Result<std::vector<float>> ReadHf(const StTensor& t) const;
  // Opens the one file or the shards; their tensors as one header (offsets per file).
  Result<StHeader> OpenFiles();

  struct File {
    std::string path;
    int64_t bytes = 0;       // the size when opened (a file that changes is refused)
    int64_t data_start = 0;  // its data section's offset
  };
  std::string dir_;
  std::string source_;  // model.safetensors, or the shards' index: what errors name
  std::vector<File> files_;
  std::map<std::string, int> file_of_;  // a tensor's name as its file has it -> files_ index
  bool llama_ = false;
  HfGpt2Config config_;
  std::map<std::string, StTensor> tensors_;         // by the spec's hf name
  std::multimap<std::string, HfTensorSpec> specs_;  // by ptdp name (Llama: parts share one)
};

// Whether the folder holds the plan's model: the same family (a GPT-2 folder for a GPT, a Llama
// one for a Llama: key/value heads and rotary base equal too), layers, hidden, heads, ffn_hidden,
// vocab and tied embeddings equal, and the plan's seq_len at most n_positions (the first seq_len
// rows of wpe are used). `source` names config.json in errors.
Status CheckHfMatchesModel(const HfGpt2Config& c, const ModelSpec& plan, const std::string& source);

// Sets the fp32 master weights (and the compute copy) of every tensor `params` holds from the
// folder. Adam's moments are left as they are (zero in a new store, kRandom or
// kWeightsLoadFollows); vocabulary padding rows keep their initial values. Reads only the tensors
// this rank holds.
Status LoadHfParams(ParamStore* params, const HfFolder& f);

// Sets the master weights and Adam moments of every tensor `params` holds from checkpoint `dir`
// (manifest `m`), whatever layout wrote it (pieces.h AssembleLocal). `vocab`: the unpadded
// vocabulary (rows at or beyond it may be absent). Reads and verifies only the files that hold
// pieces of this rank's blocks; `verified`, if given, gets one flag per m.files entry saying which.
Status LoadCheckpointParams(ParamStore* params, const std::string& dir, const Manifest& m,
                            int64_t vocab, std::vector<bool>* verified = nullptr);

// Writes OUT/config.json and the weights (the vocabulary unpadded) from checkpoint `dir` (manifest
// `m`, verified by the caller) in `format`: GPT2LMHeadModel's names (hf_gpt2.h) or
// LlamaForCausalLM's, Qwen2ForCausalLM's, Qwen3ForCausalLM's, MistralForCausalLM's or
// NemotronForCausalLM's (hf_llama.h); a model the format does not compute is refused by name. The
// weights are F32, or BF16 (rounded to nearest even, as Hugging Face ships checkpoints), in
// OUT/model.safetensors, or with a shard size in model-0000i-of-0000N.safetensors files of at most
// that many bytes each (a larger tensor alone in its file) and model.safetensors.index.json,
// Hugging Face's sharded form (the other form's files are removed, so that a reader finds one).
// Each file is written under a temporary name, fsynced and renamed. Returns the bytes written.
struct HfExportOptions {
  std::optional<HfLlamaArch> llama;  // the Llama family's architecture; none: GPT-2
  bool bf16 = false;
  int64_t max_shard_bytes = 0;  // 0: one model.safetensors
};
Result<Bytes> ExportHf(const std::string& dir, const Manifest& m, const std::string& out,
                       const HfExportOptions& options);

}  // namespace ptdp::runtime
