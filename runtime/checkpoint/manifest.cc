#include "runtime/checkpoint/manifest.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/checked.h"
#include "runtime/checkpoint/safetensors.h"

namespace ptdp::runtime {
namespace {

// At most 8 dimensions, each in [0, 2^62]; the product overflow-checked. `lo` is the smallest size
// a dimension may have.
Result<std::vector<int64_t>> ReadDims(JsonObjectReader& r, const std::string& key, int64_t lo) {
  std::vector<double> v;
  r.Required(key, &v);
  PTDP_RETURN_IF_ERROR(r.status());
  if (v.empty() || v.size() > 8) return Status::Invalid(r.PathOf(key) + ": expected 1 to 8 sizes");
  std::vector<int64_t> out;
  int64_t product = 1;
  for (double d : v) {
    int64_t x = 0;
    if (!DoubleToInt64(d, &x) || x < lo || x > (int64_t(1) << 62)) {
      return Status::Invalid(r.PathOf(key) + ": " + FormatDouble(d) + " is not an integer in [" +
                             std::to_string(lo) + ", 2^62]");
    }
    if (!CheckedMul(product, std::max<int64_t>(x, 1), &product)) {
      return Status::Invalid(r.PathOf(key) + ": the product of the sizes overflows int64");
    }
    out.push_back(x);
  }
  return out;
}

Result<CkptFile> ReadFileEntry(const Json& j, const std::string& path) {
  if (!j.is_object()) return Status::Invalid(path + ": expected an object");
  JsonObjectReader r(j, path);
  CkptFile f;
  std::string hex;
  r.Required("name", &f.name);
  r.Required("bytes", &f.bytes);
  // Checkpoints written before CRC32C carry "fnv1a64"; one of the two, never both (Finish refuses
  // the other as an unknown key).
  f.checksum_kind = r.Has("fnv1a64") ? ChecksumKind::kFnv1a64 : ChecksumKind::kCrc32c;
  const std::string key = ChecksumKeyName(f.checksum_kind);
  r.Required(key, &hex);
  PTDP_RETURN_IF_ERROR(r.Finish());
  if (f.name.empty() || f.name.find('/') != std::string::npos || f.name[0] == '.') {
    return Status::Invalid(path + ".name: '" + f.name + "' is not a plain file name");
  }
  PTDP_RETURN_IF_ERROR(CheckRange(path + ".bytes", f.bytes, 0, int64_t(1) << 62));
  const size_t digits = ChecksumHexDigits(f.checksum_kind);
  if (hex.size() != digits || !std::all_of(hex.begin(), hex.end(), ::isxdigit)) {
    return Status::Invalid(path + "." + key + ": '" + hex + "' is not " + std::to_string(digits) +
                           " hex digits");
  }
  f.checksum = std::strtoull(hex.c_str(), nullptr, 16);
  return f;
}

Result<CkptTensor> ReadTensorEntry(const Json& j, const std::string& path) {
  if (!j.is_object()) return Status::Invalid(path + ": expected an object");
  JsonObjectReader r(j, path);
  CkptTensor t;
  PTDP_ASSIGN_OR_RETURN(t.shape, ReadDims(r, "shape", 1));
  const Json* pieces = r.Child("pieces", true);
  PTDP_RETURN_IF_ERROR(r.Finish());
  if (!pieces->is_array() || pieces->empty()) {
    return Status::Invalid(path + ".pieces: expected a non-empty array");
  }
  for (size_t i = 0; i < pieces->size(); ++i) {
    const std::string pp = path + ".pieces[" + std::to_string(i) + "]";
    if (!(*pieces)[i].is_object()) return Status::Invalid(pp + ": expected an object");
    JsonObjectReader pr((*pieces)[i], pp);
    CkptPiece p;
    pr.Required("file", &p.file);
    PTDP_ASSIGN_OR_RETURN(p.offset, ReadDims(pr, "offset", 0));
    PTDP_ASSIGN_OR_RETURN(p.shape, ReadDims(pr, "shape", 1));
    PTDP_RETURN_IF_ERROR(pr.Finish());
    if (p.offset.size() != t.shape.size() || p.shape.size() != t.shape.size()) {
      return Status::Invalid(pp + ": offset and shape must have the tensor's rank");
    }
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (p.offset[d] + p.shape[d] > t.shape[d]) {  // both <= 2^62: no overflow
        return Status::Invalid(pp + ": extends past the tensor's shape in dimension " +
                               std::to_string(d));
      }
    }
    t.pieces.push_back(std::move(p));
  }
  return t;
}

Status ReadState(JsonObjectReader& r, Manifest* m) {
  const Json* data = r.Child("data", true);
  const Json* opt = r.Child("optimizer", true);
  const Json* ls = r.Child("loss_scale", true);
  PTDP_RETURN_IF_ERROR(r.status());
  JsonObjectReader d(*data, r.PathOf("data"));
  std::string seed;
  d.Required("seed", &seed);
  d.Required("token_count", &m->token_count);
  d.Optional("parts", &m->data_parts);
  d.Required("global_batch", &m->layout.global_batch);
  PTDP_RETURN_IF_ERROR(d.Finish());
  char* end = nullptr;
  m->data_seed = std::strtoull(seed.c_str(), &end, 10);
  if (seed.empty() || end != seed.c_str() + seed.size()) {
    return Status::Invalid(d.PathOf("seed") + ": '" + seed + "' is not an unsigned integer");
  }
  JsonObjectReader o(*opt, r.PathOf("optimizer"));
  OptimizerConfig& c = m->optim;
  o.Required("adam_steps", &m->adam_steps);
  o.Required("lr", &c.lr);
  o.Required("min_lr", &c.min_lr);
  o.Required("warmup_steps", &c.warmup_steps);
  o.Required("decay_steps", &c.decay_steps);
  o.Required("beta1", &c.beta1);
  o.Required("beta2", &c.beta2);
  o.Required("eps", &c.eps);
  o.Required("weight_decay", &c.weight_decay);
  o.Required("clip_grad", &c.clip_grad);
  PTDP_RETURN_IF_ERROR(o.Finish());
  PTDP_RETURN_IF_ERROR(CheckRange(o.PathOf("adam_steps"), m->adam_steps, 0, m->step));
  JsonObjectReader l(*ls, r.PathOf("loss_scale"));
  l.Required("scale", &m->loss_scale);
  l.Required("clean_steps", &m->clean_steps);
  l.Required("skipped_steps", &m->skipped_steps);
  PTDP_RETURN_IF_ERROR(l.Finish());
  PTDP_RETURN_IF_ERROR(CheckRange(l.PathOf("scale"), m->loss_scale, 1.0, 0x1p120));
  PTDP_RETURN_IF_ERROR(CheckRange(l.PathOf("clean_steps"), m->clean_steps, 0, INT32_MAX));
  PTDP_RETURN_IF_ERROR(CheckRange(l.PathOf("skipped_steps"), m->skipped_steps, 0, m->step));
  if (m->adam_steps != m->step - m->skipped_steps) {
    return Status::Invalid(
        o.PathOf("adam_steps") + ": " + std::to_string(m->adam_steps) +
        " is not step - skipped_steps = " + std::to_string(m->step - m->skipped_steps));
  }
  return Status::Ok();
}

// "router_expert_bias": {"<layer>": [E numbers]} for every mixture layer of a model with the
// expert bias, and absent without it.
Status ReadRouterBiases(const Json* biases, const std::string& path, Manifest* m) {
  const ModelSpec& model = m->model;
  if (biases == nullptr) {
    if (!model.moe_router_expert_bias) return Status::Ok();
    return Status::Invalid(path + ": missing (the model has moe_router_expert_bias)");
  }
  if (!model.moe_router_expert_bias) {
    return Status::Invalid(path + ": present, but the model has no moe_router_expert_bias");
  }
  if (!biases->is_object()) return Status::Invalid(path + ": expected an object");
  for (auto it = biases->begin(); it != biases->end(); ++it) {
    const std::string at = path + "." + it.key();
    char* end = nullptr;
    const long layer = std::strtol(it.key().c_str(), &end, 10);
    if (it.key().empty() || end != it.key().c_str() + it.key().size() || layer < 0 ||
        layer >= model.layers + model.mtp_layers || !model.IsMoeLayer(int(layer))) {
      return Status::Invalid(at + ": not a mixture layer of the model");
    }
    const Json& v = it.value();
    if (!v.is_array() || int64_t(v.size()) != model.moe_experts) {
      return Status::Invalid(at + ": expected " + std::to_string(model.moe_experts) +
                             " numbers (one per expert)");
    }
    std::vector<double> values;
    for (const Json& x : v) {
      if (!x.is_number() || !std::isfinite(x.get<double>())) {
        return Status::Invalid(at + ": expected finite numbers");
      }
      values.push_back(x.get<double>());
    }
    m->router_expert_bias[int(layer)] = std::move(values);
  }
  for (int l = 0; l < model.layers + model.mtp_layers; ++l) {  // the prediction depths' too
    if (model.IsMoeLayer(l) && m->router_expert_bias.count(l) == 0) {
      return Status::Invalid(path + "." + std::to_string(l) + ": missing (a mixture layer)");
    }
  }
  return Status::Ok();
}

}  // namespace

OrderedJson ManifestToJson(const Manifest& m) {
  OrderedJson j;
  j["format"] = kCheckpointFormat;
  j["version"] = m.version;
  j["step"] = m.step;
  j["model"] = ModelToJson(m.model);
  j["layout"] = LayoutToJson(m.layout);
  // The seed is a string: JSON numbers lose integers above 2^53.
  j["data"] = {{"seed", std::to_string(m.data_seed)},
               {"token_count", m.token_count},
               {"global_batch", m.layout.global_batch}};
  if (!m.data_parts.empty()) j["data"]["parts"] = m.data_parts;
  const OptimizerConfig& o = m.optim;
  j["optimizer"] = {{"adam_steps", m.adam_steps},
                    {"lr", o.lr},
                    {"min_lr", o.min_lr},
                    {"warmup_steps", o.warmup_steps},
                    {"decay_steps", o.decay_steps},
                    {"beta1", o.beta1},
                    {"beta2", o.beta2},
                    {"eps", o.eps},
                    {"weight_decay", o.weight_decay},
                    {"clip_grad", o.clip_grad}};
  j["loss_scale"] = {
      {"scale", m.loss_scale}, {"clean_steps", m.clean_steps}, {"skipped_steps", m.skipped_steps}};
  if (!m.router_expert_bias.empty()) {
    j["router_expert_bias"] = OrderedJson::object();
    for (const auto& [layer, values] : m.router_expert_bias) {
      j["router_expert_bias"][std::to_string(layer)] = values;
    }
  }
  j["files"] = OrderedJson::array();
  for (const auto& f : m.files) {
    j["files"].push_back(
        {{"name", f.name},
         {"bytes", f.bytes},
         {ChecksumKeyName(f.checksum_kind), ChecksumHex(f.checksum_kind, f.checksum)}});
  }
  j["tensors"] = OrderedJson::object();
  for (const auto& [name, t] : m.tensors) {
    OrderedJson pieces = OrderedJson::array();
    for (const auto& p : t.pieces) {
      pieces.push_back({{"file", p.file}, {"offset", p.offset}, {"shape", p.shape}});
    }
    j["tensors"][name] = {{"shape", t.shape}, {"pieces", pieces}};
  }
  return j;
}

Result<Manifest> ManifestFromJson(const Json& j, const std::string& source) {
  if (!j.is_object()) return Status::Invalid(source + ": expected a JSON object");
  JsonObjectReader r(j, "");
  Manifest m;
  std::string format;
  r.Required("format", &format);
  r.Required("version", &m.version);
  r.Required("step", &m.step);
  PTDP_RETURN_IF_ERROR(r.status().WithPrefix(source));
  if (format != kCheckpointFormat || m.version != kCheckpointVersion) {
    return Status::Invalid(source + ": format '" + format + "' version " +
                           std::to_string(m.version) + " is not " + kCheckpointFormat + " " +
                           std::to_string(kCheckpointVersion));
  }
  PTDP_RETURN_IF_ERROR(CheckRange("step", m.step, 1, int64_t(1) << 50).WithPrefix(source));
  const Json* model = r.Child("model", true);
  const Json* layout = r.Child("layout", true);
  const Json* files = r.Child("files", true);
  const Json* tensors = r.Child("tensors", true);
  const Json* biases = r.Child("router_expert_bias", false);
  PTDP_RETURN_IF_ERROR(r.status().WithPrefix(source));
  PTDP_ASSIGN_OR_RETURN(m.model, ModelFromJson(*model, "model"));
  PTDP_ASSIGN_OR_RETURN(m.layout, LayoutFromJson(*layout, "layout"));
  PTDP_RETURN_IF_ERROR(ReadState(r, &m).WithPrefix(source));
  PTDP_RETURN_IF_ERROR(ReadRouterBiases(biases, "router_expert_bias", &m).WithPrefix(source));
  PTDP_RETURN_IF_ERROR(r.Finish().WithPrefix(source));
  if (!files->is_array() || !tensors->is_object()) {
    return Status::Invalid(source + ": files must be an array and tensors an object");
  }
  for (size_t i = 0; i < files->size(); ++i) {
    PTDP_ASSIGN_OR_RETURN(
        CkptFile f, ReadFileEntry((*files)[i], source + ": files[" + std::to_string(i) + "]"));
    m.files.push_back(std::move(f));
  }
  for (auto it = tensors->begin(); it != tensors->end(); ++it) {
    PTDP_ASSIGN_OR_RETURN(CkptTensor t, ReadTensorEntry(*it, source + ": tensors." + it.key()));
    for (const auto& p : t.pieces) {
      bool listed = false;
      for (const auto& f : m.files) listed = listed || f.name == p.file;
      if (!listed) {
        return Status::Invalid(source + ": tensors." + it.key() + " names file '" + p.file +
                               "', which files does not list");
      }
    }
    m.tensors[it.key()] = std::move(t);
  }
  return m;
}

}  // namespace ptdp::runtime
