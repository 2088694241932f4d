// The model's ends (gpt_layers.h): the vocabulary-parallel embedding and the head (final norm,
// output layer, vocabulary-parallel cross-entropy).
#include "runtime/model/gpt_layers.h"
#include "runtime/model/layer_common.h"

namespace ptdp::runtime {

using namespace layer_common;  // NOLINT(build/namespaces): the layers' shared helpers

Status EmbeddingForwardTp(const LayerCtx& c, ConstRef wte_local, ConstRef wpe, EmbeddingStash* st,
                          TensorRef out, const std::string& site) {
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
  return ops->Dropout(out, st->mask.ref(), HiddenDropout(c, site));
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
  const int64_t N = d.N(), h = d.h, V = d.v_local;
  const DType wide = c.types.wide;
  const MemTag tag = MemTag::kActivations;
  PTDP_CHECK(!st->x.empty() && !st->targets.empty());
  PTDP_RETURN_IF_ERROR(NormForward(c, tag, st->x.cref(), w.lnf_w, w.lnf_b,
                                   {&st->ln_mean, &st->ln_rstd, &st->ln_out}));
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
  return ops->CrossEntropyLoss(st->row_sum.ref(), loss_sum, sums.cref(), st->row_max.cref(),
                               st->targets.cref(), shard);
}

Status HeadBackward(const LayerCtx& c, const HeadWeights& w, const HeadGrads& g, double dloss,
                    HeadStash* st, TensorRef dx, ConstRef d_out_extra) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const int64_t N = d.N(), h = d.h, V = d.v_local;
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
  if (!d_out_extra.empty()) PTDP_RETURN_IF_ERROR(ops->Add(dln.ref(), dln.cref(), d_out_extra));
  PTDP_RETURN_IF_ERROR(NormBackward(c, dx, g.lnf_w, g.lnf_b, dln.cref(), st->x.cref(), w.lnf_w,
                                    st->ln_mean.cref(), st->ln_rstd.cref()));
  for (Tensor* t : {&st->x, &st->ln_mean, &st->ln_rstd, &st->logits, &st->row_max, &st->row_sum,
                    &st->targets}) {
    t->Reset();
  }
  // Else the weight half's input, unless it keeps the gathered copy (sequence parallelism).
  if (c.defer_weight_grads == nullptr || d.sp > 1) st->ln_out.Reset();
  return Status::Ok();
}

}  // namespace ptdp::runtime
