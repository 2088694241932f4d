#include "runtime/model/wiring.h"

#include <string>
#include <vector>

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

// Store indices of the layer's slots (-1: absent). A mixture-of-experts layer has no fc1 and fc2,
// a multi-latent attention layer no attn.qkv.weight.
void Indices(const ParamStore& s, int chunk, const std::string& p, int out[kSlotCount]) {
  const bool moe = s.Find(chunk, p + "moe.router.weight") >= 0;
  const bool mla = s.Find(chunk, p + "attn.kv_up.weight") >= 0;
  for (int k = 0; k < kSlotCount; ++k) {
    out[k] = s.Find(chunk, p + kSlots[k].name);
    const bool optional = kSlots[k].optional || (moe && (k == 8 || k == 10)) || (mla && k == 2);
    PTDP_CHECK_MSG(out[k] >= 0 || optional, "the store holds no " + p + kSlots[k].name);
  }
}

// The router's index and each local expert's fc1 and fc2 in the store's order (core/experts.h
// AppendExpertParameters' names: the global indices of this expert-parallel rank's experts), or -1
// and none for a dense layer.
struct ExpertIndices {
  int router = -1;
  std::vector<int> fc1, fc2;
  int shared_fc1 = -1, shared_fc2 = -1, shared_gate = -1;  // the shared expert's, if any
};
ExpertIndices ExpertsOf(const ParamStore& s, int chunk, const std::string& layer_prefix) {
  const std::string p = layer_prefix + "moe.";
  ExpertIndices x;
  x.router = s.Find(chunk, p + "router.weight");
  if (x.router < 0) return x;
  x.shared_fc1 = s.Find(chunk, p + "shared.fc1.weight");
  x.shared_fc2 = s.Find(chunk, p + "shared.fc2.weight");
  x.shared_gate = s.Find(chunk, p + "shared.gate.weight");
  const std::string expert = p + "expert";
  auto has_suffix = [](const std::string& name, const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (int i = 0; i < static_cast<int>(s.entries().size()); ++i) {
    const ParamEntry& e = s.entries()[size_t(i)];
    if (e.chunk != chunk || e.spec.name.compare(0, expert.size(), expert) != 0) continue;
    if (has_suffix(e.spec.name, ".fc1.weight")) x.fc1.push_back(i);
    if (has_suffix(e.spec.name, ".fc2.weight")) x.fc2.push_back(i);
  }
  PTDP_CHECK_MSG(!x.fc1.empty() && x.fc1.size() == x.fc2.size(),
                 "the store holds a router but not each expert's fc1 and fc2 in " + p);
  return x;
}

// Multi-latent attention's projections (core/shapes.h AppendMlaProjections), each absent (-1)
// in a layer without them: q_down, q_up (attn.q.weight without a query latent), kv_down, kv_norm,
// kv_up.
std::vector<int> MlaIndices(const ParamStore& s, int chunk, const std::string& p) {
  int q_up = s.Find(chunk, p + "attn.q_up.weight");
  if (q_up < 0) q_up = s.Find(chunk, p + "attn.q.weight");
  return {s.Find(chunk, p + "attn.q_down.weight"), q_up, s.Find(chunk, p + "attn.kv_down.weight"),
          s.Find(chunk, p + "attn.kv_norm.weight"), s.Find(chunk, p + "attn.kv_up.weight")};
}

}  // namespace

static std::string WiredLayerPrefix(int layer) {
  return "layer" + std::to_string(layer) + ".";
}

LayerWeights LayerWeightsOf(const ParamStore& s, int chunk, int layer) {
  return LayerWeightsOf(s, chunk, WiredLayerPrefix(layer));
}

LayerGrads LayerGradsOf(ParamStore& s, int chunk, int layer) {
  return LayerGradsOf(s, chunk, WiredLayerPrefix(layer));
}

LayerWeights LayerWeightsOf(const ParamStore& s, int chunk, const std::string& layer) {
  int at[kSlotCount];
  Indices(s, chunk, layer, at);
  auto w = [&](int k) { return at[k] >= 0 ? s.weight(at[k]) : ConstRef{}; };
  LayerWeights lw{
      w(0),  w(1),  w(2), w(3), w(4), w(5), w(6), w(7), w(8), w(9),    w(10), w(11),
      w(12), w(13), {},   {},   {},   {},   {},   {},   {},   nullptr,  // the expert bias is the
      {},    {},    {},   {},   {}};  // trainer's (RouterBiases); multi-latent attention's below
  const ExpertIndices x = ExpertsOf(s, chunk, layer);
  if (x.router >= 0) lw.router_w = s.weight(x.router);
  for (int i : x.fc1) lw.expert_fc1.push_back(s.weight(i));
  for (int i : x.fc2) lw.expert_fc2.push_back(s.weight(i));
  if (x.shared_fc1 >= 0) lw.shared_fc1 = s.weight(x.shared_fc1);
  if (x.shared_fc2 >= 0) lw.shared_fc2 = s.weight(x.shared_fc2);
  if (x.shared_gate >= 0) lw.shared_gate = s.weight(x.shared_gate);
  const std::vector<int> mla = MlaIndices(s, chunk, layer);
  ConstRef* mla_w[] = {&lw.q_down_w, &lw.q_up_w, &lw.kv_down_w, &lw.kv_norm_w, &lw.kv_up_w};
  for (size_t k = 0; k < mla.size(); ++k) *mla_w[k] = mla[k] >= 0 ? s.weight(mla[k]) : ConstRef{};
  return lw;
}

LayerGrads LayerGradsOf(ParamStore& s, int chunk, const std::string& layer) {
  int at[kSlotCount];
  Indices(s, chunk, layer, at);
  auto g = [&](int k) { return at[k] >= 0 ? s.grad(at[k]) : TensorRef{}; };
  LayerGrads lg{
      g(0),  g(1), g(2), g(3), g(4), g(5), g(6), g(7), g(8), g(9), g(10), g(11), g(12),
      g(13), {},   {},   {},   {},   {},   {},   {},   {},   {},   {},    {}};  // multi-latent
                                                                                // attention's:
                                                                                // below
  const ExpertIndices x = ExpertsOf(s, chunk, layer);
  if (x.router >= 0) lg.router_w = s.grad(x.router);
  for (int i : x.fc1) lg.expert_fc1.push_back(s.grad(i));
  for (int i : x.fc2) lg.expert_fc2.push_back(s.grad(i));
  if (x.shared_fc1 >= 0) lg.shared_fc1 = s.grad(x.shared_fc1);
  if (x.shared_fc2 >= 0) lg.shared_fc2 = s.grad(x.shared_fc2);
  if (x.shared_gate >= 0) lg.shared_gate = s.grad(x.shared_gate);
  const std::vector<int> mla = MlaIndices(s, chunk, layer);
  TensorRef* mla_g[] = {&lg.q_down_w, &lg.q_up_w, &lg.kv_down_w, &lg.kv_norm_w, &lg.kv_up_w};
  for (size_t k = 0; k < mla.size(); ++k) *mla_g[k] = mla[k] >= 0 ? s.grad(mla[k]) : TensorRef{};
  return lg;
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
  a.rope.base = m.rotary_base;
  a.rope.factor = m.rope_scaling_factor;
  a.rope.low_freq_factor = m.rope_low_freq_factor;
  a.rope.high_freq_factor = m.rope_high_freq_factor;
  a.rope.original_max_positions = static_cast<double>(m.rope_original_max_positions);
  a.rope.percent = m.rotary_percent;
  a.rope.yarn = m.RopeYarn();
  a.rope.beta_fast = m.rope_yarn_beta_fast;
  a.rope.beta_slow = m.rope_yarn_beta_slow;
  a.rope.attention_factor = m.RopeAttentionFactor();
  a.mla_softmax_factor = m.MlaSoftmaxFactor();
  a.norm_eps = m.norm_eps;
  a.qk_norm = m.qk_norm;
  a.moe_experts = m.moe_experts;
  a.moe_topk = m.moe_topk;
  a.moe_router_groups = m.moe_router_groups;
  a.moe_router_group_topk = m.moe_router_group_topk;
  a.moe_router_pre_softmax = m.moe_router_pre_softmax;
  a.moe_router_sigmoid = m.moe_router_sigmoid;
  a.moe_router_topk_scale = m.moe_router_topk_scale;
  a.moe_capacity_factor = m.moe_capacity_factor;
  a.moe_drop_by_position = m.moe_drop_by_position;
  a.moe_pad_to_capacity = m.moe_pad_to_capacity;
  return a;
}

}  // namespace ptdp::runtime
