#include "runtime/checkpoint/hf_gpt2.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/checked.h"

namespace ptdp::runtime {
namespace {

constexpr char kPrefix[] = "transformer.";
constexpr double kLayerNormEpsilon = 1e-5;  // kernels/reference/ops.h kLayerNormEps

// "<source>: <key>: <reason>"
Status Bad(const std::string& source, const std::string& key, const std::string& why) {
  return Status::Invalid(source + ": " + key + ": " + why);
}

// An integer field in [lo, hi]; `required` or else left as it is when absent.
Status ReadInt(const Json& j, const std::string& key, bool required, int64_t lo, int64_t hi,
               const std::string& source, int64_t* out) {
  if (!j.contains(key)) {
    return required ? Bad(source, key, "missing (a GPT-2 config.json needs it)") : Status::Ok();
  }
  const Json& v = j[key];
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(hi)) {
      return Bad(source, key,
                 std::to_string(u) + " is outside [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
    }
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    return Bad(source, key, "expected an integer");
  }
  if (x < lo || x > hi) {
    return Bad(
        source, key,
        std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  *out = x;
  return Status::Ok();
}

Status ReadBool(const Json& j, const std::string& key, const std::string& source, bool* out) {
  if (!j.contains(key)) return Status::Ok();
  if (!j[key].is_boolean()) return Bad(source, key, "expected true or false");
  *out = j[key].get<bool>();
  return Status::Ok();
}

// A boolean the runtime's GPT fixes to `want`.
Status RequireBool(const Json& j, const std::string& key, bool want, const std::string& why,
                   const std::string& source) {
  bool v = want;
  PTDP_RETURN_IF_ERROR(ReadBool(j, key, source, &v));
  if (v != want) {
    return Bad(source, key,
               std::string(v ? "true" : "false") + " is not supported: ptdp's GPT " + why);
  }
  return Status::Ok();
}

bool IsFloatDType(const std::string& d) {
  return d == "F32" || d == "F16" || d == "BF16" || d == "F64";
}

std::string ShapeText(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// h.<digits>.attn.bias / h.<digits>.attn.masked_bias: GPT-2's causal-mask buffers, not weights.
bool IsMaskBuffer(const std::string& base) {
  if (base.rfind("h.", 0) != 0) return false;
  size_t i = 2;
  while (i < base.size() && base[i] >= '0' && base[i] <= '9') ++i;
  if (i == 2 || i > 12) return false;
  const std::string rest = base.substr(i);
  return rest == ".attn.bias" || rest == ".attn.masked_bias";
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  uint32_t bits = 0;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Row r of the runtime's QKV (head, part, d) is column c of HF's c_attn (part, head, d).
int64_t QkvColumn(int64_t r, int64_t h, int64_t heads) {
  const int64_t d = h / heads;
  const int64_t head = r / (3 * d), part = (r / d) % 3, dd = r % d;
  return part * h + head * d + dd;
}

}  // namespace

Result<HfGpt2Config> HfGpt2ConfigFromJson(const Json& j, const std::string& source) {
  if (!j.is_object()) return Status::Invalid(source + ": expected a JSON object");
  HfGpt2Config c;
  ModelSpec& m = c.model;
  m.name = "hf-gpt2";
  if (j.contains("model_type")) {
    if (!j["model_type"].is_string() || j["model_type"].get<std::string>() != "gpt2") {
      return Bad(source, "model_type", "expected \"gpt2\" (ptdp reads GPT-2 models only)");
    }
  }
  int64_t layers = 0, heads = 0, n_inner = 0;
  PTDP_RETURN_IF_ERROR(ReadInt(j, "n_layer", true, 1, kMaxLayers, source, &layers));
  PTDP_RETURN_IF_ERROR(ReadInt(j, "n_embd", true, 1, kMaxHidden, source, &m.hidden));
  PTDP_RETURN_IF_ERROR(ReadInt(j, "n_head", true, 1, kMaxHeads, source, &heads));
  m.layers = static_cast<int>(layers);
  m.heads = static_cast<int>(heads);
  if (m.hidden % m.heads != 0) {
    return Bad(source, "n_embd",
               std::to_string(m.hidden) + " is not divisible by n_head " + std::to_string(heads));
  }
  // n_ctx: older configs' name; a config with neither is told about n_positions.
  const char* pos_key = j.contains("n_ctx") && !j.contains("n_positions") ? "n_ctx" : "n_positions";
  PTDP_RETURN_IF_ERROR(ReadInt(j, pos_key, true, 1, kMaxSeqLen, source, &c.n_positions));
  m.seq_len = c.n_positions;
  PTDP_RETURN_IF_ERROR(ReadInt(j, "vocab_size", true, 1, kMaxVocab, source, &m.vocab));
  if (j.contains("n_inner") && !j["n_inner"].is_null()) {
    PTDP_RETURN_IF_ERROR(ReadInt(j, "n_inner", true, 1, kMaxFfnHidden, source, &n_inner));
    m.ffn_hidden = n_inner;
  }
  if (j.contains("activation_function")) {
    const Json& a = j["activation_function"];
    const std::string name = a.is_string() ? a.get<std::string>() : "";
    if (name != "gelu_new" && name != "gelu_pytorch_tanh") {
      return Bad(source, "activation_function",
                 (a.is_string() ? "'" + name + "'" : std::string("not a string")) +
                     " is not supported: ptdp's GPT uses GeLU's tanh approximation (\"gelu_new\" "
                     "or \"gelu_pytorch_tanh\")");
    }
  }
  if (j.contains("layer_norm_epsilon")) {
    const Json& e = j["layer_norm_epsilon"];
    if (!e.is_number()) return Bad(source, "layer_norm_epsilon", "expected a number");
    const double eps = e.get<double>();
    if (!(std::abs(eps - kLayerNormEpsilon) <= 1e-12)) {
      return Bad(source, "layer_norm_epsilon",
                 FormatDouble(eps) + " is not supported: ptdp's LayerNorm uses 1e-05");
    }
  }
  PTDP_RETURN_IF_ERROR(RequireBool(j, "scale_attn_weights", true,
                                   "scales attention scores by 1/sqrt(head dim)", source));
  PTDP_RETURN_IF_ERROR(RequireBool(j, "scale_attn_by_inverse_layer_idx", false,
                                   "does not scale attention by the layer index", source));
  PTDP_RETURN_IF_ERROR(
      RequireBool(j, "add_cross_attention", false, "is a decoder without cross-attention", source));
  PTDP_RETURN_IF_ERROR(ReadBool(j, "tie_word_embeddings", source, &m.tied_embeddings));
  PTDP_RETURN_IF_ERROR(m.Validate(source));
  return c;
}

OrderedJson HfGpt2ConfigToJson(const ModelSpec& m) {
  OrderedJson j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["activation_function"] = "gelu_new";  // the tanh approximation, kernels/reference/gelu.cc
  j["n_layer"] = m.layers;
  j["n_embd"] = m.hidden;
  j["n_head"] = m.heads;
  if (m.FfnHidden() == 4 * m.hidden) {
    j["n_inner"] = nullptr;
  } else {
    j["n_inner"] = m.FfnHidden();
  }
  j["n_positions"] = m.seq_len;
  j["n_ctx"] = m.seq_len;
  j["vocab_size"] = m.vocab;
  j["layer_norm_epsilon"] = kLayerNormEpsilon;
  j["tie_word_embeddings"] = m.tied_embeddings;
  j["resid_pdrop"] = m.dropout;
  j["embd_pdrop"] = m.dropout;
  j["attn_pdrop"] = m.dropout;
  j["scale_attn_weights"] = true;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["reorder_and_upcast_attn"] = false;
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  j["torch_dtype"] = "float32";
  return j;
}

std::vector<HfTensorSpec> HfGpt2Tensors(const ModelSpec& m, int64_t n_positions) {
  const int64_t h = m.hidden, f = m.FfnHidden(), V = m.vocab;
  using L = HfLayout;
  std::vector<HfTensorSpec> out = {
      {"embedding.word", "wte.weight", {V, h}, L::kSame},
      {"embedding.position", "wpe.weight", {n_positions, h}, L::kSame}};
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".", q = "h." + std::to_string(l) + ".";
    out.push_back({p + "ln1.weight", q + "ln_1.weight", {h}, L::kSame});
    out.push_back({p + "ln1.bias", q + "ln_1.bias", {h}, L::kSame});
    out.push_back({p + "attn.qkv.weight", q + "attn.c_attn.weight", {h, 3 * h}, L::kQkvWeight});
    out.push_back({p + "attn.qkv.bias", q + "attn.c_attn.bias", {3 * h}, L::kQkvBias});
    out.push_back({p + "attn.proj.weight", q + "attn.c_proj.weight", {h, h}, L::kTranspose});
    out.push_back({p + "attn.proj.bias", q + "attn.c_proj.bias", {h}, L::kSame});
    out.push_back({p + "ln2.weight", q + "ln_2.weight", {h}, L::kSame});
    out.push_back({p + "ln2.bias", q + "ln_2.bias", {h}, L::kSame});
    out.push_back({p + "mlp.fc1.weight", q + "mlp.c_fc.weight", {h, f}, L::kTranspose});
    out.push_back({p + "mlp.fc1.bias", q + "mlp.c_fc.bias", {f}, L::kSame});
    out.push_back({p + "mlp.fc2.weight", q + "mlp.c_proj.weight", {f, h}, L::kTranspose});
    out.push_back({p + "mlp.fc2.bias", q + "mlp.c_proj.bias", {h}, L::kSame});
  }
  out.push_back({"final_ln.weight", "ln_f.weight", {h}, L::kSame});
  out.push_back({"final_ln.bias", "ln_f.bias", {h}, L::kSame});
  if (!m.tied_embeddings) out.push_back({"output.weight", "lm_head.weight", {V, h}, L::kSame});
  return out;
}

Status CheckHfTensorEntry(const StTensor& t, const HfTensorSpec& s, const std::string& source) {
  if (!IsFloatDType(t.dtype)) {
    return Status::Invalid(source + ": tensor '" + t.name + "': dtype " + t.dtype +
                           " is not a floating-point type (F32, F16, BF16, F64)");
  }
  if (t.shape != s.hf_shape) {
    return Status::Invalid(source + ": tensor '" + t.name + "' has shape " + ShapeText(t.shape) +
                           ", config.json needs " + ShapeText(s.hf_shape));
  }
  return Status::Ok();
}

std::string HfFileName(const HfTensorSpec& s) {
  return s.hf == "lm_head.weight" || !s.gpt2_prefix ? s.hf : kPrefix + s.hf;
}

Result<std::map<std::string, StTensor>> MatchHfGpt2Header(const StHeader& h, const HfGpt2Config& c,
                                                          const std::string& source) {
  const std::vector<HfTensorSpec> specs = HfGpt2Tensors(c.model, c.n_positions);
  std::map<std::string, const HfTensorSpec*> by_hf;
  for (const auto& s : specs) by_hf[s.hf] = &s;
  std::map<std::string, StTensor> out;
  std::map<std::string, std::string> seen_as;  // HF base name -> the name the file used
  for (const StTensor& t : h.tensors) {
    std::string base = t.name;
    if (base.rfind(kPrefix, 0) == 0 && base != std::string(kPrefix) + "lm_head.weight") {
      base = base.substr(std::strlen(kPrefix));
    }
    auto it = by_hf.find(base);
    if (it == by_hf.end()) {
      if (IsMaskBuffer(base) || (base == "lm_head.weight" && c.model.tied_embeddings)) continue;
      return Status::Invalid(source + ": tensor '" + t.name +
                             "' is not a parameter of the GPT-2 model config.json describes");
    }
    const HfTensorSpec& s = *it->second;
    if (auto prev = seen_as.find(base); prev != seen_as.end()) {
      return Status::Invalid(source + ": tensor '" + t.name + "' appears twice (also as '" +
                             prev->second + "')");
    }
    seen_as[base] = t.name;
    PTDP_RETURN_IF_ERROR(CheckHfTensorEntry(t, s, source));
    out[s.ptdp] = t;
  }
  for (const auto& s : specs) {
    if (out.count(s.ptdp) == 0) {
      return Status::Invalid(source + ": missing tensor '" + HfFileName(s) + "'");
    }
  }
  return out;
}

bool DecodeFloats(const std::string& dtype, const char* bytes, int64_t n_bytes,
                  std::vector<float>* out) {
  const int esize = StDTypeBytes(dtype);
  if (dtype == "F8_E4M3" && n_bytes >= 0) {  // its block scales are the caller's (fp8.h)
    out->resize(static_cast<size_t>(n_bytes));
    for (int64_t i = 0; i < n_bytes; ++i) {
      (*out)[size_t(i)] = Fp8E4m3ToFloat(static_cast<uint8_t>(bytes[i]));
    }
    return true;
  }
  if (!IsFloatDType(dtype) || esize == 0 || n_bytes < 0 || n_bytes % esize != 0) return false;
  const int64_t n = n_bytes / esize;
  out->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const char* p = bytes + i * esize;
    float v = 0;
    if (dtype == "F32") {
      std::memcpy(&v, p, 4);
    } else if (dtype == "F64") {
      double d;
      std::memcpy(&d, p, 8);
      v = static_cast<float>(d);
    } else {
      uint16_t u;
      std::memcpy(&u, p, 2);
      if (dtype == "F16") {
        v = HalfToFloat(u);
      } else {
        const uint32_t bits = uint32_t(u) << 16;
        std::memcpy(&v, &bits, 4);
      }
    }
    (*out)[static_cast<size_t>(i)] = v;
  }
  return true;
}

namespace {

// kRopeInterleaved: the HF row of ptdp row r (rows of `cols` elements in s.rope_units units,
// each ending in s.rope_rows rotated rows: ptdp's pair e of halves x_e, y_e is HF's rows 2e, 2e+1).
int64_t InterleavedRow(const HfTensorSpec& s, int64_t r) {
  const int64_t unit = s.hf_shape[0] / s.rope_units, dr = s.rope_rows;
  const int64_t u = r / unit, j = r % unit - (unit - dr);
  if (j < 0) return r;
  return u * unit + (unit - dr) + (j < dr / 2 ? 2 * j : 2 * (j - dr / 2) + 1);
}

}  // namespace

std::vector<float> HfToRuntime(const HfTensorSpec& s, int64_t heads, const std::vector<float>& hf) {
  std::vector<float> rt(hf.size());
  switch (s.layout) {
    case HfLayout::kSame:
    case HfLayout::kExpertBias:
      rt = hf;
      break;
    case HfLayout::kRopeInterleaved: {
      const int64_t cols = s.hf_shape[1];
      for (int64_t r = 0; r < s.hf_shape[0]; ++r) {
        std::copy_n(hf.begin() + InterleavedRow(s, r) * cols, cols, rt.begin() + r * cols);
      }
      break;
    }
    case HfLayout::kTranspose: {  // hf [in][out] -> rt [out][in]
      const int64_t in = s.hf_shape[0], outd = s.hf_shape[1];
      for (int64_t i = 0; i < in; ++i) {
        for (int64_t o = 0; o < outd; ++o) rt[size_t(o * in + i)] = hf[size_t(i * outd + o)];
      }
      break;
    }
    case HfLayout::kQkvWeight: {  // hf [h][3h] -> rt [3h][h]
      const int64_t h = s.hf_shape[0];
      for (int64_t r = 0; r < 3 * h; ++r) {
        const int64_t col = QkvColumn(r, h, heads);
        for (int64_t i = 0; i < h; ++i) rt[size_t(r * h + i)] = hf[size_t(i * 3 * h + col)];
      }
      break;
    }
    case HfLayout::kQkvBias: {
      const int64_t h = s.hf_shape[0] / 3;
      for (int64_t r = 0; r < 3 * h; ++r) rt[size_t(r)] = hf[size_t(QkvColumn(r, h, heads))];
      break;
    }
    case HfLayout::kQProj:
    case HfLayout::kKProj:
    case HfLayout::kVProj:
    case HfLayout::kGateProj:
    case HfLayout::kUpProj:
      PTDP_CHECK_MSG(false, "HfToRuntime: '" + s.hf + "' is a part of " + s.ptdp +
                                " (Hugging Face Llama folders are exported, not read)");
  }
  return rt;
}

std::vector<float> RuntimeToHf(const HfTensorSpec& s, int64_t heads, const std::vector<float>& rt) {
  std::vector<float> hf(rt.size());
  switch (s.layout) {
    case HfLayout::kSame:
    case HfLayout::kExpertBias:
      hf = rt;
      break;
    case HfLayout::kRopeInterleaved: {
      const int64_t cols = s.hf_shape[1];
      for (int64_t r = 0; r < s.hf_shape[0]; ++r) {
        std::copy_n(rt.begin() + r * cols, cols, hf.begin() + InterleavedRow(s, r) * cols);
      }
      break;
    }
    case HfLayout::kTranspose: {
      const int64_t in = s.hf_shape[0], outd = s.hf_shape[1];
      for (int64_t i = 0; i < in; ++i) {
        for (int64_t o = 0; o < outd; ++o) hf[size_t(i * outd + o)] = rt[size_t(o * in + i)];
      }
      break;
    }
    case HfLayout::kQkvWeight: {
      const int64_t h = s.hf_shape[0];
      for (int64_t r = 0; r < 3 * h; ++r) {
        const int64_t col = QkvColumn(r, h, heads);
        for (int64_t i = 0; i < h; ++i) hf[size_t(i * 3 * h + col)] = rt[size_t(r * h + i)];
      }
      break;
    }
    case HfLayout::kQkvBias: {
      const int64_t h = s.hf_shape[0] / 3;
      for (int64_t r = 0; r < 3 * h; ++r) hf[size_t(QkvColumn(r, h, heads))] = rt[size_t(r)];
      break;
    }
    case HfLayout::kQProj:
    case HfLayout::kKProj:
    case HfLayout::kVProj:
    case HfLayout::kGateProj:
    case HfLayout::kUpProj:
      PTDP_CHECK_MSG(false, "RuntimeToHf: '" + s.hf + "' is a part of " + s.ptdp +
                                " (hf_llama.h LlamaPartOf extracts it)");
  }
  return hf;
}

}  // namespace ptdp::runtime
