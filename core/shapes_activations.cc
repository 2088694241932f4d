// The activation lists of core/shapes.h (LayerActivations, LayerStash, HeadActivations, the
// weight-gradient stashes, ActivationBytes, BoundaryElements), apart from the placement and
// parameter lists of shapes.cc.
#include "core/shapes.h"

#include "core/experts.h"

namespace ptdp {

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
