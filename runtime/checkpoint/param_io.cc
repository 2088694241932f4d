#include "runtime/checkpoint/param_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/checked.h"
#include "core/shapes.h"
#include "runtime/backend/half.h"
#include "runtime/checkpoint/hf_llama.h"
#include "runtime/checkpoint/pieces.h"
#include "runtime/checkpoint/store.h"

namespace ptdp::runtime {
namespace {

// A regular file opened for reading, closed on scope exit.
class ReadFd {
 public:
  ~ReadFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  // The file's size; a missing or special file is an error naming it.
  Result<int64_t> Open(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      return Status::NotFound(path + ": missing (" + std::strerror(errno) + ")");
    }
    if (!S_ISREG(st.st_mode)) return Status::Invalid(path + ": not a regular file");
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return Status::IoError(path + ": cannot open: " + std::strerror(errno));
    path_ = path;
    return int64_t(st.st_size);
  }
  // Exactly n bytes at `offset` (a shorter file is an error: it changed under us).
  Status ReadAt(int64_t offset, int64_t n, char* out) const {
    int64_t at = 0;
    while (at < n) {
      const ssize_t r = ::pread(fd_, out + at, size_t(n - at), off_t(offset + at));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        return Status::IoError(path_ + ": read failed at byte " + std::to_string(offset + at));
      }
      at += r;
    }
    return Status::Ok();
  }

 private:
  int fd_ = -1;
  std::string path_;
};

Status Mismatch(const std::string& source, const std::string& hf_key, int64_t hf,
                const std::string& plan_key, int64_t plan) {
  return Status::Invalid(source + ": " + hf_key + " is " + std::to_string(hf) +
                         ", the plan's model." + plan_key + " is " + std::to_string(plan));
}

}  // namespace

Result<HfFolder> HfFolder::Open(const std::string& dir) {
  HfFolder f;
  f.dir_ = dir;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::NotFound(dir +
                            ": not a folder (a Hugging Face GPT-2 or Llama folder holds "
                            "config.json and model.safetensors)");
  }
  const std::string config = dir + "/config.json";
  if (!std::filesystem::exists(config, ec)) {
    return Status::NotFound(config +
                            ": missing (a Hugging Face GPT-2 or Llama folder holds "
                            "config.json and model.safetensors)");
  }
  PTDP_ASSIGN_OR_RETURN(Json j, ReadJsonFile(config, kMaxHfConfigBytes));
  // model_type "llama", "mistral", "qwen2" or "qwen3": hf_llama.h; anything else is read as GPT-2
  // (which names what it refuses).
  PTDP_ASSIGN_OR_RETURN(const std::string type, StringAt(j, "model_type", "", config));
  f.llama_ = IsHfLlamaFamily(type);
  if (f.llama_) {
    PTDP_ASSIGN_OR_RETURN(f.config_, HfLlamaConfigFromJson(j, config));
  } else {
    PTDP_ASSIGN_OR_RETURN(f.config_, HfGpt2ConfigFromJson(j, config));
  }
  PTDP_ASSIGN_OR_RETURN(StHeader h, f.OpenFiles());
  if (f.llama_) {
    PTDP_ASSIGN_OR_RETURN(f.tensors_,
                          MatchHfLlamaHeader(h, f.config_.model, f.source_, f.config_.fp8));
    for (auto& s : HfLlamaTensors(f.config_.model)) f.specs_.emplace(s.ptdp, std::move(s));
    return f;
  }
  PTDP_ASSIGN_OR_RETURN(auto by_ptdp, MatchHfGpt2Header(h, f.config_, f.source_));
  for (auto& s : HfGpt2Tensors(f.config_.model, f.config_.n_positions)) {
    f.tensors_[s.hf] = by_ptdp.at(s.ptdp);
    f.specs_.emplace(s.ptdp, std::move(s));
  }
  return f;
}

namespace {

// A safetensors file's size and header: the 8-byte length, then the header it announces (bounded
// before anything is allocated).
Result<std::pair<int64_t, StHeader>> ReadSafetensorsHeader(const std::string& path) {
  ReadFd fd;
  PTDP_ASSIGN_OR_RETURN(const int64_t bytes, fd.Open(path));
  std::string prefix(size_t(std::min<int64_t>(8, bytes)), '\0');
  PTDP_RETURN_IF_ERROR(fd.ReadAt(0, int64_t(prefix.size()), prefix.data()));
  if (prefix.size() == 8) {
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(prefix[i])) << (8 * i);
    if (n <= uint64_t(kMaxSafetensorsHeader) && int64_t(n) <= bytes - 8) {
      prefix.resize(size_t(8 + n));
      PTDP_RETURN_IF_ERROR(fd.ReadAt(8, int64_t(n), prefix.data() + 8));
    }
  }
  PTDP_ASSIGN_OR_RETURN(StHeader h, ParseSafetensorsHeader(prefix, bytes, path));
  return std::make_pair(bytes, std::move(h));
}

// model.safetensors.index.json's weight_map: tensor name -> a file of the folder (a plain name).
Result<std::map<std::string, std::string>> ReadShardIndex(const std::string& path) {
  PTDP_ASSIGN_OR_RETURN(Json j, ReadJsonFile(path, int64_t(16) << 20));
  const auto map = j.is_object() ? j.find("weight_map") : j.end();
  if (!j.is_object() || map == j.end() || !map->is_object() || map->empty()) {
    return Status::Invalid(path + ": weight_map: missing or empty (an object of tensor -> file)");
  }
  std::map<std::string, std::string> out;
  for (const auto& [name, file] : map->items()) {
    if (!file.is_string() || file.get<std::string>().empty() ||
        file.get<std::string>().find('/') != std::string::npos ||
        file.get<std::string>().rfind("..", 0) == 0) {
      return Status::Invalid(path + ": weight_map: '" + name + "': " + file.dump() +
                             " is not a file name of the folder");
    }
    out[name] = file.get<std::string>();
  }
  return out;
}

}  // namespace

Result<StHeader> HfFolder::OpenFiles() {
  std::error_code ec;
  const std::string single = dir_ + "/model.safetensors";
  const std::string index = dir_ + "/model.safetensors.index.json";
  if (std::filesystem::exists(single, ec)) {
    source_ = single;
    PTDP_ASSIGN_OR_RETURN(auto opened, ReadSafetensorsHeader(single));
    files_.push_back({single, opened.first, opened.second.data_start});
    for (const auto& t : opened.second.tensors) file_of_[t.name] = 0;
    return std::move(opened.second);
  }
  if (!std::filesystem::exists(index, ec)) {
    std::string why = "missing (and no model.safetensors.index.json of shards)";
    if (std::filesystem::exists(dir_ + "/pytorch_model.bin", ec)) {
      why += "; pytorch_model.bin is not read: save with safe_serialization=True";
    }
    return Status::NotFound(single + ": " + why);
  }
  // Shards: every file the index names, each tensor in the file the index says, once.
  source_ = index;
  PTDP_ASSIGN_OR_RETURN(const auto weight_map, ReadShardIndex(index));
  std::map<std::string, int> file_index;
  for (const auto& [name, file] : weight_map) file_index.emplace(file, 0);
  StHeader merged;
  for (auto& [file, idx] : file_index) {
    idx = static_cast<int>(files_.size());
    const std::string path = dir_ + "/" + file;
    PTDP_ASSIGN_OR_RETURN(auto opened, ReadSafetensorsHeader(path));
    files_.push_back({path, opened.first, opened.second.data_start});
    for (auto& t : opened.second.tensors) {
      const auto listed = weight_map.find(t.name);
      if (listed == weight_map.end() || listed->second != file) {
        return Status::Invalid(path + ": tensor '" + t.name + "' is not listed for this file in " +
                               index);
      }
      file_of_[t.name] = idx;
      merged.tensors.push_back(std::move(t));
    }
  }
  for (const auto& [name, file] : weight_map) {
    if (file_of_.count(name) == 0) {
      return Status::Invalid(index + ": tensor '" + name + "' is not in " + file);
    }
  }
  return merged;
}

Result<std::vector<float>> HfFolder::Read(const std::string& ptdp_name) const {
  const std::string name = InitKeyName(ptdp_name);  // the tied copy is the embedding
  const auto [first, last] = specs_.equal_range(name);
  if (first == last) return Status::Invalid(source_ + ": holds no tensor for '" + ptdp_name + "'");
  // Llama's QKV and fc1 are assembled from their parts (q, k, v; gate, up), whose sizes add up to
  // the runtime tensor's.
  std::vector<std::vector<float>> parts;
  size_t total = 0;
  for (auto it = first; it != last; ++it) {
    PTDP_ASSIGN_OR_RETURN(std::vector<float> hf, ReadHf(tensors_.at(it->second.hf)));
    if (!IsLlamaPart(it->second.layout)) return HfToRuntime(it->second, config_.model.heads, hf);
    total += hf.size();
    parts.push_back(std::move(hf));
  }
  std::vector<float> rt(total);
  auto it = first;
  for (const auto& hf : parts) LlamaPartInto((it++)->second, config_.model.heads, hf, &rt);
  return rt;
}

Result<std::vector<float>> HfFolder::ReadHf(const StTensor& t) const {
  const File& file = files_.at(size_t(file_of_.at(t.name)));
  ReadFd fd;
  PTDP_ASSIGN_OR_RETURN(const int64_t size, fd.Open(file.path));
  if (size != file.bytes) return Status::Invalid(file.path + ": changed size while being read");
  std::string bytes(size_t(t.end - t.begin), '\0');
  PTDP_RETURN_IF_ERROR(fd.ReadAt(file.data_start + t.begin, int64_t(bytes.size()), bytes.data()));
  std::vector<float> hf;
  if (!DecodeFloats(t.dtype, bytes.data(), int64_t(bytes.size()), &hf)) {
    return Status::Invalid(file.path + ": tensor '" + t.name + "': cannot decode " + t.dtype);
  }
  for (size_t i = 0; i < hf.size(); ++i) {
    if (!std::isfinite(hf[i])) {
      return Status::Invalid(file.path + ": tensor '" + t.name +
                             "' holds a non-finite value at element " + std::to_string(i));
    }
  }
  if (t.dtype == "F8_E4M3") {  // times its blocks' scales (MatchFp8Scales matched them)
    PTDP_ASSIGN_OR_RETURN(const auto scales, ReadHf(tensors_.at(t.name + kFp8ScaleSuffix)));
    Fp8Dequantize(&hf, t.shape, scales, config_.fp8);
  }
  return hf;
}

namespace {

// A GPT-2 folder holds GPT-2's tensors (LayerNorms with biases, biased Linears, a position table,
// multi-head attention, GeLU): a Llama-style model has other ones.
Status RequireGpt2(const ModelSpec& m, const std::string& what) {
  if (m.layernorm_1p) {
    return Status::Invalid(what +
                           " stores its LayerNorm weights as offsets from 1 (layernorm_1p): "
                           "Hugging Face GPT-2 folders hold the weights themselves");
  }
  if (m.IsGpt() && !m.IsMoe() && !m.qk_norm) return Status::Ok();
  return Status::Invalid(what +
                         " is not a GPT-2 (RMSNorm, SwiGLU, rotary embeddings, grouped-query "
                         "attention or no biases): Hugging Face GPT-2 folders hold GPTs only");
}

}  // namespace

// A Qwen3-MoE folder's mixture against the plan's: what the tensors' shapes do not show (the
// router's k) and what they do, named by both keys.
Status CheckHfExpertsMatch(const ModelSpec& m, const ModelSpec& plan, const std::string& source) {
  if (m.moe_experts != plan.moe_experts) {
    return Mismatch(source, "num_experts", m.moe_experts, "moe_experts", plan.moe_experts);
  }
  if (!m.IsMoe()) return Status::Ok();
  if (m.moe_topk != plan.moe_topk) {
    return Mismatch(source, "num_experts_per_tok", m.moe_topk, "moe_topk", plan.moe_topk);
  }
  if (m.moe_router_pre_softmax != plan.moe_router_pre_softmax) {
    return Status::Invalid(source + ": norm_topk_prob is " +
                           (m.moe_router_pre_softmax ? "false" : "true") +
                           ", the plan's model has moe_router_pre_softmax " +
                           (plan.moe_router_pre_softmax ? "true" : "false"));
  }
  if (m.moe_router_sigmoid != plan.moe_router_sigmoid ||
      m.moe_router_topk_scale != plan.moe_router_topk_scale) {
    return Status::Invalid(source +
                           ": its router's scores are softmax, unscaled; the plan's model "
                           "has moe_router_sigmoid or moe_router_topk_scale");
  }
  if (m.MoeFfnHidden() != plan.MoeFfnHidden()) {
    return Mismatch(source, "moe_intermediate_size", m.MoeFfnHidden(), "moe_ffn_hidden",
                    plan.MoeFfnHidden());
  }
  for (int l = 0; l < m.layers && l < plan.layers; ++l) {
    if (m.IsMoeLayer(l) != plan.IsMoeLayer(l)) {
      return Status::Invalid(source + ": layer " + std::to_string(l) + " is " +
                             (m.IsMoeLayer(l) ? "a mixture" : "dense (mlp_only_layers)") +
                             ", the plan's model has it " +
                             (plan.IsMoeLayer(l) ? "a mixture" : "dense"));
    }
  }
  return Status::Ok();
}

Status CheckHfMatchesModel(const HfGpt2Config& c, const ModelSpec& plan,
                           const std::string& source) {
  const ModelSpec& m = c.model;
  const std::string what = source + ": the plan's model " + plan.name;
  if (m.IsGpt()) {
    PTDP_RETURN_IF_ERROR(RequireGpt2(plan, what));
  } else {  // a Llama folder (HfLlamaConfigFromJson checked its own architecture)
    PTDP_RETURN_IF_ERROR(CheckHfLlamaReadable(plan, what));
    if (m.qkv_bias != plan.qkv_bias) {
      return Status::Invalid(
          source + ": " + (m.qkv_bias ? "q, k and v have biases" : "q, k and v have no biases") +
          ", the plan's model.qkv_bias is " + (plan.qkv_bias ? "true" : "false"));
    }
    if (m.norm_eps != plan.norm_eps) {
      return Status::Invalid(source + ": rms_norm_eps is " + FormatDouble(m.norm_eps) +
                             ", the plan's model.norm_eps is " + FormatDouble(plan.norm_eps));
    }
    if (m.KvHeads() != plan.KvHeads()) {
      return Mismatch(source, "num_key_value_heads", m.KvHeads(), "kv_heads", plan.KvHeads());
    }
    if (m.qk_norm != plan.qk_norm) {
      return Status::Invalid(source + ": " +
                             (m.qk_norm ? "q and k are normed (Qwen3)" : "q and k are not normed") +
                             ", the plan's model.qk_norm is " + (plan.qk_norm ? "true" : "false"));
    }
    if (m.HeadDim() != plan.HeadDim()) {
      return Mismatch(source, "head_dim", m.HeadDim(), "head_dim", plan.HeadDim());
    }
    PTDP_RETURN_IF_ERROR(CheckHfExpertsMatch(m, plan, source));
    if (!m.SameRopeScaling(plan)) {
      return Status::Invalid(source + ": rope_scaling is " + m.RopeScalingText() +
                             ", the plan's model.rope_scaling_* is " + plan.RopeScalingText());
    }
    if (m.rotary_base != plan.rotary_base) {
      return Status::Invalid(source + ": rope_theta is " + FormatDouble(m.rotary_base) +
                             ", the plan's model.rotary_base is " + FormatDouble(plan.rotary_base));
    }
    if (m.rotary_percent != plan.rotary_percent) {
      return Status::Invalid(
          source + ": partial_rotary_factor is " + FormatDouble(m.rotary_percent) +
          ", the plan's model.rotary_percent is " + FormatDouble(plan.rotary_percent));
    }
    // Mistral's window: the query and sliding_window - 1 keys before it (core/hf_config.cc).
    if (m.window_size != plan.window_size || m.window_full_every != plan.window_full_every) {
      return Status::Invalid(
          source + ": sliding_window is " +
          (m.window_size > 0 ? std::to_string(m.window_size + 1) : std::string("none")) +
          ", the plan's model.window_size is " + std::to_string(plan.window_size) +
          (plan.window_full_every != 0
               ? " with window_full_every " + std::to_string(plan.window_full_every)
               : std::string()) +
          " (sliding_window - 1 on every layer)");
    }
    // What the fields above do not name (Nemotron's MLP and norms): the class itself.
    if (HfLlamaArchOf(m) != HfLlamaArchOf(plan)) {
      return Status::Invalid(source + ": the folder's model is " +
                             HfLlamaArchName(HfLlamaArchOf(m)) + "'s, the plan's " +
                             HfLlamaArchName(HfLlamaArchOf(plan)) + "'s");
    }
  }
  if (m.layers != plan.layers) return Mismatch(source, "n_layer", m.layers, "layers", plan.layers);
  if (m.hidden != plan.hidden) return Mismatch(source, "n_embd", m.hidden, "hidden", plan.hidden);
  if (m.heads != plan.heads) return Mismatch(source, "n_head", m.heads, "heads", plan.heads);
  if (m.FfnHidden() != plan.FfnHidden()) {
    return Mismatch(source, "n_inner", m.FfnHidden(), "ffn_hidden", plan.FfnHidden());
  }
  if (m.vocab != plan.vocab) return Mismatch(source, "vocab_size", m.vocab, "vocab", plan.vocab);
  if (m.tied_embeddings != plan.tied_embeddings) {
    return Status::Invalid(
        source + ": tie_word_embeddings is " + (m.tied_embeddings ? "true" : "false") +
        ", the plan's model.tied_embeddings is " + (plan.tied_embeddings ? "true" : "false"));
  }
  if (plan.seq_len > c.n_positions) {
    return Status::Invalid(source + ": n_positions is " + std::to_string(c.n_positions) +
                           ", fewer than the plan's model.seq_len " + std::to_string(plan.seq_len));
  }
  return Status::Ok();
}

Status LoadHfParams(ParamStore* params, const HfFolder& f) {
  std::vector<float> host;
  for (int i = 0; i < static_cast<int>(params->entries().size()); ++i) {
    const ParamTensor& p = params->entries()[i].spec;
    PTDP_ASSIGN_OR_RETURN(std::vector<float> rt, f.Read(p.name));
    // A block with vocabulary padding rows starts from the current values (the rows keep them);
    // any other is written whole by the folder, and an element it left would stay NaN.
    host.assign(static_cast<size_t>(p.LocalElements()), std::numeric_limits<float>::quiet_NaN());
    if (FirstPaddingRow(p, params->tp_rank(), f.config().model.vocab) >= 0) {
      params->ReadCurrent(i, StateKind::kMaster, host.data());
    }
    for (int64_t j = 0; j < int64_t(host.size()); ++j) {
      const int64_t g = ParamStore::GlobalIndex(p, params->tp_rank(), j);
      if (g < int64_t(rt.size())) host[size_t(j)] = rt[size_t(g)];
    }
    PTDP_RETURN_IF_ERROR(params->SetWhole(i, StateKind::kMaster, host.data()));
  }
  return params->RefreshComputeCopy();
}

Status LoadCheckpointParams(ParamStore* params, const std::string& dir, const Manifest& m,
                            int64_t vocab, std::vector<bool>* verified) {
  ShardCache cache(dir, &m);
  std::array<std::vector<float>, kStateKinds> host;
  for (int i = 0; i < static_cast<int>(params->entries().size()); ++i) {
    const ParamTensor& p = params->entries()[i].spec;
    // A block with vocabulary padding rows starts from the current values (rows the writer lacked
    // keep them; with the distributed optimizer, the moments' owned part, the only part kept);
    // every other element comes from the checkpoint (AssembleLocal refuses a gap), so other
    // blocks are not copied out first.
    const bool keeps_rows = FirstPaddingRow(p, params->tp_rank(), vocab) >= 0;
    for (int k = 0; k < kStateKinds; ++k) {
      host[k].resize(static_cast<size_t>(p.LocalElements()));
      if (keeps_rows) params->ReadCurrent(i, static_cast<StateKind>(k), host[k].data());
    }
    PTDP_RETURN_IF_ERROR(AssembleLocal(m, cache, p, params->tp_rank(), vocab, host));
    for (int k = 0; k < kStateKinds; ++k) {
      PTDP_RETURN_IF_ERROR(params->SetWhole(i, static_cast<StateKind>(k), host[k].data()));
    }
  }
  if (verified != nullptr) {
    verified->clear();
    for (const auto& f : m.files) verified->push_back(cache.Verified(f.name));
  }
  return params->RefreshComputeCopy();
}

namespace {

// The files of an export: each shard's tensors, in the specs' order.
struct ExportShard {
  std::string name;
  std::vector<StTensor> tensors;
  std::vector<size_t> specs;  // indices into the specs
};

std::vector<ExportShard> PlanShards(const std::vector<HfTensorSpec>& specs, const char* dtype,
                                    int64_t max_bytes) {
  std::vector<ExportShard> shards(1);
  int64_t used = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    int64_t n = StDTypeBytes(dtype);
    for (int64_t d : specs[i].hf_shape) n *= d;
    if (max_bytes > 0 && used > 0 && used + n > max_bytes) {
      shards.emplace_back();
      used = 0;
    }
    // An expert bias stays fp32 in a bf16 export, as transformers keeps it.
    const bool fp32 = specs[i].layout == HfLayout::kExpertBias;
    shards.back().tensors.push_back(
        {HfFileName(specs[i]), fp32 ? "F32" : dtype, specs[i].hf_shape});
    shards.back().specs.push_back(i);
    used += n;
  }
  const int count = static_cast<int>(shards.size());
  for (int k = 0; k < count; ++k) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", k + 1, count);
    shards[size_t(k)].name = max_bytes > 0 ? name : "model.safetensors";
  }
  return shards;
}

// Hugging Face's index of a sharded folder: the tensors' bytes and each tensor's file.
std::string ShardIndexJson(const std::vector<ExportShard>& shards) {
  OrderedJson map;
  int64_t total = 0;
  for (const auto& shard : shards) {
    for (const auto& t : shard.tensors) {
      map[t.name] = shard.name;
      total += t.end - t.begin;
    }
  }
  OrderedJson j;
  j["metadata"] = {{"total_size", total}};
  j["weight_map"] = map;
  return j.dump(2) + "\n";
}

// A checkpoint's tensors in Hugging Face's form, one at a time: each runtime tensor assembled
// once from the checkpoint's pieces (Llama's QKV and fc1 give several HF tensors), then the HF
// tensor's values taken out of it.
class HfTensorSource {
 public:
  HfTensorSource(const std::string& dir, const Manifest& m) : dir_(dir), m_(m), cache_(dir, &m) {
    ParallelConfig one;  // a one-process layout: every tensor whole
    for (auto& p : ChunkParameters(m.model, one, 0, 0)) whole_.emplace(p.name, p);
  }
  bool Has(const HfTensorSpec& s) const {
    if (s.layout == HfLayout::kExpertBias) {
      return m_.router_expert_bias.count(ExpertBiasLayer(s.ptdp)) > 0;
    }
    return whole_.count(s.ptdp) > 0;
  }
  Result<std::vector<float>> Values(const HfTensorSpec& s) {
    const ModelSpec& model = m_.model;
    if (s.layout == HfLayout::kExpertBias) {  // the manifest's fp32 values
      const std::vector<double>& b = m_.router_expert_bias.at(ExpertBiasLayer(s.ptdp));
      return std::vector<float>(b.begin(), b.end());
    }
    if (held_ != s.ptdp) {
      const ParamTensor& p = whole_.at(s.ptdp);
      for (auto& h : host_) h.assign(size_t(p.LocalElements()), 0.0f);
      PTDP_RETURN_IF_ERROR(AssembleLocal(m_, cache_, p, 0, model.vocab, host_).WithPrefix(dir_));
      held_ = s.ptdp;
    }
    if (IsLlamaPart(s.layout)) return LlamaPartOf(s, model.heads, host_[0]);
    int64_t n = 1;
    for (int64_t d : s.hf_shape) n *= d;  // <= the padded tensor: the vocabulary rows trimmed
    return RuntimeToHf(s, model.heads, std::vector<float>(host_[0].begin(), host_[0].begin() + n));
  }

 private:
  const std::string& dir_;
  const Manifest& m_;
  ShardCache cache_;
  std::map<std::string, ParamTensor> whole_;
  std::array<std::vector<float>, kStateKinds> host_;
  std::string held_;  // the runtime tensor in host_[0]
};

// Writes one file of the export: its header, then its tensors (F32, or BF16 rounded to nearest
// even), under a temporary name, fsynced and renamed. Adds its size to *written.
Status WriteExportShard(const std::string& out, const std::vector<HfTensorSpec>& specs, bool bf16,
                        HfTensorSource* source, ExportShard* shard, Bytes* written) {
  const std::string header = EncodeSafetensorsHeader(&shard->tensors, {{"format", "pt"}});
  const std::string final_path = out + "/" + shard->name, tmp = final_path + ".tmp";
  SyncedFile f;
  PTDP_RETURN_IF_ERROR(f.Open(tmp));
  PTDP_RETURN_IF_ERROR(f.Write(header.data(), header.size()));
  for (size_t i : shard->specs) {
    PTDP_ASSIGN_OR_RETURN(const std::vector<float> hf, source->Values(specs[i]));
    if (bf16 && specs[i].layout != HfLayout::kExpertBias) {
      std::vector<uint16_t> b(hf.size());
      for (size_t k = 0; k < hf.size(); ++k) b[k] = half::FloatToBf16(hf[k]);
      PTDP_RETURN_IF_ERROR(f.Write(b.data(), b.size() * sizeof(uint16_t)));
    } else {
      PTDP_RETURN_IF_ERROR(f.Write(hf.data(), hf.size() * sizeof(float)));
    }
  }
  PTDP_RETURN_IF_ERROR(f.Close());
  std::error_code ec;
  std::filesystem::rename(tmp, final_path, ec);
  if (ec) return Status::IoError(tmp + ": cannot rename to " + final_path + ": " + ec.message());
  *written += f.bytes();
  return Status::Ok();
}

Status RemoveIfPresent(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (ec) return Status::IoError(path + ": cannot remove: " + ec.message());
  return Status::Ok();
}

}  // namespace

Result<Bytes> ExportHf(const std::string& dir, const Manifest& m, const std::string& out,
                       const HfExportOptions& options) {
  const ModelSpec& model = m.model;
  const bool llama = options.llama.has_value();
  const std::string what = dir + ": the checkpoint's model " + model.name;
  PTDP_RETURN_IF_ERROR(llama ? CheckHfLlamaExportable(model, *options.llama, what)
                             : RequireGpt2(model, what));
  const std::vector<HfTensorSpec> specs =
      llama ? HfLlamaTensors(model) : HfGpt2Tensors(model, model.seq_len);
  HfTensorSource source(dir, m);
  for (const auto& s : specs) {
    if (!source.Has(s)) return Status::Internal("export: the model has no tensor '" + s.ptdp + "'");
  }
  std::vector<ExportShard> shards =
      PlanShards(specs, options.bf16 ? "BF16" : "F32", options.max_shard_bytes);
  PTDP_RETURN_IF_ERROR(MakeDirs(out));
  Bytes written = 0;
  for (auto& shard : shards) {
    PTDP_RETURN_IF_ERROR(WriteExportShard(out, specs, options.bf16, &source, &shard, &written));
  }
  if (options.max_shard_bytes > 0) {
    PTDP_RETURN_IF_ERROR(RemoveIfPresent(out + "/model.safetensors"));
    PTDP_RETURN_IF_ERROR(
        WriteFileAtomic(out + "/model.safetensors.index.json", ShardIndexJson(shards)));
  } else {
    PTDP_RETURN_IF_ERROR(RemoveIfPresent(out + "/model.safetensors.index.json"));
  }
  OrderedJson config = llama ? HfLlamaConfigToJson(model) : HfGpt2ConfigToJson(model);
  if (options.bf16) config["torch_dtype"] = "bfloat16";
  PTDP_RETURN_IF_ERROR(WriteFileAtomic(out + "/config.json", config.dump(2) + "\n"));
  PTDP_RETURN_IF_ERROR(FsyncDir(out));
  return written;
}

}  // namespace ptdp::runtime
