#include "runtime/model/gpt_layers.h"

#include "core/model.h"
#include "kernels/reference/ops.h"
#include "runtime/model/context_attention.h"
#include "runtime/model/layer_common.h"
#include "runtime/model/mla.h"
#include "runtime/model/moe_layer.h"

namespace ptdp::runtime {

LayerDims LayerDimsOf(const ModelSpec& m, int t, int tp_rank) {
  LayerDims d;
  d.h = m.hidden;
  d.heads = m.heads;
  d.heads_local = m.heads / t;
  d.kv_heads_local = m.KvHeads() / t;
  d.head_dim = m.QkHeadDim();
  if (m.IsMla()) {  // every head its own key and value
    d.kv_heads_local = d.heads_local;
    d.mla_q_lora = m.mla_q_lora;
    d.mla_kv_lora = m.mla_kv_lora;
    d.mla_rope = m.mla_rope_dim;
    d.mla_v = m.mla_v_dim;
    d.mla_block = m.MlaBlock();
  }
  d.head0 = int64_t(tp_rank) * d.heads_local;
  d.f_local = m.FfnHidden() / t;
  d.expert_f_local = m.IsMoe() ? m.MoeFfnHidden() / t : 0;
  d.shared_f_local = m.IsMoe() ? m.moe_shared_ffn_hidden / t : 0;
  d.v_local = PaddedVocab(m, t) / t;
  d.vocab_begin = int64_t(tp_rank) * d.v_local;
  d.vocab_real = m.vocab;
  return d;
}

uint64_t DropoutCtx::Key(const std::string& site) const {
  // The site's hash, mixed with the step so each iteration draws fresh masks.
  return kernels::HashKey(site.c_str()) ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(step + 1));
}

using namespace layer_common;  // NOLINT(build/namespaces): the layers' shared helpers

namespace {

// The attention core's stash as core/shapes.h AttentionCoreActivations lists it: the s^2
// softmax output (and with dropout its mask and output), or with fused attention only the
// log-sum-exp per score row, in the wide dtype (fp32 in training).
Status AllocAttentionCore(const LayerCtx& c, MemTag tag, LayerStash* st) {
  const LayerDims& d = c.d;
  const int64_t rows = d.b * d.heads_local * d.S(), scores = rows * d.s;
  if (c.fused_attention) {
    PTDP_ASSIGN_OR_RETURN(st->att_lse, Alloc(c, rows, c.types.wide, tag));
    return Status::Ok();
  }
  const bool drop = c.drop.p > 0;
  PTDP_ASSIGN_OR_RETURN(st->probs, Alloc(c, scores, c.types.act, tag));
  PTDP_ASSIGN_OR_RETURN(st->att_mask, Alloc(c, drop ? scores : 0, DType::kU8, tag));
  PTDP_ASSIGN_OR_RETURN(st->att_dropped, Alloc(c, drop ? scores : 0, c.types.act, tag));
  return Status::Ok();
}

// The Ops view of that stash. Both forms carry the dropout key and the forward's output: a fused
// kernel regenerates the mask from the key and reads the output in its backward, and the CUDA
// backend runs its fused kernel also for an unfused layout (the log-sum-exp then sits in probs).
AttentionStash AttentionStashOf(const LayerCtx& c, int layer, LayerStash* st) {
  AttentionStash as;
  as.probs = st->probs.ref();
  as.mask = st->att_mask.ref();
  as.dropped = st->att_dropped.ref();
  as.lse = st->att_lse.ref();
  as.dropout_key = c.drop.Key(Site(layer, "attn"));
  as.out = st->attn_out.cref();
  return as;
}

// The attention shape of global layer `layer`: its window, when the model windows it
// (core/model.h WindowedLayer, the one rule the planner prices).
AttentionShape LayerShape(const LayerCtx& c, int layer) {
  AttentionShape a = Shape(c.d, c.drop);
  if (WindowedLayer(c.arch.window_size, c.arch.window_full_every, layer)) {
    a.window = c.arch.window_size;
  }
  return a;
}

// The attention core's forward of `qkv` (the stash's, or multi-latent attention's packed input)
// into `out` (the stash's output, or a scratch), through the context-parallel group when there is
// one (fused form: lse).
Status AttentionCoreForward(const LayerCtx& c, int layer, LayerStash* st, ConstRef qkv,
                            TensorRef out) {
  const DropoutSpec adrop{c.drop.p, c.drop.Key(Site(layer, "attn")), 0};
  if (c.d.cp > 1) {
    return ContextGroupAttentionForward(c, Shape(c.d, c.drop), adrop, qkv, out, st->att_lse.ref());
  }
  AttentionStash as = AttentionStashOf(c, layer, st);
  return c.dev->ops()->AttentionForward(out, &as, qkv, LayerShape(c, layer), adrop);
}

void DropAttentionCore(LayerStash* st) {
  for (Tensor* t : {&st->probs, &st->att_mask, &st->att_dropped, &st->att_lse}) t->Reset();
}

// Selective recomputation's rebuild of the attention core (LayerCtx::redo_attention_core): its
// forward again, tagged activations as full recomputation's rebuilt stash is (the ledger's
// working set, core/ledger.h), from the stashed QKV (`qkv`) with the forward's dropout key; the
// output goes to `out` (multi-latent attention's padded output, which the backward reads) or a
// scratch tensor (the stash keeps the forward's, the same values).
Status RedoAttentionCore(const LayerCtx& c, int layer, LayerStash* st, ConstRef qkv,
                         TensorRef out) {
  PTDP_RETURN_IF_ERROR(AllocAttentionCore(c, MemTag::kActivations, st));
  if (!out.empty()) return AttentionCoreForward(c, layer, st, qkv, out);
  PTDP_ASSIGN_OR_RETURN(Tensor scratch, Tmp(c, c.d.N() * c.d.heads_local * c.d.D(), c.types.act));
  return AttentionCoreForward(c, layer, st, qkv, scratch.ref());
}

// The query, key and value heads (qkv, normed and rotated) from ln1's output in the stash.
Status QkvForward(const LayerCtx& c, const LayerWeights& w, MemTag tag, LayerStash* st) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const int64_t N = d.N(), h = d.h, qkv = d.QkvWidth();
  PTDP_ASSIGN_OR_RETURN(st->qkv, Alloc(c, N * qkv, c.types.act, tag));
  {
    PTDP_ASSIGN_OR_RETURN(const FullRows ln1, GatherRows(c, st->ln1_out.cref()));
    PTDP_RETURN_IF_ERROR(
        ops->LinearForward(st->qkv.ref(), {}, ln1.ref, w.qkv_w, w.qkv_b, N, h, qkv));
  }
  // The stash keeps q and k normed and rotated (what attention reads), and with the QK norm the
  // rows before it; the backward turns their gradients back.
  if (c.arch.qk_norm) {
    const int64_t rows = N * (d.heads_local + d.KvLocal());
    PTDP_ASSIGN_OR_RETURN(st->qk_in, Alloc(c, rows * d.D(), c.types.act, tag));
    PTDP_ASSIGN_OR_RETURN(st->qk_rstd, Alloc(c, rows, c.types.wide, tag));
    PTDP_RETURN_IF_ERROR(ops->QkNormForward(st->qkv.ref(), st->qk_in.ref(), st->qk_rstd.ref(),
                                            w.q_norm_w, w.k_norm_w, Shape(d, c.drop),
                                            c.arch.norm_eps));
  }
  if (!c.arch.rotary) return Status::Ok();
  return ops->RotaryEmbedding(st->qkv.ref(), Shape(d, c.drop), c.arch.rope, false);
}

// Attention half of the forward: ln1 -> qkv -> attention -> proj (g all-reduce) -> x2.
Status AttentionBlockForward(const LayerCtx& c, const LayerWeights& w, int layer, MemTag tag,
                             LayerStash* st) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const int64_t N = d.N(), R = d.R(), h = d.h, hd = d.AttnWidth();
  const DType a = c.types.act;
  PTDP_RETURN_IF_ERROR(NormForward(c, tag, st->x.cref(), w.ln1_w, w.ln1_b,
                                   {&st->ln1_mean, &st->ln1_rstd, &st->ln1_out}));
  Tensor mla_in;  // multi-latent attention's packed input, a transient (mla.h)
  if (d.Mla()) {
    PTDP_RETURN_IF_ERROR(MlaQkvForward(c, w, tag, st));
    PTDP_ASSIGN_OR_RETURN(mla_in, MlaAttentionInput(c, *st));
  } else {
    PTDP_RETURN_IF_ERROR(QkvForward(c, w, tag, st));
  }
  const bool drop = c.drop.p > 0;
  // Under selective recomputation the core is dropped right after (DropAttentionCore); tagged as
  // the stash is, so that a core kept by mistake shows in the measured activations.
  PTDP_RETURN_IF_ERROR(AllocAttentionCore(c, tag, st));
  PTDP_ASSIGN_OR_RETURN(st->attn_out, Alloc(c, N * hd, a, tag));
  if (d.Mla()) {  // the output padded as its input, then its value columns
    PTDP_ASSIGN_OR_RETURN(Tensor padded, Tmp(c, N * d.heads_local * d.D(), a));
    PTDP_RETURN_IF_ERROR(AttentionCoreForward(c, layer, st, mla_in.cref(), padded.ref()));
    mla_in.Reset();
    PTDP_RETURN_IF_ERROR(MlaOutputUnpad(c, padded.cref(), st->attn_out.ref()));
  } else {
    PTDP_RETURN_IF_ERROR(AttentionCoreForward(c, layer, st, st->qkv.cref(), st->attn_out.ref()));
  }
  if (c.redo_attention_core) DropAttentionCore(st);
  if (c.redo_mla_up_proj) {
    for (Tensor* t : {&st->mla_q, &st->mla_k, &st->mla_v}) t->Reset();
  }
  // Row-parallel projection: partial sums, the g all-reduce, then bias, dropout and residual.
  PTDP_ASSIGN_OR_RETURN(Tensor proj, Tmp(c, N * h, a));
  PTDP_RETURN_IF_ERROR(
      ops->LinearForward(proj.ref(), {}, st->attn_out.cref(), w.proj_w, {}, N, hd, h));
  PTDP_ASSIGN_OR_RETURN(proj, SumRows(c, std::move(proj)));
  PTDP_ASSIGN_OR_RETURN(st->attn_res_mask, Alloc(c, drop ? R * h : 0, DType::kU8, tag));
  PTDP_ASSIGN_OR_RETURN(st->x2, Alloc(c, R * h, a, tag));
  return ops->BiasDropoutResidual(st->x2.ref(), st->attn_res_mask.ref(), proj.cref(), w.proj_b,
                                  st->x.cref(), R, h,
                                  HiddenDropout(c, Site(layer, "attn_residual")));
}

// The MLP's inside: ln2 -> fc1 + GeLU (or SwiGLU, or squared ReLU), into the stash (tagged `tag`)
// from st->x2. The forward runs it, and the backward again under recompute_modules mlp
// (LayerCtx::redo_mlp).
Status MlpInsideForward(const LayerCtx& c, const LayerWeights& w, MemTag tag, LayerStash* st) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const int64_t N = d.N(), h = d.h, f = d.f_local, fc1 = c.arch.swiglu ? 2 * f : f;
  const DType a = c.types.act;
  PTDP_RETURN_IF_ERROR(NormForward(c, tag, st->x2.cref(), w.ln2_w, w.ln2_b,
                                   {&st->ln2_mean, &st->ln2_rstd, &st->ln2_out}));
  PTDP_ASSIGN_OR_RETURN(st->fc1_out, Alloc(c, N * fc1, a, tag));
  PTDP_ASSIGN_OR_RETURN(st->gelu_out, Alloc(c, N * f, a, tag));
  PTDP_ASSIGN_OR_RETURN(const FullRows ln2, GatherRows(c, st->ln2_out.cref()));
  if (!c.arch.swiglu && !c.arch.squared_relu) {  // the bias-GeLU epilogue
    return ops->LinearForward(st->fc1_out.ref(), st->gelu_out.ref(), ln2.ref, w.fc1_w, w.fc1_b, N,
                              h, f);
  }
  PTDP_RETURN_IF_ERROR(
      ops->LinearForward(st->fc1_out.ref(), {}, ln2.ref, w.fc1_w, w.fc1_b, N, h, fc1));
  if (c.arch.squared_relu) {
    return ops->SquaredReluForward(st->gelu_out.ref(), st->fc1_out.cref(), N * f);
  }
  return ops->SwigluForward(st->gelu_out.ref(), st->fc1_out.cref(), N * f);
}

// recompute_modules mlp redoes a dense layer's MLP (a mixture's leading dense layers among them);
// a mixture layer's block has its own modules (moe_act, layernorm, moe, shared_experts).
bool RedoesDenseMlp(const LayerCtx& c, const LayerWeights& w) {
  return c.redo_mlp && w.router_w.empty();
}

void DropMlpInside(LayerStash* st) {
  for (Tensor* t : {&st->ln2_mean, &st->ln2_rstd, &st->ln2_out, &st->fc1_out, &st->gelu_out}) {
    t->Reset();
  }
}

// MLP half: the inside, fc2 (g all-reduce) -> y (allocated by `out` here when empty).
Status MlpBlockForward(const LayerCtx& c, const LayerWeights& w, int layer, MemTag tag,
                       LayerStash* st, const LayerOutput& out, TensorRef y) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const int64_t N = d.N(), R = d.R(), h = d.h, f = d.f_local;
  PTDP_RETURN_IF_ERROR(MlpInsideForward(c, w, tag, st));
  PTDP_ASSIGN_OR_RETURN(Tensor mlp, Tmp(c, N * h, c.types.act));
  PTDP_RETURN_IF_ERROR(
      ops->LinearForward(mlp.ref(), {}, st->gelu_out.cref(), w.fc2_w, {}, N, f, h));
  if (c.redo_mlp) DropMlpInside(st);
  PTDP_ASSIGN_OR_RETURN(mlp, SumRows(c, std::move(mlp)));
  if (y.empty()) {
    PTDP_ASSIGN_OR_RETURN(y, out());
  }
  PTDP_ASSIGN_OR_RETURN(st->mlp_res_mask, Alloc(c, c.drop.p > 0 ? R * h : 0, DType::kU8, tag));
  return ops->BiasDropoutResidual(y, st->mlp_res_mask.ref(), mlp.cref(), w.fc2_b, st->x2.cref(), R,
                                  h, HiddenDropout(c, Site(layer, "mlp_residual")));
}

// MLP half of the backward: dy -> dx2 (the gradient at ln2's input plus the residual's).
Status MlpBlockBackward(const LayerCtx& c, const LayerWeights& w, const LayerGrads& g,
                        LayerStash* st, ConstRef dy, Tensor* dx2) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const int64_t N = d.N(), R = d.R(), h = d.h, f = d.f_local, fc1 = c.arch.swiglu ? 2 * f : f;
  const DType a = c.types.act;
  // Under sequence parallelism the rows' gradient is a transient and the gathered one is the
  // GEMMs' output gradient (kept for a deferred weight half).
  PTDP_ASSIGN_OR_RETURN(Tensor dbranch, d.sp > 1 ? Tmp(c, R * h, a) : OutputGrad(c, R * h));
  PTDP_RETURN_IF_ERROR(
      ops->DropoutBackward(dbranch.ref(), g.fc2_b, dy, st->mlp_res_mask.cref(), R, h, c.drop.p));
  if (d.sp > 1) {  // fc2's GEMMs read every row
    PTDP_ASSIGN_OR_RETURN(FullRows full, GatherRows(c, dbranch.cref(), KeptTag(c)));
    dbranch = std::move(full.owned);
  }
  Tensor dfc1;
  if (!c.arch.swiglu && !c.arch.squared_relu && ops->FusesLinearGeluBackward(a)) {
    // fc2's data gradient and GeLU' in one GEMM: no dgelu buffer (N f); dbranch (N h, h <= f)
    // lives until dfc1 is written, so this never holds more than the two-op order below. The
    // weight gradient comes after (WeightGrad may move dbranch into the deferred W pass).
    PTDP_ASSIGN_OR_RETURN(dfc1, OutputGrad(c, N * f));
    PTDP_RETURN_IF_ERROR(ops->LinearBackwardDataGelu(dfc1.ref(), dbranch.cref(), w.fc2_w,
                                                     st->fc1_out.cref(), N, f, h));
    PTDP_RETURN_IF_ERROR(WeightGrad(c, g.fc2_w, {}, &dbranch, st->gelu_out.cref(), N, f, h));
    dbranch.Reset();
  } else {
    PTDP_ASSIGN_OR_RETURN(Tensor dgelu, Tmp(c, N * f, a));
    PTDP_RETURN_IF_ERROR(ops->LinearBackwardData(dgelu.ref(), dbranch.cref(), w.fc2_w, N, f, h));
    PTDP_RETURN_IF_ERROR(WeightGrad(c, g.fc2_w, {}, &dbranch, st->gelu_out.cref(), N, f, h));
    dbranch.Reset();
    PTDP_ASSIGN_OR_RETURN(dfc1, OutputGrad(c, N * fc1));
    if (c.arch.swiglu) {
      PTDP_RETURN_IF_ERROR(
          ops->SwigluBackward(dfc1.ref(), st->fc1_out.cref(), dgelu.cref(), N * f));
    } else if (c.arch.squared_relu) {
      PTDP_RETURN_IF_ERROR(
          ops->SquaredReluBackward(dfc1.ref(), st->fc1_out.cref(), dgelu.cref(), N * f));
    } else {
      PTDP_RETURN_IF_ERROR(ops->GeluBackward(dfc1.ref(), st->fc1_out.cref(), dgelu.cref(), N * f));
    }
  }
  PTDP_ASSIGN_OR_RETURN(Tensor dln, Tmp(c, N * h, a));
  PTDP_RETURN_IF_ERROR(ops->LinearBackwardData(dln.ref(), dfc1.cref(), w.fc1_w, N, h, fc1));
  {
    PTDP_ASSIGN_OR_RETURN(FullRows ln2, GatherRows(c, st->ln2_out.cref(), KeptTag(c)));
    PTDP_RETURN_IF_ERROR(WeightGrad(c, g.fc1_w, g.fc1_b, &dfc1, ln2.ref, N, h, fc1, &ln2.owned));
  }
  dfc1.Reset();
  PTDP_ASSIGN_OR_RETURN(dln, SumRows(c, std::move(dln)));  // f's backward
  PTDP_ASSIGN_OR_RETURN(*dx2, Tmp(c, R * h, a));
  PTDP_RETURN_IF_ERROR(NormBackward(c, dx2->ref(), g.ln2_w, g.ln2_b, dln.cref(), st->x2.cref(),
                                    w.ln2_w, st->ln2_mean.cref(), st->ln2_rstd.cref()));
  return ops->Add(dx2->ref(), dx2->cref(), dy);  // the residual path
}

// Attention half of the backward: dx2 -> dx.
Status AttentionBlockBackward(const LayerCtx& c, const LayerWeights& w, const LayerGrads& g,
                              int layer, LayerStash* st, ConstRef dx2, TensorRef dx) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const int64_t N = d.N(), R = d.R(), h = d.h, hd = d.AttnWidth(), qkv = d.QkvWidth();
  const DType a = c.types.act;
  // Under sequence parallelism the rows' gradient is a transient and the gathered one is the
  // GEMMs' output gradient (kept for a deferred weight half).
  PTDP_ASSIGN_OR_RETURN(Tensor dbranch, d.sp > 1 ? Tmp(c, R * h, a) : OutputGrad(c, R * h));
  PTDP_RETURN_IF_ERROR(
      ops->DropoutBackward(dbranch.ref(), g.proj_b, dx2, st->attn_res_mask.cref(), R, h, c.drop.p));
  if (d.sp > 1) {  // the projection's GEMMs read every row
    PTDP_ASSIGN_OR_RETURN(FullRows full, GatherRows(c, dbranch.cref(), KeptTag(c)));
    dbranch = std::move(full.owned);
  }
  PTDP_ASSIGN_OR_RETURN(Tensor dattn, Tmp(c, N * hd, a));
  PTDP_RETURN_IF_ERROR(ops->LinearBackwardData(dattn.ref(), dbranch.cref(), w.proj_w, N, hd, h));
  PTDP_RETURN_IF_ERROR(WeightGrad(c, g.proj_w, {}, &dbranch, st->attn_out.cref(), N, hd, h));
  dbranch.Reset();
  // Multi-latent attention's core reads its packed input, built again from the stash, and its
  // output and output gradient padded as that input.
  // (Rebuilding the core writes that output again: no second padded copy.)
  ConstRef qkv_in = st->qkv.cref(), out = st->attn_out.cref();
  Tensor mla_in, mla_out;
  if (d.Mla()) {
    if (c.redo_mla_up_proj) {  // tagged activations: the ledger's working set
      PTDP_RETURN_IF_ERROR(MlaUpProjForward(c, w, MemTag::kActivations, st));
    }
    PTDP_ASSIGN_OR_RETURN(mla_in, MlaAttentionInput(c, *st));
    PTDP_ASSIGN_OR_RETURN(dattn, MlaOutputPad(c, dattn.cref()));
    if (c.redo_attention_core) {
      PTDP_ASSIGN_OR_RETURN(mla_out, Tmp(c, N * d.heads_local * d.D(), a));
    } else {
      PTDP_ASSIGN_OR_RETURN(mla_out, MlaOutputPad(c, out));
    }
    qkv_in = mla_in.cref();
    out = mla_out.cref();
  }
  if (c.redo_attention_core) {
    PTDP_RETURN_IF_ERROR(RedoAttentionCore(c, layer, st, qkv_in, mla_out.ref()));
  }
  PTDP_ASSIGN_OR_RETURN(Tensor dqkv, OutputGrad(c, N * qkv));
  if (d.cp > 1) {
    const DropoutSpec adrop{c.drop.p, c.drop.Key(Site(layer, "attn")), 0};
    PTDP_RETURN_IF_ERROR(ContextGroupAttentionBackward(
        c, Shape(d, c.drop), adrop, dattn.cref(), out, qkv_in, st->att_lse.cref(), dqkv.ref()));
  } else {
    AttentionStash as = AttentionStashOf(c, layer, st);
    as.out = out;
    PTDP_RETURN_IF_ERROR(ops->AttentionBackward(dqkv.ref(), dattn.cref(), qkv_in, as,
                                                LayerShape(c, layer), c.drop.p));
  }
  dattn.Reset();
  mla_in.Reset();
  mla_out.Reset();
  if (c.arch.rotary) {  // the rotation is orthogonal: its backward turns back
    PTDP_RETURN_IF_ERROR(ops->RotaryEmbedding(dqkv.ref(), Shape(d, c.drop),
                                              d.Mla() ? MlaRope(c) : c.arch.rope, true));
  }
  if (d.Mla()) {
    Tensor dln;
    PTDP_RETURN_IF_ERROR(MlaQkvBackward(c, w, g, st, std::move(dqkv), &dln));
    PTDP_RETURN_IF_ERROR(NormBackward(c, dx, g.ln1_w, g.ln1_b, dln.cref(), st->x.cref(), w.ln1_w,
                                      st->ln1_mean.cref(), st->ln1_rstd.cref()));
    return ops->Add(dx, dx, dx2);
  }
  if (c.arch.qk_norm) {  // the norms' weights are shared by every head: a partial sum per rank
    PTDP_RETURN_IF_ERROR(ops->QkNormBackward(dqkv.ref(), g.q_norm_w, g.k_norm_w, st->qk_in.cref(),
                                             st->qk_rstd.cref(), w.q_norm_w, w.k_norm_w,
                                             Shape(d, c.drop)));
  }
  PTDP_ASSIGN_OR_RETURN(Tensor dln, Tmp(c, N * h, a));
  PTDP_RETURN_IF_ERROR(ops->LinearBackwardData(dln.ref(), dqkv.cref(), w.qkv_w, N, h, qkv));
  {
    PTDP_ASSIGN_OR_RETURN(FullRows ln1, GatherRows(c, st->ln1_out.cref(), KeptTag(c)));
    PTDP_RETURN_IF_ERROR(WeightGrad(c, g.qkv_w, g.qkv_b, &dqkv, ln1.ref, N, h, qkv, &ln1.owned));
  }
  dqkv.Reset();
  PTDP_ASSIGN_OR_RETURN(dln, SumRows(c, std::move(dln)));  // f's backward
  PTDP_RETURN_IF_ERROR(NormBackward(c, dx, g.ln1_w, g.ln1_b, dln.cref(), st->x.cref(), w.ln1_w,
                                    st->ln1_mean.cref(), st->ln1_rstd.cref()));
  return ops->Add(dx, dx, dx2);
}

}  // namespace

Status AllocLayerInput(const LayerCtx& c, LayerStash* st) {
  PTDP_ASSIGN_OR_RETURN(st->x, Alloc(c, c.d.R() * c.d.h, c.types.act, MemTag::kActivations));
  return Status::Ok();
}

void DropLayerActivations(LayerStash* st) {
  for (Tensor* t : {&st->ln1_mean,     &st->ln1_rstd,     &st->ln1_out,        &st->qk_in,
                    &st->qk_rstd,      &st->qkv,          &st->probs,          &st->att_mask,
                    &st->att_dropped,  &st->att_lse,      &st->attn_out,       &st->attn_res_mask,
                    &st->x2,           &st->ln2_mean,     &st->ln2_rstd,       &st->ln2_out,
                    &st->fc1_out,      &st->gelu_out,     &st->mlp_res_mask,   &st->router_logits,
                    &st->router_probs, &st->moe_in,       &st->shared_fc1_out, &st->shared_act,
                    &st->mla_q_in,     &st->mla_q_rstd,   &st->mla_q_up_in,    &st->mla_kv_in,
                    &st->mla_kv_rstd,  &st->mla_kv_up_in, &st->mla_q,          &st->mla_k,
                    &st->mla_v}) {
    t->Reset();
  }
}

Status LayerForward(const LayerCtx& c, const LayerWeights& w, int layer, MemTag stash_tag,
                    LayerStash* st, const LayerOutput& out) {
  TensorRef y;
  if (!RedoesDenseMlp(c, w)) {
    PTDP_ASSIGN_OR_RETURN(y, out());
  }
  PTDP_RETURN_IF_ERROR(AttentionBlockForward(c, w, layer, stash_tag, st));
  if (!w.router_w.empty()) return MoeBlockForward(c, w, layer, stash_tag, st, out, y);
  return MlpBlockForward(c, w, layer, stash_tag, st, out, y);
}

Status LayerForward(const LayerCtx& c, const LayerWeights& w, int layer, MemTag stash_tag,
                    LayerStash* st, TensorRef y) {
  return LayerForward(c, w, layer, stash_tag, st, [y]() -> Result<TensorRef> { return y; });
}

Status LayerBackward(const LayerCtx& c, const LayerWeights& w, const LayerGrads& g, int layer,
                     LayerStash* st, ConstRef dy, TensorRef dx) {
  // recompute_modules mlp: the inside rebuilt (tagged activations: the ledger's working set) and
  // dropped again before the attention side rebuilds its own.
  const bool redo_mlp = RedoesDenseMlp(c, w);
  if (redo_mlp) PTDP_RETURN_IF_ERROR(MlpInsideForward(c, w, MemTag::kActivations, st));
  // The forward's stash (a mixture's experts on this rank may have been sent no token copies;
  // under recompute_modules moe the block keeps its input only, rebuilt by MoeBlockBackward).
  PTDP_CHECK(!st->gelu_out.empty() || !st->router_logits.empty() || c.redo_moe_block);
  Tensor dx2;
  PTDP_RETURN_IF_ERROR(w.router_w.empty() ? MlpBlockBackward(c, w, g, st, dy, &dx2)
                                          : MoeBlockBackward(c, w, g, st, dy, &dx2));
  if (redo_mlp) DropMlpInside(st);
  PTDP_RETURN_IF_ERROR(AttentionBlockBackward(c, w, g, layer, st, dx2.cref(), dx));
  if (c.defer_weight_grads == nullptr) {
    DropLayerActivations(st);
    return Status::Ok();
  }
  // The split backward's input half: keep the four Linear inputs the weight half reads (under
  // sequence parallelism the deferred jobs hold gathered copies of the QKV and fc1 inputs, and
  // the stash's row blocks go).
  LayerStash kept;
  if (c.d.sp == 1) {
    kept.ln1_out = std::move(st->ln1_out);
    kept.ln2_out = std::move(st->ln2_out);
  }
  kept.attn_out = std::move(st->attn_out);
  kept.gelu_out = std::move(st->gelu_out);
  DropLayerActivations(st);
  st->ln1_out = std::move(kept.ln1_out);
  st->attn_out = std::move(kept.attn_out);
  st->ln2_out = std::move(kept.ln2_out);
  st->gelu_out = std::move(kept.gelu_out);
  return Status::Ok();
}

Status RunDeferredWeightGrads(const LayerCtx& c, WeightGradQueue* queue) {
  for (DeferredWeightGrad& j : *queue) {
    PTDP_RETURN_IF_ERROR(
        c.dev->ops()->LinearBackwardWeight(j.dw, j.dbias, j.dout.cref(), j.x, j.n, j.c, j.oc));
  }
  queue->clear();
  return Status::Ok();
}
}  // namespace ptdp::runtime
