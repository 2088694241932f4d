#include "runtime/model/wiring.h"

#include <string>

namespace ptdp::runtime {
namespace {

// The tensors of LayerWeights and LayerGrads, in their order; biases and the QK norm's weights
// may be absent.
struct Slot {
  const char* name;
  bool optional;
};
constexpr int kSlotCount = 14;
constexpr Slot kSlots[kSlotCount] = {
    {"ln1.weight", false},        {"ln1.bias", true},          {"attn.qkv.weight", false},
    {"attn.qkv.bias", true},      {"attn.proj.weight", false}, {"attn.proj.bias", true},
    {"ln2.weight", false},        {"ln2.bias", true},          {"mlp.fc1.weight", false},
    {"mlp.fc1.bias", true},       {"mlp.fc2.weight", false},   {"mlp.fc2.bias", true},
    {"attn.q_norm.weight", true}, {"attn.k_norm.weight", true}};

// Store indices of the layer's slots (-1: absent).
void Indices(const ParamStore& s, int chunk, int layer, int out[kSlotCount]) {
  const std::string p = "layer" + std::to_string(layer) + ".";
  for (int k = 0; k < kSlotCount; ++k) {
    out[k] = s.Find(chunk, p + kSlots[k].name);
    PTDP_CHECK_MSG(out[k] >= 0 || kSlots[k].optional, "the store holds no " + p + kSlots[k].name);
  }
}

}  // namespace

LayerWeights LayerWeightsOf(const ParamStore& s, int chunk, int layer) {
  int at[kSlotCount];
  Indices(s, chunk, layer, at);
  auto w = [&](int k) { return at[k] >= 0 ? s.weight(at[k]) : ConstRef{}; };
  return {w(0), w(1), w(2), w(3), w(4), w(5), w(6), w(7), w(8), w(9), w(10), w(11), w(12), w(13)};
}

LayerGrads LayerGradsOf(ParamStore& s, int chunk, int layer) {
  int at[kSlotCount];
  Indices(s, chunk, layer, at);
  auto g = [&](int k) { return at[k] >= 0 ? s.grad(at[k]) : TensorRef{}; };
  return {g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7), g(8), g(9), g(10), g(11), g(12), g(13)};
}

LayerArch ArchOf(const ModelSpec& m) {
  LayerArch a;
  a.rmsnorm = m.rmsnorm;
  a.layernorm_1p = m.layernorm_1p;
  a.squared_relu = m.squared_relu;
  a.window_size = m.window_size;
  a.window_full_every = m.window_full_every;
  a.swiglu = m.swiglu;
  a.rotary = m.rotary;
  a.rope = {m.rotary_base,
            m.rope_scaling_factor,
            m.rope_low_freq_factor,
            m.rope_high_freq_factor,
            static_cast<double>(m.rope_original_max_positions),
            m.rotary_percent};
  a.norm_eps = m.norm_eps;
  a.qk_norm = m.qk_norm;
  return a;
}

}  // namespace ptdp::runtime
