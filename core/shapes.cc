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

namespace {

// The Q, K and V multi-latent attention reads: its up projections' outputs (AppendMlaActivations).
std::vector<ActTensor> MlaUpProjActivations(const ModelSpec& m, const ParallelConfig& c) {
  const int64_t t = c.tp, tokens = ContextShardLen(m, c) * c.mbs;
  return {{"attn.q", tokens * m.QkWidth() / t, ActKind::kActivation},
          {"attn.k", tokens * m.QkWidth() / t, ActKind::kActivation},
          {"attn.v", tokens * m.AttnWidth() / t, ActKind::kActivation}};
}

// A dense MLP's inside after its input's norm (recompute_modules mlp drops it; the norm is inside
// the module on Transformer Engine's fused LayerNormLinear, so its statistics go too).
std::vector<ActTensor> DenseMlpInside(const ModelSpec& m, const ParallelConfig& c, int64_t seq,
                                      int64_t rows) {
  const int64_t s = ContextShardLen(m, c) * c.mbs, t = c.tp;
  std::vector<ActTensor> acts;
  if (!m.rmsnorm) acts.push_back({"ln2.mean", rows, ActKind::kFp32});
  acts.push_back({"ln2.rstd", rows, ActKind::kFp32});
  acts.push_back({"mlp.fc1.input", seq, ActKind::kLinearInput});
  // The activation's input: GeLU's f, or SwiGLU's gate and up, 2f.
  acts.push_back(
      {m.swiglu ? "mlp.swiglu.input" : "mlp.gelu.input", s * m.Fc1Out() / t, ActKind::kActivation});
  acts.push_back({"mlp.fc2.input", s * m.FfnHidden() / t, ActKind::kLinearInput});
  return acts;
}

// What multi-latent attention keeps in place of the fused QKV's input and Q, K, V: the down
// projections' input (the first norm's output; in fp8 training each projection's own FP8 copy),
// each latent's norm input, 1/rms and up-projection input (the rank's `seq_rows` tokens: its s/t
// slice under sequence parallelism, which the up projection all-gathers again backward), and the
// Q, K (a dqk / t each, K's rotated part copied to every head) and V (a dv / t) attention reads.
void AppendMlaActivations(const ModelSpec& m, const ParallelConfig& c, int64_t seq,
                          int64_t seq_rows, std::vector<ActTensor>* acts) {
  acts->push_back({"attn.q_down.input", seq, ActKind::kLinearInput});
  if (c.precision == Precision::kFp8) {
    acts->push_back({"attn.kv_down.input", seq, ActKind::kLinearInput});
  }
  auto latent = [&](const std::string& name, int64_t width) {
    if (m.qk_norm) {
      acts->push_back({"attn." + name + "_norm.input", seq_rows * width, ActKind::kActivation});
      acts->push_back({"attn." + name + "_norm.rstd", seq_rows, ActKind::kFp32});
    }
    acts->push_back({"attn." + name + "_up.input", seq_rows * width, ActKind::kLinearInput});
  };
  if (m.mla_q_lora > 0) latent("q", m.mla_q_lora);
  latent("kv", m.mla_kv_lora);
  // The up projections' outputs with their rotary embedding: what attention reads, dropped and
  // redone in the backward with recompute_modules mla_up_proj (MlaUpProjActivations).
  if (c.Recomputes(kRecomputeMlaUpProj)) return;
  for (auto& a : MlaUpProjActivations(m, c)) acts->push_back(a);
}

}  // namespace

std::vector<ActTensor> LayerActivations(const ModelSpec& m, const ParallelConfig& c, bool dropout) {
  const int64_t t = c.tp, b = c.mbs, s = ContextShardLen(m, c), h = m.hidden;
  const int64_t sbh = s * b * h;
  // What LayerNorm, dropout and the residual keep: the full s b h, or its s/t slice under sequence
  // parallelism (the QKV and fc1 inputs are then kept sharded and all-gathered again backward).
  const int64_t seq = c.sequence_parallel ? sbh / t : sbh;
  // LayerNorm's mean and 1/std per token (fp32, as apex's and our kernels keep them); RMSNorm
  // keeps only the 1/rms.
  const int64_t rows = c.sequence_parallel ? s * b / t : s * b;
  auto norm = [&](const std::string& name, std::vector<ActTensor>* acts) {
    acts->push_back({name + ".input", seq, ActKind::kActivation});
    if (!m.rmsnorm) acts->push_back({name + ".mean", rows, ActKind::kFp32});
    acts->push_back({name + ".rstd", rows, ActKind::kFp32});
  };
  // Keys and values: kv_heads dh features each (h without grouped-query attention); with rotary
  // embeddings the rotated Q and K are what attention reads (the rotation's backward needs only
  // the angles).
  const int64_t sbkv = s * b * m.KvHeads() * m.HeadDim();
  std::vector<ActTensor> acts;
  norm("ln1", &acts);
  const int64_t sba = s * b * m.AttnWidth();  // the attention's output: a dv wide
  if (m.IsMla()) {
    AppendMlaActivations(m, c, seq, rows, &acts);
  } else {
    acts.push_back({"attn.qkv.input", seq, ActKind::kLinearInput});
    if (m.qk_norm) {  // the norms' inputs and each head row's 1/rms
      acts.push_back({"attn.q_norm.input", sba / t, ActKind::kActivation});
      acts.push_back({"attn.k_norm.input", sbkv / t, ActKind::kActivation});
      acts.push_back({"attn.qk_norm.rstd", s * b * (m.heads + m.KvHeads()) / t, ActKind::kFp32});
    }
    acts.push_back({"attn.q", sba / t, ActKind::kActivation});
    acts.push_back({"attn.k", sbkv / t, ActKind::kActivation});
    acts.push_back({"attn.v", sbkv / t, ActKind::kActivation});
  }
  if (!c.Recomputes(kRecomputeCoreAttn)) {
    for (auto& a : AttentionCoreActivations(m, c, dropout)) acts.push_back(a);
  }
  acts.push_back({"attn.proj.input", sba / t, ActKind::kLinearInput});
  if (dropout) acts.push_back({"attn.residual_dropout.mask", seq, ActKind::kMask});
  if (m.IsMoe()) {
    norm("ln2", &acts);
    for (auto& a : ExpertActivations(m, c)) acts.push_back(a);
  } else {
    // The MLP's input (its checkpoint with recompute_modules mlp), then its inside.
    acts.push_back({"ln2.input", seq, ActKind::kActivation});
    if (!c.Recomputes(kRecomputeMlp)) {
      for (auto& a : DenseMlpInside(m, c, seq, rows)) acts.push_back(a);
    }
  }
  if (dropout) acts.push_back({"mlp.residual_dropout.mask", seq, ActKind::kMask});
  return acts;
}

std::vector<ActTensor> AttentionCoreActivations(const ModelSpec& m, const ParallelConfig& c,
                                                bool dropout) {
  if (c.fused_attention) {
    // One fp32 log-sum-exp per score row; the dropout mask is regenerated, not stored.
    const int64_t rows = int64_t(m.heads) * ContextShardLen(m, c) * c.mbs / c.tp;
    return {{"attn.softmax.lse", rows, ActKind::kFp32}};
  }
  const int64_t scores = int64_t(m.heads) * m.seq_len * m.seq_len * c.mbs / c.tp;
  std::vector<ActTensor> acts = {{"attn.softmax.output", scores, ActKind::kActivation}};
  if (dropout) {
    acts.push_back({"attn.dropout.mask", scores, ActKind::kMask});
    acts.push_back({"attn.dropout.output", scores, ActKind::kActivation});
  }
  return acts;
}

std::vector<ActTensor> LayerCheckpoint(const ModelSpec& m, const ParallelConfig& c) {
  const int64_t sbh = ContextShardLen(m, c) * c.mbs * m.hidden;
  return {{"layer.input", c.sequence_parallel ? sbh / c.tp : sbh, ActKind::kActivation}};
}

std::vector<ActTensor> LayerStash(const ModelSpec& m, const ParallelConfig& c, bool dropout) {
  return c.recompute == Recompute::kFull ? LayerCheckpoint(m, c) : LayerActivations(m, c, dropout);
}

namespace {

// What selective recomputation rebuilds at once in one layer's backward: the attention side's
// modules together (the up projections' outputs are rebuilt when the core's backward needs them,
// beside the core's own), or the MLP side's, whichever is larger.
std::vector<ActTensor> SelectiveWorkingSet(const ModelSpec& m, const ParallelConfig& c,
                                           bool dropout) {
  std::vector<ActTensor> attention, mlp;
  if (c.Recomputes(kRecomputeCoreAttn)) attention = AttentionCoreActivations(m, c, dropout);
  if (c.Recomputes(kRecomputeMlaUpProj) && m.IsMla()) {
    for (auto& a : MlaUpProjActivations(m, c)) attention.push_back(a);
  }
  const int64_t sbh = ContextShardLen(m, c) * c.mbs * m.hidden;
  const int64_t seq = c.sequence_parallel ? sbh / c.tp : sbh;
  const int64_t rows = ContextShardLen(m, c) * c.mbs / (c.sequence_parallel ? c.tp : 1);
  if (c.Recomputes(kRecomputeMlp) && !m.IsMoe()) mlp = DenseMlpInside(m, c, seq, rows);
  if (m.IsMoe()) mlp = ExpertRecomputed(m, c);
  const int e = ComputeBytes(c.precision), lin = LinearInputBytes(c.precision);
  return ActivationBytes(mlp, e, lin) > ActivationBytes(attention, e, lin) ? mlp : attention;
}

}  // namespace

std::vector<ActTensor> RecomputeWorkingSet(const ModelSpec& m, const ParallelConfig& c,
                                           bool dropout) {
  switch (c.recompute) {
    case Recompute::kNone:
      return {};
    case Recompute::kFull: {
      ParallelConfig kept = c;
      kept.recompute = Recompute::kNone;
      std::vector<ActTensor> acts = LayerActivations(m, kept, dropout);
      // The input is the checkpoint itself: the rebuilt forward reads it, it is not stored twice.
      acts.erase(acts.begin());
      return acts;
    }
    case Recompute::kSelective:
      return SelectiveWorkingSet(m, c, dropout);
  }
  return {};
}

std::vector<ActTensor> HeadActivations(const ModelSpec& m, const ParallelConfig& c) {
  const int64_t sbh = ContextShardLen(m, c) * c.mbs * m.hidden;
  const int64_t seq = c.sequence_parallel ? sbh / c.tp : sbh;
  const int64_t rows = ContextShardLen(m, c) * c.mbs;
  const int64_t ln_rows = c.sequence_parallel ? rows / c.tp : rows;
  std::vector<ActTensor> acts = {
      {"final_ln.input", seq, ActKind::kActivation},
      {"final_ln.mean", ln_rows, ActKind::kFp32},
      {"final_ln.rstd", ln_rows, ActKind::kFp32},
      {"output.input", seq, ActKind::kActivation},
      {"output.logits", rows * PaddedVocab(m, c.tp) / c.tp, ActKind::kFp32},
      {"output.row_max", rows, ActKind::kFp32},
      {"output.row_sum", rows, ActKind::kFp32},
      {"output.targets", rows, ActKind::kInt32}};
  if (m.rmsnorm) acts.erase(acts.begin() + 1);  // RMSNorm keeps no mean
  return acts;
}

std::vector<ActTensor> MtpActivations(const ModelSpec& m, const ParallelConfig& c, bool dropout) {
  const int64_t sbh = ContextShardLen(m, c) * c.mbs * m.hidden;
  const int64_t seq = c.sequence_parallel ? sbh / c.tp : sbh;
  const int64_t rows = ContextShardLen(m, c) * c.mbs;
  const int64_t seq_rows = c.sequence_parallel ? rows / c.tp : rows;
  // hnorm's input is the output layer's input of the head before (the model's, or the previous
  // depth's): the same tensor, stashed once (HeadActivations' output.input).
  std::vector<ActTensor> acts = {{"mtp.enorm.input", seq, ActKind::kActivation}};
  for (const char* norm : {"mtp.enorm", "mtp.hnorm"}) {
    if (!m.rmsnorm) acts.push_back({std::string(norm) + ".mean", seq_rows, ActKind::kFp32});
    acts.push_back({std::string(norm) + ".rstd", seq_rows, ActKind::kFp32});
  }
  acts.push_back({"mtp.eh_proj.input", 2 * seq, ActKind::kLinearInput});
  for (auto& a : LayerStash(LayerModel(m, m.layers - 1), c, dropout)) acts.push_back(a);
  for (auto& a : HeadActivations(m, c)) acts.push_back(a);
  for (auto& a : EmbeddingActivations(m, c, dropout)) acts.push_back(a);
  return acts;
}

std::vector<ActTensor> LayerOutputGrads(const ModelSpec& m, const ParallelConfig& c) {
  const int64_t t = c.tp, sb = ContextShardLen(m, c) * c.mbs, h = m.hidden;
  return {{"attn.qkv.output_grad", sb * m.QkvOut() / t, ActKind::kActivation},
          {"attn.proj.output_grad", sb * h, ActKind::kActivation},
          {"mlp.fc1.output_grad", sb * m.Fc1Out() / t, ActKind::kActivation},
          {"mlp.fc2.output_grad", sb * h, ActKind::kActivation}};
}

std::vector<ActTensor> LayerWeightGradStash(const ModelSpec& m, const ParallelConfig& c) {
  const int64_t t = c.tp, sb = ContextShardLen(m, c) * c.mbs, h = m.hidden, f = m.FfnHidden();
  std::vector<ActTensor> acts = {{"attn.qkv.input", sb * h, ActKind::kLinearInput},
                                 {"attn.proj.input", sb * m.AttnWidth() / t, ActKind::kLinearInput},
                                 {"mlp.fc1.input", sb * h, ActKind::kLinearInput},
                                 {"mlp.fc2.input", sb * f / t, ActKind::kLinearInput}};
  for (auto& g : LayerOutputGrads(m, c)) acts.push_back(g);
  return acts;
}

std::vector<ActTensor> HeadWeightGradStash(const ModelSpec& m, const ParallelConfig& c) {
  const int64_t rows = ContextShardLen(m, c) * c.mbs;
  return {{"output.input", rows * m.hidden, ActKind::kActivation},
          {"output.logits_grad", rows * PaddedVocab(m, c.tp) / c.tp, ActKind::kActivation}};
}

std::vector<ActTensor> EmbeddingActivations(const ModelSpec& m, const ParallelConfig& c,
                                            bool dropout) {
  const int64_t rows = ContextShardLen(m, c) * c.mbs;
  std::vector<ActTensor> acts = {{"embedding.tokens", rows, ActKind::kInt32}};
  const int64_t seq_rows = c.sequence_parallel ? rows / c.tp : rows;  // the dropout's rows
  if (dropout) acts.push_back({"embedding.dropout.mask", seq_rows * m.hidden, ActKind::kMask});
  return acts;
}

Bytes ActivationBytes(const std::vector<ActTensor>& acts, int act_bytes) {
  return ActivationBytes(acts, act_bytes, act_bytes);
}

Bytes ActivationBytes(const std::vector<ActTensor>& acts, int act_bytes, int linear_input_bytes) {
  Bytes total = 0;
  for (const auto& a : acts) {
    int per = 4;  // kFp32, kInt32
    if (a.kind == ActKind::kMask) per = 1;
    if (a.kind == ActKind::kActivation) per = act_bytes;
    if (a.kind == ActKind::kLinearInput) per = linear_input_bytes;
    total += a.elements * per;
  }
  return total;
}

int64_t BoundaryElements(const ModelSpec& m, const ParallelConfig& c) {
  const int64_t bsh = int64_t(c.mbs) * ContextShardLen(m, c) * m.hidden;
  return c.scatter_gather || c.sequence_parallel ? bsh / c.tp : bsh;
}

}  // namespace ptdp
