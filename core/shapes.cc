#include "core/shapes.h"

#include "core/experts.h"

namespace ptdp {

int VirtualStage(const ParallelConfig& c, int pp_rank, int chunk) {
  return StageOfChunk(c.schedule, c.pp, pp_rank, chunk);
}

int HeadRank(const ParallelConfig& c) {
  return HolderOfStage(c.schedule, c.pp, c.VirtualStages() - 1).pp_rank;
}

bool InTiedEmbeddingGroup(const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  const int head = HeadRank(c);
  // Multi-token prediction reads the word embedding on the head's rank too: its copy there is
  // tied to the first stage's, tied output layer or not.
  return (m.tied_embeddings || m.mtp_layers > 0) && head != 0 && (pp_rank == 0 || pp_rank == head);
}

LayerRange ChunkLayers(const ModelSpec& m, const ParallelConfig& c, int pp_rank, int chunk) {
  if (!c.Uneven()) {
    PTDP_CHECK(m.layers % c.VirtualStages() == 0);
    const int per = m.layers / c.VirtualStages();
    const int k = VirtualStage(c, pp_rank, chunk);
    return LayerRange{k * per, (k + 1) * per};
  }
  if (!c.stage_layers.empty()) {
    // Per-virtual-stage counts (ParallelConfig::ValidateStageLayers: pp vp of them, a pipeline
    // rank's with vp = 1): a virtual stage starts after the layers of the stages before it.
    const int k = VirtualStage(c, pp_rank, chunk);
    PTDP_CHECK(c.stage_layers.size() == size_t(c.VirtualStages()));
    int begin = 0;
    for (int i = 0; i < k; ++i) begin += c.stage_layers[size_t(i)];
    return LayerRange{begin, begin + c.stage_layers[size_t(k)]};
  }
  if (c.vp > 1) {
    // Interleaved with short ends (ParallelConfig::ValidateInterleavedEnds): virtual stage k
    // holds `per` layers but the first (e) and the last (o) one fewer, in order.
    const int e = c.first_stage_layers > 0, o = c.last_stage_layers > 0;
    const Result<int> per_or = ShortEndsVirtualStageLayers(m, c.pp, c.vp, e, o, "layout");
    PTDP_CHECK(c.schedule == ScheduleKind::kInterleaved && per_or.ok());
    const int per = *per_or;
    const int k = VirtualStage(c, pp_rank, chunk);
    const int begin = k == 0 ? 0 : k * per - e;
    const int end = k == c.VirtualStages() - 1 ? m.layers : (k + 1) * per - e;
    return LayerRange{begin, end};
  }
  // Uneven (ParallelConfig::ValidateStageSplit holds the middle share exact).
  PTDP_CHECK(chunk == 0 && c.pp >= 2);
  const int first = c.first_stage_layers, last = c.last_stage_layers;
  const int middle_stages = c.pp - (first > 0) - (last > 0);
  const int middle = middle_stages > 0 ? (m.layers - first - last) / middle_stages : 0;
  const int on_first = first > 0 ? first : middle;
  const int begin = pp_rank == 0 ? 0 : on_first + (pp_rank - 1) * middle;
  const int end = pp_rank == c.pp - 1 ? m.layers : begin + (pp_rank == 0 ? on_first : middle);
  return LayerRange{begin, end};
}

int RankLayerCount(const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  int layers = 0;
  for (int k = 0; k < c.vp; ++k) layers += ChunkLayers(m, c, pp_rank, k).size();
  return layers;
}

std::vector<int> StageLayerCounts(const ModelSpec& m, const ParallelConfig& c) {
  std::vector<int> counts(size_t(c.pp), 0);
  for (int r = 0; r < c.pp; ++r) counts[size_t(r)] = RankLayerCount(m, c, r);
  return counts;
}

bool HoldsEmbedding(const ParallelConfig& c, int pp_rank, int chunk) {
  return VirtualStage(c, pp_rank, chunk) == 0;
}
bool HoldsHead(const ParallelConfig& c, int pp_rank, int chunk) {
  return VirtualStage(c, pp_rank, chunk) == c.VirtualStages() - 1;
}

int64_t ParamTensor::LocalElements() const {
  int64_t n = 1;
  for (auto d : local_shape) n *= d;
  return n;
}
int64_t ParamTensor::GlobalElements() const {
  int64_t n = 1;
  for (auto d : global_shape) n *= d;
  return n;
}

namespace {

ParamTensor Make(std::string name, std::vector<int64_t> global, Sharding s, int tp) {
  ParamTensor p;
  p.name = std::move(name);
  p.global_shape = global;
  p.local_shape = global;
  p.sharding = s;
  if (s == Sharding::kRows) p.local_shape[0] /= tp;
  if (s == Sharding::kCols) p.local_shape[1] /= tp;
  return p;
}

// Multi-latent attention's projections (MlaProjections) and its latents' norms: the down
// projections whole on every tensor rank (Megatron-Core's duplicated TE Linear; their gradients
// are all-reduced over the tensor group), the up projections column-parallel.
void AppendMlaProjections(const ModelSpec& m, int t, const std::string& p,
                          std::vector<ParamTensor>* ps) {
  const int64_t h = m.hidden, a = m.heads, q = m.mla_q_lora, kv = m.mla_kv_lora;
  if (q > 0) {
    ps->push_back(Make(p + "attn.q_down.weight", {q, h}, Sharding::kReplicated, t));
    if (m.qk_norm) ps->push_back(Make(p + "attn.q_norm.weight", {q}, Sharding::kReplicated, t));
    ps->push_back(Make(p + "attn.q_up.weight", {a * m.QkHeadDim(), q}, Sharding::kRows, t));
  } else {
    ps->push_back(Make(p + "attn.q.weight", {a * m.QkHeadDim(), h}, Sharding::kRows, t));
  }
  ps->push_back(
      Make(p + "attn.kv_down.weight", {kv + m.mla_rope_dim, h}, Sharding::kReplicated, t));
  if (m.qk_norm) ps->push_back(Make(p + "attn.kv_norm.weight", {kv}, Sharding::kReplicated, t));
  ps->push_back(
      Make(p + "attn.kv_up.weight", {a * (m.HeadDim() + m.VHeadDim()), kv}, Sharding::kRows, t));
}

// One transformer layer's parameters on one tensor rank (Megatron-LM's order). Grouped-query
// attention shards QKV by query groups (each tensor rank holds h/t query features and kv_heads/t
// key and value heads); SwiGLU's gate and up are one column-parallel fc1 of 2f rows.
// A mixture of experts has the router and its experts (core/experts.h) in place of fc1 and fc2;
// without `with_experts` they are left out (LayerParameterCounts counts them from ExpertShapes).
void AppendLayer(const ModelSpec& m, const ParallelConfig& c, const std::string& p,
                 std::vector<ParamTensor>* ps, bool with_experts = true, int ep_rank = 0) {
  const int t = c.tp;
  const int64_t h = m.hidden, f = m.FfnHidden(), qkv = m.QkvOut(), fc1 = m.Fc1Out();
  auto norm = [&](const std::string& name) {
    ps->push_back(Make(p + name + ".weight", {h}, Sharding::kReplicated, t));
    if (!m.rmsnorm) ps->push_back(Make(p + name + ".bias", {h}, Sharding::kReplicated, t));
  };
  auto bias = [&](const std::string& name, int64_t n, Sharding s) {
    if (m.linear_bias) ps->push_back(Make(p + name, {n}, s, t));
  };
  norm("ln1");
  if (m.IsMla()) {
    AppendMlaProjections(m, t, p, ps);
  } else {
    ps->push_back(Make(p + "attn.qkv.weight", {qkv, h}, Sharding::kRows, t));
    if (m.HasQkvBias()) ps->push_back(Make(p + "attn.qkv.bias", {qkv}, Sharding::kRows, t));
  }
  if (m.qk_norm && !m.IsMla()) {  // one dh-wide weight each, shared by every head
    ps->push_back(Make(p + "attn.q_norm.weight", {m.HeadDim()}, Sharding::kReplicated, t));
    ps->push_back(Make(p + "attn.k_norm.weight", {m.HeadDim()}, Sharding::kReplicated, t));
  }
  ps->push_back(Make(p + "attn.proj.weight", {h, m.AttnWidth()}, Sharding::kCols, t));
  bias("attn.proj.bias", h, Sharding::kReplicated);
  norm("ln2");
  if (m.IsMoe()) {
    if (with_experts) AppendExpertParameters(m, c, p, ps, ep_rank);
    if (m.HasSharedExpert()) {  // a SwiGLU MLP over the tensor group, as a dense layer's
      const int64_t fs = m.moe_shared_ffn_hidden;
      ps->push_back(Make(p + "moe.shared.fc1.weight", {2 * fs, h}, Sharding::kRows, t));
      ps->push_back(Make(p + "moe.shared.fc2.weight", {h, fs}, Sharding::kCols, t));
      if (m.moe_shared_gate) {
        ps->push_back(Make(p + "moe.shared.gate.weight", {1, h}, Sharding::kReplicated, t));
      }
    }
    return;
  }
  ps->push_back(Make(p + "mlp.fc1.weight", {fc1, h}, Sharding::kRows, t));
  bias("mlp.fc1.bias", fc1, Sharding::kRows);
  ps->push_back(Make(p + "mlp.fc2.weight", {h, f}, Sharding::kCols, t));
  bias("mlp.fc2.bias", h, Sharding::kReplicated);
}

// The embedding's parameters on one tensor rank, when the chunk holds the embedding.
void AppendEmbedding(const ModelSpec& m, int t, std::vector<ParamTensor>* ps) {
  const int64_t h = m.hidden, v = PaddedVocab(m, t), s = m.seq_len;
  ps->push_back(Make("embedding.word", {v, h}, Sharding::kRows, t));  // vocab-parallel
  if (!m.rotary) ps->push_back(Make("embedding.position", {s, h}, Sharding::kReplicated, t));
}

// The head's parameters (final norm, output matrix or its tied copy) on one tensor rank, then
// each multi-token prediction depth's (ModelSpec::mtp_layers): its norms, eh_proj (column-
// parallel, [2h] in, h / t out), a layer of the last layer's kind, its final norm; and, on a rank
// without the embedding, its copy for the depths (the tied output matrix's, if the model ties).
void AppendHead(const ModelSpec& m, const ParallelConfig& c, int pp_rank,
                std::vector<ParamTensor>* ps, int ep_rank = 0) {
  const int t = c.tp;
  const int64_t h = m.hidden, v = PaddedVocab(m, t);
  ps->push_back(Make("final_ln.weight", {h}, Sharding::kReplicated, t));
  if (!m.rmsnorm) ps->push_back(Make("final_ln.bias", {h}, Sharding::kReplicated, t));
  if (!m.tied_embeddings) {
    ps->push_back(Make("output.weight", {v, h}, Sharding::kRows, t));
  } else if (pp_rank != 0) {  // the rank holds no embedding to share the matrix with
    ParamTensor copy = Make("output.word_copy", {v, h}, Sharding::kRows, t);
    copy.tied_copy = true;
    ps->push_back(copy);
  }
  auto norm = [&](const std::string& name) {
    ps->push_back(Make(name + ".weight", {h}, Sharding::kReplicated, t));
    if (!m.rmsnorm) ps->push_back(Make(name + ".bias", {h}, Sharding::kReplicated, t));
  };
  for (int d = 0; d < m.mtp_layers; ++d) {
    const std::string p = "mtp" + std::to_string(d) + ".";
    for (const char* n : {"enorm", "hnorm"}) norm(p + n);
    ps->push_back(Make(p + "eh_proj.weight", {h, 2 * h}, Sharding::kRows, t));
    AppendLayer(LayerModel(m, m.layers - 1), c, p, ps, true, ep_rank);  // its experts: ep_rank's
    norm(p + "final_norm");
  }
  if (m.mtp_layers > 0 && pp_rank != 0 && !m.tied_embeddings) {
    ParamTensor copy = Make("mtp.embedding_copy", {v, h}, Sharding::kRows, t);
    copy.tied_copy = true;
    ps->push_back(copy);
  }
}

}  // namespace

std::vector<ParamTensor> ChunkParameters(const ModelSpec& m, const ParallelConfig& c, int pp_rank,
                                         int chunk, int ep_rank) {
  std::vector<ParamTensor> ps;
  if (HoldsEmbedding(c, pp_rank, chunk)) AppendEmbedding(m, c.tp, &ps);
  const LayerRange lr = ChunkLayers(m, c, pp_rank, chunk);
  for (int l = lr.begin; l < lr.end; ++l) {
    AppendLayer(LayerModel(m, l), c, "layer" + std::to_string(l) + ".", &ps, true, ep_rank);
  }
  if (HoldsHead(c, pp_rank, chunk)) AppendHead(m, c, pp_rank, &ps, ep_rank);
  return ps;
}

std::vector<ParamTensor> StageParameters(const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  std::vector<ParamTensor> all;
  for (int k = 0; k < c.vp; ++k) {
    auto ps = ChunkParameters(m, c, pp_rank, k);
    all.insert(all.end(), ps.begin(), ps.end());
  }
  return all;
}

LayerParameters LayerParameterCounts(const ModelSpec& m, const ParallelConfig& c) {
  LayerParameters out;
  auto count = [&out](const ParamTensor& p, int copies) {
    out.tensors += copies;
    const int64_t elements = int64_t(copies) * p.LocalElements();
    out.elements += elements;
    // The Linears' weights: the split ones, and multi-latent attention's down projections,
    // copies on every rank; the router's [E, h] and the shared expert's gate (replicated too)
    // stay in 16 bits. (The name is read only for the few replicated matrices: the search counts
    // a layer for every layout it scores.)
    const bool linear = p.local_shape.size() == 2 && (p.sharding != Sharding::kReplicated ||
                                                      p.name.find("_down.") != std::string::npos);
    if (linear) out.linear_weight_elements += elements;
    if (p.expert) out.expert_elements += elements;
  };
  std::vector<ParamTensor> ps;
  AppendLayer(m, c, "", &ps, /*with_experts=*/false);
  for (const auto& p : ps) count(p, 1);
  if (m.IsMoe()) {  // as AppendExpertParameters lists them, without a name per expert
    const ExpertParameterShapes experts = ExpertShapes(m, c);
    count(experts.router, 1);
    count(experts.fc1, LocalExperts(m, c));
    count(experts.fc2, LocalExperts(m, c));
  }
  return out;
}

LayerParameters LayerParameterCounts(const ModelSpec& m, int tp) {
  ParallelConfig c;
  c.tp = tp;
  return LayerParameterCounts(m, c);
}

std::vector<LinearShape> MlaProjections(const ModelSpec& m, int tp, int64_t tokens,
                                        bool sequence_parallel) {
  const int64_t own = sequence_parallel ? tokens / tp : tokens;  // the down projections' rows
  const int64_t h = m.hidden, a = m.heads, q = m.mla_q_lora, kv = m.mla_kv_lora;
  std::vector<LinearShape> out;
  if (q > 0) {
    out.push_back({own, q, h});
    out.push_back({tokens, a * m.QkHeadDim() / tp, q});
  } else {
    out.push_back({tokens, a * m.QkHeadDim() / tp, h});
  }
  out.push_back({own, kv + m.mla_rope_dim, h});
  out.push_back({tokens, a * (m.HeadDim() + m.VHeadDim()) / tp, kv});
  return out;
}

int ChunkDenseLayers(const ModelSpec& m, const ParallelConfig& c, int pp_rank, int chunk) {
  if (!m.HasDenseLayers()) return 0;  // one kind of layer (the search asks for every layout)
  const LayerRange lr = ChunkLayers(m, c, pp_rank, chunk);
  return MixtureDenseLayersIn(m, lr.begin, lr.end);
}

int RankDenseLayers(const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  if (!m.HasDenseLayers()) return 0;
  int layers = 0;
  for (int k = 0; k < c.vp; ++k) layers += ChunkDenseLayers(m, c, pp_rank, k);
  return layers;
}

RankLayerKinds RankLayersByKind(const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  RankLayerKinds kinds;
  kinds.dense = RankDenseLayers(m, c, pp_rank);
  kinds.own = RankLayerCount(m, c, pp_rank) - kinds.dense;
  if (m.mtp_layers > 0 && pp_rank == HeadRank(c)) {
    const bool last_dense = m.HasDenseLayers() && !m.IsMoeLayer(m.layers - 1);
    (last_dense ? kinds.dense : kinds.own) += m.mtp_layers;
  }
  return kinds;
}

// The same sum as over StageParameters' tensors, without building a named tensor per layer (the
// planner counts a stage for every pipeline shape it scores): every layer of a kind holds the
// same shapes.
int64_t StageParameterElements(const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  auto elements = [](const std::vector<ParamTensor>& ps) {
    int64_t n = 0;
    for (const auto& p : ps) n += p.LocalElements();
    return n;
  };
  const int64_t per_layer = LayerParameterCounts(m, c).elements;
  const int64_t per_dense_layer =
      m.HasDenseLayers() ? LayerParameterCounts(DenseLayerModel(m), c).elements : 0;
  int64_t n = 0;
  for (int k = 0; k < c.vp; ++k) {
    std::vector<ParamTensor> ends;
    if (HoldsEmbedding(c, pp_rank, k)) AppendEmbedding(m, c.tp, &ends);
    if (HoldsHead(c, pp_rank, k)) AppendHead(m, c, pp_rank, &ends);
    const int64_t dense = ChunkDenseLayers(m, c, pp_rank, k);
    n += elements(ends) + (int64_t(ChunkLayers(m, c, pp_rank, k).size()) - dense) * per_layer +
         dense * per_dense_layer;
  }
  return n;
}

}  // namespace ptdp
