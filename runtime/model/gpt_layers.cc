#include "runtime/model/gpt_layers.h"

#include "kernels/reference/context_chunks.h"
#include "kernels/reference/ops.h"
#include "runtime/model/context_attention.h"

namespace ptdp::runtime {

uint64_t DropoutCtx::Key(const std::string& site) const {
  // The site's hash, mixed with the step so each iteration draws fresh masks.
  return kernels::HashKey(site.c_str()) ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(step + 1));
}

namespace {

// The tensor group's all-reduces; a group of one (or none) is the identity.
Status TpAllReduceSum(Communicator* tp, TensorRef x) {
  if (tp == nullptr || tp->size() == 1) return Status::Ok();
  return tp->AllReduceSum(x.data, x.count, x.dtype);
}
Status TpAllReduceMax(Communicator* tp, TensorRef x) {
  if (tp == nullptr || tp->size() == 1) return Status::Ok();
  return tp->AllReduceMax(x.data, x.count, x.dtype);
}

Result<Tensor> Alloc(const LayerCtx& c, int64_t n, DType t, MemTag tag) {
  return Tensor::Make(c.dev, n, t, tag);
}
Result<Tensor> Tmp(const LayerCtx& c, int64_t n, DType t) {
  return Tensor::Make(c.dev, n, t, MemTag::kWorkspace);
}

// A Linear's output gradient: transient, or (split backward) kept for the weight half.
Result<Tensor> OutputGrad(const LayerCtx& c, int64_t n) {
  return Tensor::Make(c.dev, n, c.types.act,
                      c.defer_weight_grads ? MemTag::kActivations : MemTag::kWorkspace);
}

// dw (+ dbias) += dout^T x now, or deferred to the weight half with its operands (*dout moved;
// *x_owner too when given: a gathered input x points into).
Status WeightGrad(const LayerCtx& c, TensorRef dw, TensorRef dbias, Tensor* dout, ConstRef x,
                  int64_t n, int64_t cols, int64_t oc, Tensor* x_owner = nullptr) {
  if (c.defer_weight_grads == nullptr) {
    return c.dev->ops()->LinearBackwardWeight(dw, dbias, dout->cref(), x, n, cols, oc);
  }
  DeferredWeightGrad job{dw, dbias, std::move(*dout), x, {}, n, cols, oc};
  if (x_owner != nullptr) job.x_owned = std::move(*x_owner);
  c.defer_weight_grads->push_back(std::move(job));
  return Status::Ok();
}

// What a deferred weight GEMM reads is kept until the weight half, tagged activations
// (core/shapes.h LayerWeightGradStash); a transient otherwise.
MemTag KeptTag(const LayerCtx& c) {
  return c.defer_weight_grads ? MemTag::kActivations : MemTag::kWorkspace;
}

// Sequence parallelism's collectives over the tensor group (LayerDims::sp). The rows a GEMM reads
// whole: this rank's [R][h] block gathered into the microbatch's [N][h] (a transient), or the
// tensor itself without sequence parallelism.
struct FullRows {
  Tensor owned;  // the gathered rows, or empty
  ConstRef ref;  // what the GEMM reads
};
Result<FullRows> GatherRows(const LayerCtx& c, ConstRef local, MemTag tag = MemTag::kWorkspace) {
  FullRows f;
  f.ref = local;
  if (c.d.sp == 1) return f;
  PTDP_ASSIGN_OR_RETURN(f.owned, Tensor::Make(c.dev, local.count * c.d.sp, local.dtype, tag));
  PTDP_RETURN_IF_ERROR(c.tp->AllGather(local.data, f.owned.data(), local.count, local.dtype));
  f.ref = f.owned.cref();
  return f;
}

// A row-parallel GEMM's partial sums [N][h] summed over the tensor group (g's forward, f's
// backward): all-reduced in place, or under sequence parallelism reduce-scattered into this
// rank's [R][h] rows (and the [N][h] partial freed).
Result<Tensor> SumRows(const LayerCtx& c, Tensor partial) {
  if (c.d.sp == 1) {
    PTDP_RETURN_IF_ERROR(TpAllReduceSum(c.tp, partial.ref()));
    return partial;
  }
  PTDP_ASSIGN_OR_RETURN(Tensor mine, Tmp(c, partial.count() / c.d.sp, partial.dtype()));
  PTDP_RETURN_IF_ERROR(
      c.tp->ReduceScatterSum(partial.data(), mine.data(), mine.count(), mine.dtype()));
  return mine;
}

// Rows [row0, row0 + rows) of a [*][width] tensor (an empty view stays empty).
TensorRef Rows(TensorRef t, int64_t row0, int64_t rows, int64_t width) {
  if (t.empty()) return t;
  return {static_cast<char*>(t.data) + row0 * width * DTypeBytes(t.dtype), t.dtype, rows * width};
}
ConstRef Rows(ConstRef t, int64_t row0, int64_t rows, int64_t width) {
  if (t.empty()) return t;
  return {static_cast<const char*>(t.data) + row0 * width * DTypeBytes(t.dtype), t.dtype,
          rows * width};
}

// The embedding's runs of consecutive positions: call(row0, b, s, pos0) for the microbatch's rows
// [row0, row0 + b s), b sequences of s positions from pos0. One call, or under context
// parallelism one per chunk of each sequence (kernels/reference/context_chunks.h).
template <typename Call>
Status ForEachPositionRun(const LayerDims& d, Call&& call) {
  if (d.cp == 1) return call(0, d.b, d.s, 0);
  const kernels::ContextChunks chunks{d.s, d.cp, d.cp_rank};
  const int64_t chunk = chunks.Chunk();
  for (int64_t bi = 0; bi < d.b; ++bi) {
    for (int64_t t = 0; t < d.S(); t += chunk) {
      PTDP_RETURN_IF_ERROR(call(bi * d.S() + t, 1, chunk, chunks.Position(t)));
    }
  }
  return Status::Ok();
}

std::string Site(int layer, const char* what) {
  return "layer" + std::to_string(layer) + "." + what;
}

// Hidden-size dropout of a microbatch: element (row, col) of [N][h] at global index
// seq0 * s * h + row * h + col; under sequence parallelism this rank's rows start at sp_rank R;
// under context parallelism row is a local row, placed by DropoutSpec's chunk fields.
DropoutSpec HiddenDropout(const LayerCtx& c, const std::string& site) {
  const LayerDims& d = c.d;
  if (d.cp == 1) {
    const int64_t first_row = c.drop.seq0 * d.s + d.sp_rank * d.R();
    return {c.drop.p, c.drop.Key(site), static_cast<uint64_t>(first_row * d.h)};
  }
  DropoutSpec spec{c.drop.p, c.drop.Key(site), static_cast<uint64_t>(c.drop.seq0 * d.s * d.h)};
  spec.cp = d.cp;
  spec.cp_rank = d.cp_rank;
  spec.seq = d.s;
  spec.width = d.h;
  spec.first_row = d.sp_rank * d.R();
  return spec;
}

AttentionShape Shape(const LayerDims& d, const DropoutCtx& drop) {
  AttentionShape a;
  a.b = d.b;
  a.s = d.s;
  a.heads_local = d.heads_local;
  a.head_dim = d.D();
  a.heads_total = d.heads;
  a.head_begin = d.head0;
  a.batch_begin = drop.seq0;
  a.cp = d.cp;
  a.cp_rank = d.cp_rank;
  return a;
}

VocabShard Shard(const LayerDims& d) {
  return {d.N(), d.v_local, d.vocab_begin, d.vocab_real};
}

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

// The attention core's forward into `out` (the stash's output, or selective recomputation's
// scratch), through the context-parallel group when there is one (fused form: lse).
Status AttentionCoreForward(const LayerCtx& c, int layer, LayerStash* st, TensorRef out) {
  const DropoutSpec adrop{c.drop.p, c.drop.Key(Site(layer, "attn")), 0};
  if (c.d.cp > 1) {
    return ContextGroupAttentionForward(c, Shape(c.d, c.drop), adrop, st->qkv.cref(), out,
                                        st->att_lse.ref());
  }
  AttentionStash as = AttentionStashOf(c, layer, st);
  return c.dev->ops()->AttentionForward(out, &as, st->qkv.cref(), Shape(c.d, c.drop), adrop);
}

void DropAttentionCore(LayerStash* st) {
  for (Tensor* t : {&st->probs, &st->att_mask, &st->att_dropped, &st->att_lse}) t->Reset();
}

// Selective recomputation's rebuild of the attention core (LayerCtx::redo_attention_core): its
// forward again, tagged activations as full recomputation's rebuilt stash is (the ledger's
// working set, core/ledger.h), from the stashed QKV with the forward's dropout key; the output
// goes to a scratch tensor (the stash keeps the forward's, the same values).
Status RedoAttentionCore(const LayerCtx& c, int layer, LayerStash* st) {
  PTDP_RETURN_IF_ERROR(AllocAttentionCore(c, MemTag::kActivations, st));
  PTDP_ASSIGN_OR_RETURN(Tensor out, Tmp(c, c.d.N() * c.d.heads_local * c.d.D(), c.types.act));
  return AttentionCoreForward(c, layer, st, out.ref());
}

// Attention half of the forward: ln1 -> qkv -> attention -> proj (g all-reduce) -> x2.
Status AttentionBlockForward(const LayerCtx& c, const LayerWeights& w, int layer, MemTag tag,
                             LayerStash* st) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const int64_t N = d.N(), R = d.R(), h = d.h, hd = d.heads_local * d.D();
  const DType a = c.types.act, wide = c.types.wide;
  PTDP_ASSIGN_OR_RETURN(st->ln1_mean, Alloc(c, R, wide, tag));
  PTDP_ASSIGN_OR_RETURN(st->ln1_rstd, Alloc(c, R, wide, tag));
  PTDP_ASSIGN_OR_RETURN(st->ln1_out, Alloc(c, R * h, a, tag));
  PTDP_RETURN_IF_ERROR(ops->LayerNormForward(st->ln1_out.ref(), st->ln1_mean.ref(),
                                             st->ln1_rstd.ref(), st->x.cref(), w.ln1_w, w.ln1_b, R,
                                             h));
  PTDP_ASSIGN_OR_RETURN(st->qkv, Alloc(c, N * 3 * hd, a, tag));
  {
    PTDP_ASSIGN_OR_RETURN(const FullRows ln1, GatherRows(c, st->ln1_out.cref()));
    PTDP_RETURN_IF_ERROR(
        ops->LinearForward(st->qkv.ref(), {}, ln1.ref, w.qkv_w, w.qkv_b, N, h, 3 * hd));
  }
  const bool drop = c.drop.p > 0;
  // Under selective recomputation the core is dropped right after (DropAttentionCore); tagged as
  // the stash is, so that a core kept by mistake shows in the measured activations.
  PTDP_RETURN_IF_ERROR(AllocAttentionCore(c, tag, st));
  PTDP_ASSIGN_OR_RETURN(st->attn_out, Alloc(c, N * hd, a, tag));
  PTDP_RETURN_IF_ERROR(AttentionCoreForward(c, layer, st, st->attn_out.ref()));
  if (c.redo_attention_core) DropAttentionCore(st);
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

// The MLP's inside: ln2 -> fc1 + GeLU, into the stash (tagged `tag`) from st->x2. The forward
// runs it, and the backward again under recompute_modules mlp (LayerCtx::redo_mlp).
Status MlpInsideForward(const LayerCtx& c, const LayerWeights& w, MemTag tag, LayerStash* st) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const int64_t N = d.N(), R = d.R(), h = d.h, f = d.f_local;
  const DType a = c.types.act, wide = c.types.wide;
  PTDP_ASSIGN_OR_RETURN(st->ln2_mean, Alloc(c, R, wide, tag));
  PTDP_ASSIGN_OR_RETURN(st->ln2_rstd, Alloc(c, R, wide, tag));
  PTDP_ASSIGN_OR_RETURN(st->ln2_out, Alloc(c, R * h, a, tag));
  PTDP_RETURN_IF_ERROR(ops->LayerNormForward(st->ln2_out.ref(), st->ln2_mean.ref(),
                                             st->ln2_rstd.ref(), st->x2.cref(), w.ln2_w, w.ln2_b, R,
                                             h));
  PTDP_ASSIGN_OR_RETURN(st->fc1_out, Alloc(c, N * f, a, tag));
  PTDP_ASSIGN_OR_RETURN(st->gelu_out, Alloc(c, N * f, a, tag));
  PTDP_ASSIGN_OR_RETURN(const FullRows ln2, GatherRows(c, st->ln2_out.cref()));
  return ops->LinearForward(st->fc1_out.ref(), st->gelu_out.ref(), ln2.ref, w.fc1_w, w.fc1_b, N, h,
                            f);
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
  const int64_t N = d.N(), R = d.R(), h = d.h, f = d.f_local;
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
  if (ops->FusesLinearGeluBackward(a)) {
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
    PTDP_ASSIGN_OR_RETURN(dfc1, OutputGrad(c, N * f));
    PTDP_RETURN_IF_ERROR(ops->GeluBackward(dfc1.ref(), st->fc1_out.cref(), dgelu.cref(), N * f));
  }
  PTDP_ASSIGN_OR_RETURN(Tensor dln, Tmp(c, N * h, a));
  PTDP_RETURN_IF_ERROR(ops->LinearBackwardData(dln.ref(), dfc1.cref(), w.fc1_w, N, h, f));
  {
    PTDP_ASSIGN_OR_RETURN(FullRows ln2, GatherRows(c, st->ln2_out.cref(), KeptTag(c)));
    PTDP_RETURN_IF_ERROR(WeightGrad(c, g.fc1_w, g.fc1_b, &dfc1, ln2.ref, N, h, f, &ln2.owned));
  }
  dfc1.Reset();
  PTDP_ASSIGN_OR_RETURN(dln, SumRows(c, std::move(dln)));  // f's backward
  PTDP_ASSIGN_OR_RETURN(*dx2, Tmp(c, R * h, a));
  PTDP_RETURN_IF_ERROR(ops->LayerNormBackward(dx2->ref(), g.ln2_w, g.ln2_b, dln.cref(),
                                              st->x2.cref(), w.ln2_w, st->ln2_mean.cref(),
                                              st->ln2_rstd.cref(), R, h, false));
  return ops->Add(dx2->ref(), dx2->cref(), dy);  // the residual path
}

// Attention half of the backward: dx2 -> dx.
Status AttentionBlockBackward(const LayerCtx& c, const LayerWeights& w, const LayerGrads& g,
                              int layer, LayerStash* st, ConstRef dx2, TensorRef dx) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const int64_t N = d.N(), R = d.R(), h = d.h, hd = d.heads_local * d.D();
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
  if (c.redo_attention_core) PTDP_RETURN_IF_ERROR(RedoAttentionCore(c, layer, st));
  PTDP_ASSIGN_OR_RETURN(Tensor dqkv, OutputGrad(c, N * 3 * hd));
  if (d.cp > 1) {
    const DropoutSpec adrop{c.drop.p, c.drop.Key(Site(layer, "attn")), 0};
    PTDP_RETURN_IF_ERROR(ContextGroupAttentionBackward(c, Shape(d, c.drop), adrop, dattn.cref(),
                                                       st->attn_out.cref(), st->qkv.cref(),
                                                       st->att_lse.cref(), dqkv.ref()));
  } else {
    const AttentionStash as = AttentionStashOf(c, layer, st);
    PTDP_RETURN_IF_ERROR(ops->AttentionBackward(dqkv.ref(), dattn.cref(), st->qkv.cref(), as,
                                                Shape(d, c.drop), c.drop.p));
  }
  dattn.Reset();
  PTDP_ASSIGN_OR_RETURN(Tensor dln, Tmp(c, N * h, a));
  PTDP_RETURN_IF_ERROR(ops->LinearBackwardData(dln.ref(), dqkv.cref(), w.qkv_w, N, h, 3 * hd));
  {
    PTDP_ASSIGN_OR_RETURN(FullRows ln1, GatherRows(c, st->ln1_out.cref(), KeptTag(c)));
    PTDP_RETURN_IF_ERROR(WeightGrad(c, g.qkv_w, g.qkv_b, &dqkv, ln1.ref, N, h, 3 * hd, &ln1.owned));
  }
  dqkv.Reset();
  PTDP_ASSIGN_OR_RETURN(dln, SumRows(c, std::move(dln)));  // f's backward
  PTDP_RETURN_IF_ERROR(ops->LayerNormBackward(dx, g.ln1_w, g.ln1_b, dln.cref(), st->x.cref(),
                                              w.ln1_w, st->ln1_mean.cref(), st->ln1_rstd.cref(), R,
                                              h, false));
  return ops->Add(dx, dx, dx2);
}

}  // namespace

Status AllocLayerInput(const LayerCtx& c, LayerStash* st) {
  PTDP_ASSIGN_OR_RETURN(st->x, Alloc(c, c.d.R() * c.d.h, c.types.act, MemTag::kActivations));
  return Status::Ok();
}

void DropLayerActivations(LayerStash* st) {
  for (Tensor* t :
       {&st->ln1_mean, &st->ln1_rstd, &st->ln1_out, &st->qkv, &st->probs, &st->att_mask,
        &st->att_dropped, &st->att_lse, &st->attn_out, &st->attn_res_mask, &st->x2, &st->ln2_mean,
        &st->ln2_rstd, &st->ln2_out, &st->fc1_out, &st->gelu_out, &st->mlp_res_mask}) {
    t->Reset();
  }
}

Status LayerForward(const LayerCtx& c, const LayerWeights& w, int layer, MemTag stash_tag,
                    LayerStash* st, const LayerOutput& out) {
  TensorRef y;
  if (!c.redo_mlp) {
    PTDP_ASSIGN_OR_RETURN(y, out());
  }
  PTDP_RETURN_IF_ERROR(AttentionBlockForward(c, w, layer, stash_tag, st));
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
  if (c.redo_mlp) PTDP_RETURN_IF_ERROR(MlpInsideForward(c, w, MemTag::kActivations, st));
  PTDP_CHECK(!st->gelu_out.empty());
  Tensor dx2;
  PTDP_RETURN_IF_ERROR(MlpBlockBackward(c, w, g, st, dy, &dx2));
  if (c.redo_mlp) DropMlpInside(st);
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

Status EmbeddingForwardTp(const LayerCtx& c, ConstRef wte_local, ConstRef wpe, EmbeddingStash* st,
                          TensorRef out) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const bool first = c.tp == nullptr || c.tp->rank() == 0;  // one holder adds the positions
  // Every row's lookup in this rank's vocabulary rows, summed over the tensor group (into this
  // rank's rows under sequence parallelism).
  Tensor partial;
  if (d.sp > 1) {
    PTDP_ASSIGN_OR_RETURN(partial, Tmp(c, d.N() * d.h, out.dtype));
  }
  const TensorRef lookup = d.sp > 1 ? partial.ref() : out;
  const ConstRef positions = first ? wpe : ConstRef{};
  PTDP_RETURN_IF_ERROR(ForEachPositionRun(d, [&](int64_t row0, int64_t b, int64_t s, int64_t pos0) {
    return ops->EmbeddingForward(
        Rows(lookup, row0, b * s, d.h), Rows(st->tokens.cref(), row0, b * s, 1), wte_local,
        Rows(positions, pos0, s, d.h), b, s, d.h, d.vocab_begin, d.vocab_begin + d.v_local);
  }));
  if (d.sp > 1) {
    PTDP_RETURN_IF_ERROR(c.tp->ReduceScatterSum(partial.data(), out.data, out.count, out.dtype));
    partial.Reset();
  } else {
    PTDP_RETURN_IF_ERROR(TpAllReduceSum(c.tp, out));
  }
  PTDP_ASSIGN_OR_RETURN(st->mask,
                        Alloc(c, c.drop.p > 0 ? d.R() * d.h : 0, DType::kU8, MemTag::kActivations));
  return ops->Dropout(out, st->mask.ref(), HiddenDropout(c, "embedding"));
}

Status EmbeddingBackwardTp(const LayerCtx& c, TensorRef dwte_local, TensorRef dwpe,
                           EmbeddingStash* st, ConstRef dout) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  PTDP_ASSIGN_OR_RETURN(Tensor g, Tmp(c, d.R() * d.h, dout.dtype));
  PTDP_RETURN_IF_ERROR(
      ops->DropoutBackward(g.ref(), {}, dout, st->mask.cref(), d.R(), d.h, c.drop.p));
  // dout is replicated over the tensor group (gathered from the rows under sequence
  // parallelism), so every rank computes the (replicated) wpe grad.
  PTDP_ASSIGN_OR_RETURN(const FullRows full, GatherRows(c, g.cref()));
  PTDP_RETURN_IF_ERROR(ForEachPositionRun(d, [&](int64_t row0, int64_t b, int64_t s, int64_t pos0) {
    return ops->EmbeddingBackward(dwte_local, Rows(dwpe, pos0, s, d.h),
                                  Rows(full.ref, row0, b * s, d.h),
                                  Rows(st->tokens.cref(), row0, b * s, 1), b, s, d.h, d.vocab_begin,
                                  d.vocab_begin + d.v_local);
  }));
  st->tokens.Reset();
  st->mask.Reset();
  return Status::Ok();
}

Status HeadForward(const LayerCtx& c, const HeadWeights& w, HeadStash* st, TensorRef loss_sum) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const int64_t N = d.N(), R = d.R(), h = d.h, V = d.v_local;
  const DType wide = c.types.wide;
  const MemTag tag = MemTag::kActivations;
  PTDP_CHECK(!st->x.empty() && !st->targets.empty());
  PTDP_ASSIGN_OR_RETURN(st->ln_mean, Alloc(c, R, wide, tag));
  PTDP_ASSIGN_OR_RETURN(st->ln_rstd, Alloc(c, R, wide, tag));
  PTDP_ASSIGN_OR_RETURN(st->ln_out, Alloc(c, R * h, c.types.act, tag));
  PTDP_RETURN_IF_ERROR(ops->LayerNormForward(st->ln_out.ref(), st->ln_mean.ref(), st->ln_rstd.ref(),
                                             st->x.cref(), w.lnf_w, w.lnf_b, R, h));
  PTDP_ASSIGN_OR_RETURN(st->logits, Alloc(c, N * V, wide, tag));
  {
    PTDP_ASSIGN_OR_RETURN(const FullRows ln, GatherRows(c, st->ln_out.cref()));
    PTDP_RETURN_IF_ERROR(
        ops->LinearForward(st->logits.ref(), {}, ln.ref, w.wout_local, {}, N, h, V));
  }
  PTDP_ASSIGN_OR_RETURN(st->row_max, Alloc(c, N, wide, tag));
  PTDP_ASSIGN_OR_RETURN(st->row_sum, Alloc(c, N, wide, tag));
  const VocabShard shard = Shard(d);
  // One read of the logits: local max, sum of exponentials relative to it, target logit.
  PTDP_ASSIGN_OR_RETURN(Tensor sums, Tmp(c, 2 * N, wide));  // row sums, then target logits
  PTDP_RETURN_IF_ERROR(ops->CrossEntropyLocalStats(st->row_max.ref(), sums.ref(), st->logits.cref(),
                                                   st->targets.cref(), shard));
  if (c.tp != nullptr && c.tp->size() > 1) {
    // Each rank's sum is relative to its own max: keep it, take the group's, and rescale.
    PTDP_ASSIGN_OR_RETURN(Tensor local_max, Tmp(c, N, wide));
    PTDP_RETURN_IF_ERROR(ops->Cast(local_max.ref(), st->row_max.cref()));
    PTDP_RETURN_IF_ERROR(TpAllReduceMax(c.tp, st->row_max.ref()));
    PTDP_RETURN_IF_ERROR(
        ops->CrossEntropyRescaleSums(sums.ref(), local_max.cref(), st->row_max.cref(), shard));
    PTDP_RETURN_IF_ERROR(TpAllReduceSum(c.tp, sums.ref()));
  }
  return ops->CrossEntropyLoss(st->row_sum.ref(), loss_sum, sums.cref(), st->row_max.cref(), shard);
}

Status HeadBackward(const LayerCtx& c, const HeadWeights& w, const HeadGrads& g, double dloss,
                    HeadStash* st, TensorRef dx) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const int64_t N = d.N(), R = d.R(), h = d.h, V = d.v_local;
  PTDP_CHECK(!st->logits.empty());
  // dlogits in the compute dtype: what the output layer's backward GEMMs read.
  PTDP_ASSIGN_OR_RETURN(Tensor dlogits, OutputGrad(c, N * V));
  PTDP_RETURN_IF_ERROR(ops->CrossEntropyBackward(dlogits.ref(), st->logits.cref(),
                                                 st->row_max.cref(), st->row_sum.cref(),
                                                 st->targets.cref(), dloss, Shard(d)));
  PTDP_ASSIGN_OR_RETURN(Tensor dln, Tmp(c, N * h, c.types.act));
  PTDP_RETURN_IF_ERROR(ops->LinearBackwardData(dln.ref(), dlogits.cref(), w.wout_local, N, h, V));
  {
    PTDP_ASSIGN_OR_RETURN(FullRows ln, GatherRows(c, st->ln_out.cref(), KeptTag(c)));
    PTDP_RETURN_IF_ERROR(WeightGrad(c, g.wout_local, {}, &dlogits, ln.ref, N, h, V, &ln.owned));
  }
  dlogits.Reset();
  PTDP_ASSIGN_OR_RETURN(dln, SumRows(c, std::move(dln)));
  PTDP_RETURN_IF_ERROR(ops->LayerNormBackward(dx, g.lnf_w, g.lnf_b, dln.cref(), st->x.cref(),
                                              w.lnf_w, st->ln_mean.cref(), st->ln_rstd.cref(), R, h,
                                              false));
  for (Tensor* t : {&st->x, &st->ln_mean, &st->ln_rstd, &st->logits, &st->row_max, &st->row_sum,
                    &st->targets}) {
    t->Reset();
  }
  // Else the weight half's input, unless it keeps the gathered copy (sequence parallelism).
  if (c.defer_weight_grads == nullptr || d.sp > 1) st->ln_out.Reset();
  return Status::Ok();
}

}  // namespace ptdp::runtime
