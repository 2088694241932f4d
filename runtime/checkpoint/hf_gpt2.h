// Hugging Face GPT-2 folders (docs/checkpoints.md "Hugging Face GPT-2"): config.json and
// model.safetensors as transformers' GPT2LMHeadModel writes and reads them, mapped onto the
// runtime's parameters (runtime/model/params.h global names). Pure functions over bytes and
// values: no files, no device (fuzz/fuzz_hf_gpt2.cc links this file alone).
//
// The mapping (HF names may carry the "transformer." prefix that GPT2LMHeadModel's save_pretrained
// writes, or none, as GPT2Model and the original openai-community/gpt2 file have):
//   wte.weight [V, h]                 embedding.word [V_padded, h] (rows >= V: padding)
//   wpe.weight [n_positions, h]       embedding.position [s, h] (the first s rows; s <=
//   n_positions) h.L.ln_1.{weight,bias}            layerL.ln1.{weight,bias} h.L.attn.c_attn.weight
//   [h, 3h]    layerL.attn.qkv.weight [3h, h]: Conv1D stores [in, out], and
//                                     its columns are [q | k | v], each head-major, while our rows
//                                     are (head, {q, k, v}, d) (kernels/reference/ops.h)
//   h.L.attn.c_attn.bias [3h]         layerL.attn.qkv.bias, permuted the same way
//   h.L.attn.c_proj.weight [h, h]     layerL.attn.proj.weight (transposed)
//   h.L.ln_2, h.L.mlp.c_fc, c_proj    layerL.ln2, mlp.fc1 (transposed), mlp.fc2 (transposed)
//   ln_f.{weight,bias}                final_ln.{weight,bias}
//   lm_head.weight [V, h]             output.weight (untied embeddings only)
// What the runtime's GPT computes and HF's config must therefore say: GeLU's tanh approximation
// ("gelu_new" or "gelu_pytorch_tanh"), LayerNorm epsilon 1e-5, attention scaled by 1/sqrt(d) and
// not by the layer index, no cross-attention; anything else is refused naming the field.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/model.h"
#include "runtime/checkpoint/fp8.h"
#include "runtime/checkpoint/safetensors.h"

namespace ptdp::runtime {

// config.json is a few hundred bytes; anything near this is not one.
inline constexpr int64_t kMaxHfConfigBytes = int64_t(1) << 20;

// A Hugging Face config.json as the runtime reads it (GPT-2's here, Llama's in hf_llama.h).
struct HfGpt2Config {
  ModelSpec model;          // seq_len = n_positions
  int64_t n_positions = 0;  // rows of wpe (Llama: max_position_embeddings)
  Fp8Blocks fp8;            // quantization_config's blocks (Llama family; fp8.h)
};

// Checks a parsed config.json (`source` names the file in errors: "<source>: <field>: <reason>").
// Keys that do not change the computation are ignored; every key that does is checked.
Result<HfGpt2Config> HfGpt2ConfigFromJson(const Json& j, const std::string& source);
// The config.json `ptdp export --to hf-gpt2` writes for `m` (n_positions = m.seq_len).
OrderedJson HfGpt2ConfigToJson(const ModelSpec& m);

enum class HfLayout {
  kSame,       // same shape, same order
  kTranspose,  // Conv1D [in, out] <-> Linear [out, in]
  kQkvWeight,  // c_attn.weight [h, 3h] <-> qkv.weight [3h, h], heads interleaved
  kQkvBias,    // c_attn.bias [3h] <-> qkv.bias [3h]
  // Llama (hf_llama.h): each is a part of one runtime tensor, so only RuntimeToHf takes them.
  kQProj,  // q_proj.weight [a D, h]: the query rows of qkv.weight (kernels/reference/qkv_layout.h)
  kKProj,  // k_proj.weight [kv D, h]: its key rows
  kVProj,  // v_proj.weight [kv D, h]: its value rows
  kGateProj,  // gate_proj.weight [f, h]: the even rows of fc1.weight [f][2][h]
  kUpProj,    // up_proj.weight [f, h]: its odd rows
  // A router's e_score_correction_bias [E] (GLM-4.5's, DeepSeek-V3's): the expert bias of a
  // mixture layer (runtime/model/router_bias.h), a buffer the checkpoint's manifest holds, not a
  // parameter; its values as they are, kept in fp32 (transformers keeps it so).
  kExpertBias,
  // DeepSeek's rotated rows (hf_deepseek.h): the tensor's rows in HfTensorSpec::rope_units equal
  // units, each ending in rope_rows rotated rows that HF pairs interleaved (x0 y0 x1 y1 ...) and
  // ptdp in halves (x0 x1 ... y0 y1 ...); the other rows as they are.
  kRopeInterleaved,
};

struct HfTensorSpec {
  std::string ptdp;               // runtime global name
  std::string hf;                 // HF name without the "transformer." prefix (GPT-2), or whole
  std::vector<int64_t> hf_shape;  // what the HF file holds
  HfLayout layout = HfLayout::kSame;
  bool gpt2_prefix = true;  // the file name carries "transformer." (GPT-2's, but lm_head.weight)
  int64_t rope_units = 1, rope_rows = 0;  // kRopeInterleaved's units and rotated rows per unit
};

// Every HF tensor of the model, in GPT2LMHeadModel's order; wpe has `n_positions` rows.
std::vector<HfTensorSpec> HfGpt2Tensors(const ModelSpec& m, int64_t n_positions);
// The name an HF file written by save_pretrained of GPT2LMHeadModel uses.
std::string HfFileName(const HfTensorSpec& s);

// Matches a safetensors header against the config: every tensor present once (with or without the
// "transformer." prefix) with its shape and a float dtype (F32, F16, BF16, F64). The attention's
// causal-mask buffers (h.L.attn.bias, h.L.attn.masked_bias) and, with tied embeddings,
// lm_head.weight are skipped; any other tensor is refused. Returns the header entry of each
// ptdp name.
Result<std::map<std::string, StTensor>> MatchHfGpt2Header(const StHeader& h, const HfGpt2Config& c,
                                                          const std::string& source);

// A header entry against its spec: a float dtype (F32, F16, BF16, F64) and the spec's shape.
Status CheckHfTensorEntry(const StTensor& t, const HfTensorSpec& s, const std::string& source);

// Raw little-endian values of `dtype` (F32, F16, BF16, F64, or F8_E4M3 before its block scales) as
// floats; false for another dtype or a size that is not a whole number of elements.
bool DecodeFloats(const std::string& dtype, const char* bytes, int64_t n_bytes,
                  std::vector<float>* out);

// HF values (s.hf_shape, row-major) -> the runtime's orientation: the runtime global tensor with
// the vocabulary unpadded and wpe's n_positions rows. `heads` of the model (kQkv*). GPT-2's
// layouts only: a Llama part (kQProj .. kUpProj) is not a whole tensor (checked).
std::vector<float> HfToRuntime(const HfTensorSpec& s, int64_t heads, const std::vector<float>& hf);
// The runtime's values (as above) -> HF's (GPT-2's layouts only, as HfToRuntime).
std::vector<float> RuntimeToHf(const HfTensorSpec& s, int64_t heads, const std::vector<float>& rt);
// Whether the layout is a part of one runtime tensor (Llama's; hf_llama.h LlamaPartOf).
inline bool IsLlamaPart(HfLayout l) {
  return l == HfLayout::kQProj || l == HfLayout::kKProj || l == HfLayout::kVProj ||
         l == HfLayout::kGateProj || l == HfLayout::kUpProj;
}

}  // namespace ptdp::runtime
