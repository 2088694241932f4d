// Helpers shared by the layer (gpt_layers.cc) and the model's ends (gpt_ends.cc): allocation,
// the tensor group's collectives, sequence parallelism's row gathers, the deferred weight
// gradients of a split backward, dropout placement and the norms.
#include "runtime/model/layer_common.h"

namespace ptdp::runtime::layer_common {

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
                  int64_t n, int64_t cols, int64_t oc, Tensor* x_owner) {
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

Result<FullRows> GatherRows(const LayerCtx& c, ConstRef local, MemTag tag) {
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

Result<Tensor> RowIndex(const LayerCtx& c, const std::vector<int32_t>& rows) {
  PTDP_ASSIGN_OR_RETURN(Tensor index, Tmp(c, int64_t(rows.size()), DType::kI32));
  c.dev->Upload(index.data(), rows.data(), index.bytes());
  return index;
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
  a.group = d.Group();
  return a;
}

VocabShard Shard(const LayerDims& d) {
  return {d.N(), d.v_local, d.vocab_begin, d.vocab_real};
}

// LayerNorm1P's weights are stored as their offsets from 1 (model.layernorm_1p).
double WeightOffset(const LayerArch& arch) {
  return arch.layernorm_1p ? 1.0 : 0.0;
}

namespace {

// The norm itself, into allocated statistics and output.
Status NormOp(const LayerCtx& c, ConstRef x, ConstRef w, ConstRef b, NormStash st, TensorRef out) {
  const int64_t R = c.d.R(), h = c.d.h;
  Ops* ops = c.dev->ops();
  if (c.arch.rmsnorm) return ops->RmsNormForward(out, st.rstd->ref(), x, w, R, h, c.arch.norm_eps);
  return ops->LayerNormForward(out, st.mean->ref(), st.rstd->ref(), x, w, b, R, h,
                               WeightOffset(c.arch));
}

}  // namespace

Status NormForward(const LayerCtx& c, MemTag tag, ConstRef x, ConstRef w, ConstRef b,
                   NormStash st) {
  const int64_t R = c.d.R(), h = c.d.h;
  PTDP_ASSIGN_OR_RETURN(*st.mean, Alloc(c, c.arch.rmsnorm ? 0 : R, c.types.wide, tag));
  PTDP_ASSIGN_OR_RETURN(*st.rstd, Alloc(c, R, c.types.wide, tag));
  PTDP_ASSIGN_OR_RETURN(*st.out, Alloc(c, R * h, c.types.act, tag));
  return NormOp(c, x, w, b, st, st.out->ref());
}

Status NormForwardInto(const LayerCtx& c, MemTag tag, ConstRef x, ConstRef w, ConstRef b,
                       NormStash st, TensorRef out) {
  const int64_t R = c.d.R();
  PTDP_ASSIGN_OR_RETURN(*st.mean, Alloc(c, c.arch.rmsnorm ? 0 : R, c.types.wide, tag));
  PTDP_ASSIGN_OR_RETURN(*st.rstd, Alloc(c, R, c.types.wide, tag));
  return NormOp(c, x, w, b, st, out);
}

Status NormRedoOutput(const LayerCtx& c, MemTag tag, ConstRef x, ConstRef w, ConstRef b,
                      NormStash st) {
  PTDP_ASSIGN_OR_RETURN(*st.out, Alloc(c, c.d.R() * c.d.h, c.types.act, tag));
  return NormOp(c, x, w, b, st, st.out->ref());
}

Status NormBackward(const LayerCtx& c, TensorRef dx, TensorRef dw, TensorRef db, ConstRef dout,
                    ConstRef x, ConstRef w, ConstRef mean, ConstRef rstd) {
  const int64_t R = c.d.R(), h = c.d.h;
  Ops* ops = c.dev->ops();
  if (c.arch.rmsnorm) return ops->RmsNormBackward(dx, dw, dout, x, w, rstd, R, h);
  return ops->LayerNormBackward(dx, dw, db, dout, x, w, mean, rstd, R, h, false,
                                WeightOffset(c.arch));
}

}  // namespace ptdp::runtime::layer_common
