#include "core/experts.h"

#include <algorithm>
#include <cmath>

namespace ptdp {

int64_t RoutedTokens(const ModelSpec& m, const ParallelConfig& c) {
  const int64_t tokens = int64_t(c.mbs) * ContextShardLen(m, c);
  return c.sequence_parallel ? tokens / c.tp : tokens;
}

int64_t ExpertCapacity(int64_t tokens, int topk, int experts, double factor) {
  return int64_t(std::ceil(double(tokens * topk) / double(experts) * factor));
}

int64_t UnitCopies(const ModelSpec& m, int64_t tokens) {
  const int64_t routed = tokens * m.moe_topk;
  if (!m.DropsTokens()) return routed;
  const int64_t E = m.moe_experts,
                capacity = ExpertCapacity(tokens, m.moe_topk, m.moe_experts, m.moe_capacity_factor);
  // Megatron-Core drops nothing when the capacity is over the unit's tokens, and then pads every
  // expert to all of them.
  if (capacity > tokens) return m.moe_pad_to_capacity ? E * tokens : routed;
  return m.moe_pad_to_capacity ? E * capacity : std::min(routed, E * capacity);
}

int64_t RoutedCopies(const ModelSpec& m, const ParallelConfig& c) {
  if (!m.DropsTokens()) return RoutedTokens(m, c) * m.moe_topk;
  const int64_t copies = int64_t(c.mbs) * UnitCopies(m, ContextShardLen(m, c));
  return c.sequence_parallel ? copies / c.tp : copies;
}

int64_t ExpertTokens(const ModelSpec& m, const ParallelConfig& c) {
  return RoutedCopies(m, c) * c.ExpertTp();
}

int LocalExperts(const ModelSpec& m, const ParallelConfig& c) {
  return m.moe_experts / c.ep;
}

ExpertParameterShapes ExpertShapes(const ModelSpec& m, const ParallelConfig& c) {
  const int64_t h = m.hidden, f = m.MoeFfnHidden(), et = c.ExpertTp();
  ExpertParameterShapes out;
  out.router.global_shape = out.router.local_shape = {m.moe_experts, h};
  out.router.sharding = Sharding::kReplicated;
  out.fc1.global_shape = {2 * f, h};
  out.fc1.local_shape = {2 * f / et, h};
  out.fc1.sharding = Sharding::kRows;  // over the expert tensor group
  out.fc1.expert = true;
  out.fc2.global_shape = {h, f};
  out.fc2.local_shape = {h, f / et};
  out.fc2.sharding = Sharding::kCols;
  out.fc2.expert = true;
  return out;
}

void AppendExpertParameters(const ModelSpec& m, const ParallelConfig& c, const std::string& prefix,
                            std::vector<ParamTensor>* ps, int ep_rank) {
  const ExpertParameterShapes shapes = ExpertShapes(m, c);
  ps->push_back(shapes.router);
  ps->back().name = prefix + "moe.router.weight";
  const int local = LocalExperts(m, c);
  for (int j = 0; j < local; ++j) {
    const std::string e = prefix + "moe.expert" + std::to_string(ep_rank * local + j) + ".";
    ps->push_back(shapes.fc1);
    ps->back().name = e + "fc1.weight";
    ps->push_back(shapes.fc2);
    ps->back().name = e + "fc2.weight";
  }
}

namespace {

// The MoE block's tensors between the router's input and the combine: the router's fp32 logits
// and top-k probabilities, the dispatched tokens (fc1's input), SwiGLU's input and, unless
// `without_act_output`, SwiGLU's output (fc2's input).
std::vector<ActTensor> ExpertInside(const ModelSpec& m, const ParallelConfig& c,
                                    bool without_act_output) {
  const int64_t routed = RoutedTokens(m, c), n = ExpertTokens(m, c);
  const int64_t f = m.MoeFfnHidden() / c.ExpertTp();
  std::vector<ActTensor> acts = {{"moe.router.logits", routed * m.moe_experts, ActKind::kFp32},
                                 {"moe.router.probs", routed * m.moe_topk, ActKind::kFp32},
                                 {"moe.fc1.input", n * m.hidden, ActKind::kLinearInput},
                                 {"moe.swiglu.input", n * 2 * f, ActKind::kActivation}};
  if (!without_act_output) acts.push_back(ExpertActOutput(m, c));
  return acts;
}

// A shared expert's: it reads the router's input (the same tensor in 16-bit training, its own FP8
// copy in fp8 training: Transformer Engine keeps the cast input); its SwiGLU input and fc2 input
// are a dense MLP's, on every token, split over the tensor group. Empty without one.
std::vector<ActTensor> SharedExpertInside(const ModelSpec& m, const ParallelConfig& c) {
  if (!m.HasSharedExpert()) return {};
  const int64_t tokens = int64_t(c.mbs) * ContextShardLen(m, c);
  const int64_t fs = m.moe_shared_ffn_hidden / c.tp;
  std::vector<ActTensor> acts;
  if (c.precision == Precision::kFp8) {
    acts.push_back({"moe.shared.fc1.input", RouterInput(m, c).elements, ActKind::kLinearInput});
  }
  acts.push_back({"moe.shared.swiglu.input", tokens * 2 * fs, ActKind::kActivation});
  acts.push_back({"moe.shared.fc2.input", tokens * fs, ActKind::kLinearInput});
  return acts;
}

void Append(const std::vector<ActTensor>& from, std::vector<ActTensor>* to) {
  to->insert(to->end(), from.begin(), from.end());
}

}  // namespace

std::vector<ActTensor> ExpertRecomputed(const ModelSpec& m, const ParallelConfig& c) {
  std::vector<ActTensor> out;
  if (c.Recomputes(kRecomputeMoe)) {  // the whole block, its shared expert with it
    Append(ExpertInside(m, c, false), &out);
    Append(SharedExpertInside(m, c), &out);
  } else {
    if (c.Recomputes(kRecomputeMoeAct)) out.push_back(ExpertActOutput(m, c));
    if (c.Recomputes(kRecomputeSharedExperts)) Append(SharedExpertInside(m, c), &out);
  }
  if (c.Recomputes(kRecomputeLayernorm)) out.push_back(RouterInput(m, c));
  return out;
}

ActTensor RouterInput(const ModelSpec& m, const ParallelConfig& c) {
  const int64_t sbh = int64_t(c.mbs) * ContextShardLen(m, c) * m.hidden;
  return {"moe.router.input", c.sequence_parallel ? sbh / c.tp : sbh, ActKind::kActivation};
}

ActTensor ExpertActOutput(const ModelSpec& m, const ParallelConfig& c) {
  return {"moe.fc2.input", ExpertTokens(m, c) * (m.MoeFfnHidden() / c.ExpertTp()),
          ActKind::kLinearInput};
}

std::vector<ActTensor> ExpertActivations(const ModelSpec& m, const ParallelConfig& c) {
  // The pre-MLP norm's output (the router's and the shared expert's input; the block's checkpoint
  // under recompute_modules moe), dropped and redone in the backward with layernorm.
  std::vector<ActTensor> acts;
  if (!c.Recomputes(kRecomputeLayernorm)) acts.push_back(RouterInput(m, c));
  if (c.Recomputes(kRecomputeMoe)) return acts;
  // SwiGLU's output dropped and redone with moe_act, the shared expert's inside with
  // shared_experts.
  Append(ExpertInside(m, c, c.Recomputes(kRecomputeMoeAct)), &acts);
  if (!c.Recomputes(kRecomputeSharedExperts)) Append(SharedExpertInside(m, c), &acts);
  return acts;
}

int64_t LayerExpertElements(const ModelSpec& m, const ParallelConfig& c) {
  if (!m.IsMoe()) return 0;
  return int64_t(LocalExperts(m, c)) * 3 * (m.MoeFfnHidden() / c.ExpertTp()) * m.hidden;
}

int64_t StageExpertElements(const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  if (!m.IsMoe()) return 0;
  // The mixture layers (the model's own kind), the prediction depths' among them.
  return int64_t(RankLayersByKind(m, c, pp_rank).own) * LayerExpertElements(m, c);
}

int64_t DispatchBytes(const ModelSpec& m, const ParallelConfig& c, int act_bytes) {
  return RoutedCopies(m, c) * m.hidden * act_bytes;
}

std::vector<int> ExpertParallelGroup(const ParallelConfig& c) {
  std::vector<int> g;
  for (int i = 0; i < c.ep; ++i) g.push_back(i * c.ExpertTp());
  return g;
}

std::vector<int> ExpertTensorGroup(const ParallelConfig& c) {
  std::vector<int> g;
  for (int i = 0; i < c.ExpertTp(); ++i) g.push_back(i);
  return g;
}

std::vector<int> ExpertDataGroup(const ParallelConfig& c) {
  std::vector<int> g;
  const int stride = c.ep * c.ExpertTp();
  for (int i = 0; i < c.ExpertWeightReplicas(); ++i) g.push_back(i * stride);
  return g;
}

namespace {

// C(n - a, k) / C(n, k): no one of a marked items among k drawn from n.
double NoneDrawn(int64_t n, int64_t a, int64_t k) {
  if (a <= 0) return 1.0;
  if (n - a < k) return 0.0;
  double p = 1.0;
  for (int64_t i = 0; i < k; ++i) p *= double(n - a - i) / double(n - i);
  return p;
}

// C(n, r) as a double (small n: groups).
double Choose(int64_t n, int64_t r) {
  if (r < 0 || r > n) return 0.0;
  double c = 1.0;
  for (int64_t i = 1; i <= r; ++i) c = c * double(n - r + i) / double(i);
  return c;
}

}  // namespace

double RemoteNodesPerToken(const ModelSpec& m, int nodes) {
  if (nodes < 2 || !m.IsMoe()) return 0.0;
  const int64_t E = m.moe_experts, k = m.moe_topk, on_node = E / nodes;
  const int64_t groups = m.moe_router_groups, picked = m.moe_router_group_topk;
  double hit = 1.0 - NoneDrawn(E, on_node, k);  // ungrouped, or groups that do not nest
  if (groups > 1 && E % groups == 0) {
    const int64_t per_group = E / groups, pool = picked * per_group;
    if (groups % nodes == 0) {  // q whole groups on each node: j of them picked
      const int64_t q = groups / nodes;
      hit = 0.0;
      for (int64_t j = 1; j <= std::min(q, picked); ++j) {
        const double p_j = Choose(q, j) * Choose(groups - q, picked - j) / Choose(groups, picked);
        hit += p_j * (1.0 - NoneDrawn(pool, j * per_group, k));
      }
    } else if (nodes % groups == 0) {  // a group over nodes / groups nodes: picked or not
      hit = double(picked) / double(groups) * (1.0 - NoneDrawn(pool, on_node, k));
    }
  }
  return double(nodes - 1) * hit;
}

}  // namespace ptdp
