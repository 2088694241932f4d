// Multi-token prediction depths (mtp.h): the embedding of the shifted tokens, the two norms side
// by side, the column-parallel eh_proj, a transformer layer and a head of the depth's own.
#include "runtime/model/mtp.h"

#include <vector>

#include "runtime/model/layer_common.h"

namespace ptdp::runtime {

using namespace layer_common;  // NOLINT(build/namespaces): the layers' shared helpers

namespace {

int TensorSize(const LayerCtx& c) {
  return c.tp == nullptr ? 1 : c.tp->size();
}

// [2R][h] rows (enorm's R above hnorm's R) <-> [R][2h] (each row's two side by side): as rows of
// width h, row 2r of the side-by-side form is row r above, row 2r + 1 is row R + r.
Result<Tensor> SideBySideIndex(const LayerCtx& c, int64_t R) {
  std::vector<int32_t> rows(size_t(2 * R));
  for (int64_t r = 0; r < R; ++r) {
    rows[size_t(2 * r)] = int32_t(r);
    rows[size_t(2 * r + 1)] = int32_t(R + r);
  }
  return RowIndex(c, rows);
}
Result<Tensor> ApartIndex(const LayerCtx& c, int64_t R) {
  std::vector<int32_t> rows(size_t(2 * R));
  for (int64_t r = 0; r < R; ++r) {
    rows[size_t(r)] = int32_t(2 * r);
    rows[size_t(R + r)] = int32_t(2 * r + 1);
  }
  return RowIndex(c, rows);
}

// Megatron-Core's gather_from_tensor_model_parallel_region then (sequence parallelism)
// scatter_to_sequence_parallel_region: y [N][h/t] on each tensor rank -> out [R][h], this rank's
// rows of every rank's columns. As rows of width h/t, out row r t + k is rank k's row row0 + r.
Status GatherColumns(const LayerCtx& c, ConstRef y, TensorRef out) {
  const int t = TensorSize(c);
  const LayerDims& d = c.d;
  const int64_t N = d.N(), R = d.R(), hl = d.h / t;
  PTDP_ASSIGN_OR_RETURN(Tensor all, Tmp(c, int64_t(t) * N * hl, y.dtype));
  PTDP_RETURN_IF_ERROR(c.tp->AllGather(y.data, all.data(), N * hl, y.dtype));
  const int64_t row0 = d.sp > 1 ? d.sp_rank * R : 0;
  std::vector<int32_t> rows(size_t(R * t));
  for (int64_t r = 0; r < R; ++r) {
    for (int k = 0; k < t; ++k) rows[size_t(r * t + k)] = int32_t(k * N + row0 + r);
  }
  PTDP_ASSIGN_OR_RETURN(const Tensor index, RowIndex(c, rows));
  return c.dev->ops()->MoePermuteRows(out, all.cref(), index.cref(), R * t, hl);
}

// Its backward: dx [R][h] -> this rank's columns of every row, [N][h/t] (the rows gathered first
// under sequence parallelism; without it every rank holds them all).
Result<Tensor> SplitColumns(const LayerCtx& c, ConstRef dx) {
  const int t = TensorSize(c);
  const int64_t N = c.d.N(), hl = c.d.h / t;
  PTDP_ASSIGN_OR_RETURN(const FullRows full, GatherRows(c, dx));
  std::vector<int32_t> rows(static_cast<size_t>(N));
  const int me = c.tp->rank();
  for (int64_t n = 0; n < N; ++n) rows[size_t(n)] = int32_t(n * t + me);
  PTDP_ASSIGN_OR_RETURN(const Tensor index, RowIndex(c, rows));
  PTDP_ASSIGN_OR_RETURN(Tensor mine, Tmp(c, N * hl, dx.dtype));
  PTDP_RETURN_IF_ERROR(c.dev->ops()->MoePermuteRows(mine.ref(), full.ref, index.cref(), N, hl));
  return mine;
}

}  // namespace

Status MtpForward(const LayerCtx& c, const MtpWeights& w, int layer, bool recompute, MtpStash* st,
                  ConstRef hidden, TensorRef loss_sum) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const int t = TensorSize(c);
  const int64_t R = d.R(), N = d.N(), h = d.h, hl = h / t;
  const DType act = c.types.act;
  const MemTag tag = MemTag::kActivations;
  PTDP_CHECK(!st->embedding.tokens.empty() && !st->head.targets.empty());
  PTDP_ASSIGN_OR_RETURN(st->e, Alloc(c, R * h, act, tag));
  PTDP_RETURN_IF_ERROR(EmbeddingForwardTp(c, w.wte_local, {}, &st->embedding, st->e.ref(),
                                          Site(layer, "embedding")));
  {
    // enorm's rows above hnorm's, then side by side: eh_proj's input.
    PTDP_ASSIGN_OR_RETURN(Tensor both, Tmp(c, 2 * R * h, act));
    Tensor unused;
    PTDP_RETURN_IF_ERROR(NormForwardInto(c, tag, st->e.cref(), w.enorm_w, w.enorm_b,
                                         {&st->e_mean, &st->e_rstd, &unused},
                                         Rows(both.ref(), 0, R, h)));
    PTDP_RETURN_IF_ERROR(NormForwardInto(c, tag, hidden, w.hnorm_w, w.hnorm_b,
                                         {&st->h_mean, &st->h_rstd, &unused},
                                         Rows(both.ref(), R, R, h)));
    PTDP_ASSIGN_OR_RETURN(st->eh_in, Alloc(c, 2 * R * h, act, tag));
    PTDP_ASSIGN_OR_RETURN(const Tensor index, SideBySideIndex(c, R));
    PTDP_RETURN_IF_ERROR(ops->MoePermuteRows(st->eh_in.ref(), both.cref(), index.cref(), 2 * R, h));
  }
  PTDP_RETURN_IF_ERROR(AllocLayerInput(c, &st->layer));
  {
    PTDP_ASSIGN_OR_RETURN(const FullRows x, GatherRows(c, st->eh_in.cref()));
    if (t == 1) {
      PTDP_RETURN_IF_ERROR(
          ops->LinearForward(st->layer.x.ref(), {}, x.ref, w.eh_proj_local, {}, N, 2 * h, h));
    } else {
      PTDP_ASSIGN_OR_RETURN(Tensor y, Tmp(c, N * hl, act));
      PTDP_RETURN_IF_ERROR(
          ops->LinearForward(y.ref(), {}, x.ref, w.eh_proj_local, {}, N, 2 * h, hl));
      PTDP_RETURN_IF_ERROR(GatherColumns(c, y.cref(), st->layer.x.ref()));
    }
  }
  const MemTag layer_tag = recompute ? MemTag::kWorkspace : MemTag::kActivations;
  const LayerOutput out = [&]() -> Result<TensorRef> {
    PTDP_ASSIGN_OR_RETURN(st->head.x, Alloc(c, R * h, act, tag));
    return st->head.x.ref();
  };
  PTDP_RETURN_IF_ERROR(LayerForward(c, w.layer, layer, layer_tag, &st->layer, out));
  if (recompute) DropLayerActivations(&st->layer);  // keep only the layer's input
  return HeadForward(c, w.head, &st->head, loss_sum);
}

Status MtpBackward(const LayerCtx& c, const MtpWeights& w, const MtpGrads& g, int layer,
                   bool recompute, double dloss, MtpStash* st, ConstRef hidden,
                   ConstRef d_out_extra, Tensor* dhidden) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const int t = TensorSize(c);
  const int64_t R = d.R(), N = d.N(), h = d.h, hl = h / t;
  const DType act = c.types.act;
  PTDP_ASSIGN_OR_RETURN(Tensor dy, Tmp(c, R * h, act));
  PTDP_RETURN_IF_ERROR(HeadBackward(c, w.head, g.head, dloss, &st->head, dy.ref(), d_out_extra));
  if (recompute) {
    PTDP_ASSIGN_OR_RETURN(Tensor y, Tmp(c, R * h, act));
    PTDP_RETURN_IF_ERROR(
        LayerForward(c, w.layer, layer, MemTag::kActivations, &st->layer, y.ref()));
  }
  PTDP_ASSIGN_OR_RETURN(Tensor dx, Tmp(c, R * h, act));
  PTDP_RETURN_IF_ERROR(LayerBackward(c, w.layer, g.layer, layer, &st->layer, dy.cref(), dx.ref()));
  st->layer.x.Reset();
  dy.Reset();
  // eh_proj: the input gradient, partial over the tensor group, summed into this rank's rows.
  Tensor dy_local;
  if (t == 1) {
    dy_local = std::move(dx);
  } else {
    PTDP_ASSIGN_OR_RETURN(dy_local, SplitColumns(c, dx.cref()));
    dx.Reset();
  }
  PTDP_ASSIGN_OR_RETURN(Tensor deh, Tmp(c, N * 2 * h, act));
  PTDP_RETURN_IF_ERROR(
      ops->LinearBackwardData(deh.ref(), dy_local.cref(), w.eh_proj_local, N, 2 * h, hl));
  {
    PTDP_ASSIGN_OR_RETURN(FullRows x, GatherRows(c, st->eh_in.cref()));
    PTDP_RETURN_IF_ERROR(
        WeightGrad(c, g.eh_proj_local, {}, &dy_local, x.ref, N, 2 * h, hl, &x.owned));
  }
  st->eh_in.Reset();
  PTDP_ASSIGN_OR_RETURN(deh, SumRows(c, std::move(deh)));
  // Apart again: enorm's rows above hnorm's, then each norm's backward.
  PTDP_ASSIGN_OR_RETURN(Tensor both, Tmp(c, 2 * R * h, act));
  {
    PTDP_ASSIGN_OR_RETURN(const Tensor index, ApartIndex(c, R));
    PTDP_RETURN_IF_ERROR(ops->MoePermuteRows(both.ref(), deh.cref(), index.cref(), 2 * R, h));
  }
  deh.Reset();
  PTDP_ASSIGN_OR_RETURN(*dhidden, Tmp(c, R * h, act));
  PTDP_RETURN_IF_ERROR(NormBackward(c, dhidden->ref(), g.hnorm_w, g.hnorm_b,
                                    Rows(both.cref(), R, R, h), hidden, w.hnorm_w,
                                    st->h_mean.cref(), st->h_rstd.cref()));
  PTDP_ASSIGN_OR_RETURN(Tensor de, Tmp(c, R * h, act));
  PTDP_RETURN_IF_ERROR(NormBackward(c, de.ref(), g.enorm_w, g.enorm_b, Rows(both.cref(), 0, R, h),
                                    st->e.cref(), w.enorm_w, st->e_mean.cref(), st->e_rstd.cref()));
  for (Tensor* x : {&both, &st->e, &st->e_mean, &st->e_rstd, &st->h_mean, &st->h_rstd}) x->Reset();
  return EmbeddingBackwardTp(c, g.wte_local, {}, &st->embedding, de.cref());
}

}  // namespace ptdp::runtime
