#include "runtime/backend/timed_ops.h"

#include <algorithm>
#include <initializer_list>

#include "runtime/backend/device.h"

namespace ptdp::runtime {
namespace {

std::string Dims(std::initializer_list<int64_t> dims) {
  std::string s;
  for (int64_t d : dims) {
    if (!s.empty()) s += 'x';
    s += std::to_string(d);
  }
  return s;
}

}  // namespace

template <class Call>
Status TimedOps::Timed(const std::string& key, Call&& call) {
  PTDP_RETURN_IF_ERROR(dev_->Synchronize());
  const auto t0 = std::chrono::steady_clock::now();
  const Status status = call();
  PTDP_RETURN_IF_ERROR(status);
  PTDP_RETURN_IF_ERROR(dev_->Synchronize());
  Entry& e = times_[key];
  e.calls += 1;
  e.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::Ok();
}

std::vector<OpTime> TimedOps::Table() const {
  std::vector<OpTime> rows;
  for (const auto& [op, e] : times_) rows.push_back({op, e.calls, e.seconds});
  std::sort(rows.begin(), rows.end(),
            [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return rows;
}

Status TimedOps::LayerNormForward(TensorRef out, TensorRef mean, TensorRef rstd, ConstRef x,
                                  ConstRef w, ConstRef b, int64_t n, int64_t c,
                                  double weight_offset) {
  return Timed(std::string("LayerNormForward ") + Dims({n, c}), [&] {
    return inner_->LayerNormForward(out, mean, rstd, x, w, b, n, c, weight_offset);
  });
}

Status TimedOps::LayerNormBackward(TensorRef dx, TensorRef dw, TensorRef db, ConstRef dout,
                                   ConstRef x, ConstRef w, ConstRef mean, ConstRef rstd, int64_t n,
                                   int64_t c, bool accumulate_dx, double weight_offset) {
  return Timed(std::string("LayerNormBackward ") + Dims({n, c}), [&] {
    return inner_->LayerNormBackward(dx, dw, db, dout, x, w, mean, rstd, n, c, accumulate_dx,
                                     weight_offset);
  });
}

Status TimedOps::LinearForward(TensorRef out, TensorRef gelu_out, ConstRef x, ConstRef w,
                               ConstRef bias, int64_t n, int64_t c, int64_t oc) {
  return Timed(
      std::string(gelu_out.empty() ? "LinearForward " : "LinearForward+GeLU ") + Dims({n, c, oc}),
      [&] { return inner_->LinearForward(out, gelu_out, x, w, bias, n, c, oc); });
}

Status TimedOps::LinearBackwardData(TensorRef dx, ConstRef dout, ConstRef w, int64_t n, int64_t c,
                                    int64_t oc) {
  return Timed(std::string("LinearBackwardData ") + Dims({n, c, oc}),
               [&] { return inner_->LinearBackwardData(dx, dout, w, n, c, oc); });
}

Status TimedOps::LinearBackwardWeight(TensorRef dw, TensorRef dbias, ConstRef dout, ConstRef x,
                                      int64_t n, int64_t c, int64_t oc) {
  return Timed(std::string("LinearBackwardWeight ") + Dims({n, c, oc}),
               [&] { return inner_->LinearBackwardWeight(dw, dbias, dout, x, n, c, oc); });
}

Status TimedOps::LinearBackwardDataGelu(TensorRef dpre, ConstRef dout, ConstRef w, ConstRef pre,
                                        int64_t n, int64_t c, int64_t oc) {
  return Timed(std::string("LinearBackwardData+dGeLU ") + Dims({n, c, oc}),
               [&] { return inner_->LinearBackwardDataGelu(dpre, dout, w, pre, n, c, oc); });
}

Status TimedOps::GeluBackward(TensorRef dpre, ConstRef pre, ConstRef dgelu, int64_t count) {
  return Timed(std::string("GeluBackward ") + Dims({count}),
               [&] { return inner_->GeluBackward(dpre, pre, dgelu, count); });
}

Status TimedOps::BiasDropoutResidual(TensorRef out, TensorRef mask, ConstRef x, ConstRef bias,
                                     ConstRef residual, int64_t n, int64_t c,
                                     const DropoutSpec& drop) {
  return Timed(std::string("BiasDropoutResidual ") + Dims({n, c}), [&] {
    return inner_->BiasDropoutResidual(out, mask, x, bias, residual, n, c, drop);
  });
}

Status TimedOps::DropoutBackward(TensorRef dx, TensorRef dbias, ConstRef dy, ConstRef mask,
                                 int64_t n, int64_t c, double p) {
  return Timed(std::string("DropoutBackward ") + Dims({n, c}),
               [&] { return inner_->DropoutBackward(dx, dbias, dy, mask, n, c, p); });
}

Status TimedOps::Add(TensorRef out, ConstRef a, ConstRef b) {
  return Timed("Add", [&] { return inner_->Add(out, a, b); });
}

Status TimedOps::AttentionForward(TensorRef out, AttentionStash* stash, ConstRef qkv,
                                  const AttentionShape& shape, const DropoutSpec& drop) {
  return Timed("AttentionForward" + std::string(" ") +
                   Dims({shape.b, shape.s, shape.heads_local, shape.head_dim}),
               [&] { return inner_->AttentionForward(out, stash, qkv, shape, drop); });
}

Status TimedOps::AttentionBackward(TensorRef dqkv, ConstRef dout, ConstRef qkv,
                                   const AttentionStash& stash, const AttentionShape& shape,
                                   double p) {
  return Timed("AttentionBackward" + std::string(" ") +
                   Dims({shape.b, shape.s, shape.heads_local, shape.head_dim}),
               [&] { return inner_->AttentionBackward(dqkv, dout, qkv, stash, shape, p); });
}

Status TimedOps::RmsNormForward(TensorRef out, TensorRef rstd, ConstRef x, ConstRef w, int64_t n,
                                int64_t c, double eps) {
  return Timed("RmsNormForward " + Dims({n, c}),
               [&] { return inner_->RmsNormForward(out, rstd, x, w, n, c, eps); });
}

Status TimedOps::RmsNormBackward(TensorRef dx, TensorRef dw, ConstRef dout, ConstRef x, ConstRef w,
                                 ConstRef rstd, int64_t n, int64_t c) {
  return Timed("RmsNormBackward " + Dims({n, c}),
               [&] { return inner_->RmsNormBackward(dx, dw, dout, x, w, rstd, n, c); });
}

Status TimedOps::MoeRouterTopK(TensorRef probs, TensorRef index, ConstRef logits, int64_t n,
                               const MoeRouting& routing) {
  return Timed("MoeRouterTopK " + Dims({n, routing.experts, routing.k}),
               [&] { return inner_->MoeRouterTopK(probs, index, logits, n, routing); });
}

Status TimedOps::MoeRouterTopKBackward(TensorRef dlogits, ConstRef dprobs, ConstRef probs,
                                       ConstRef index, ConstRef logits, int64_t n,
                                       const MoeRouting& routing) {
  return Timed("MoeRouterTopKBackward " + Dims({n, routing.experts, routing.k}), [&] {
    return inner_->MoeRouterTopKBackward(dlogits, dprobs, probs, index, logits, n, routing);
  });
}

Status TimedOps::MoeZLossBackward(TensorRef dlogits, TensorRef sum_sq, ConstRef logits,
                                  double scale, int64_t n, int64_t experts) {
  return Timed("MoeZLossBackward " + Dims({n, experts}), [&] {
    return inner_->MoeZLossBackward(dlogits, sum_sq, logits, scale, n, experts);
  });
}

Status TimedOps::MoeAuxLossBackward(TensorRef dlogits, ConstRef logits, ConstRef counts,
                                    double scale, int64_t n, int64_t experts,
                                    const MoeAuxGrouping& grouping) {
  return Timed("MoeAuxLossBackward " + Dims({n, experts}), [&] {
    return inner_->MoeAuxLossBackward(dlogits, logits, counts, scale, n, experts, grouping);
  });
}

Status TimedOps::MoeRouterProbSums(TensorRef out, ConstRef logits, int64_t n, int64_t experts,
                                   const MoeAuxGrouping& grouping) {
  return Timed("MoeRouterProbSums " + Dims({n, experts}),
               [&] { return inner_->MoeRouterProbSums(out, logits, n, experts, grouping); });
}

Status TimedOps::MoePermuteRows(TensorRef out, ConstRef x, ConstRef rows, int64_t n,
                                int64_t width) {
  return Timed("MoePermuteRows " + Dims({n, width}),
               [&] { return inner_->MoePermuteRows(out, x, rows, n, width); });
}

Status TimedOps::MoeUnpermuteAddRows(TensorRef out, ConstRef y, ConstRef rows, int64_t n,
                                     int64_t width) {
  return Timed("MoeUnpermuteAddRows " + Dims({n, width}),
               [&] { return inner_->MoeUnpermuteAddRows(out, y, rows, n, width); });
}

Status TimedOps::MoeScaleRows(TensorRef out, ConstRef in, ConstRef weight, ConstRef slot, int64_t n,
                              int64_t width) {
  return Timed("MoeScaleRows " + Dims({n, width}),
               [&] { return inner_->MoeScaleRows(out, in, weight, slot, n, width); });
}

Status TimedOps::MoeRowDots(TensorRef out, ConstRef a, ConstRef b, ConstRef slot, int64_t n,
                            int64_t width) {
  return Timed("MoeRowDots " + Dims({n, width}),
               [&] { return inner_->MoeRowDots(out, a, b, slot, n, width); });
}

Status TimedOps::MoeGateSigmoid(TensorRef gate, ConstRef logit, int64_t n) {
  return Timed("MoeGateSigmoid " + Dims({n}),
               [&] { return inner_->MoeGateSigmoid(gate, logit, n); });
}

Status TimedOps::MoeGateSigmoidBackward(TensorRef dlogit, ConstRef gate, ConstRef dgate,
                                        int64_t n) {
  return Timed("MoeGateSigmoidBackward " + Dims({n}),
               [&] { return inner_->MoeGateSigmoidBackward(dlogit, gate, dgate, n); });
}

Status TimedOps::SwigluForward(TensorRef out, ConstRef in, int64_t count) {
  return Timed("SwigluForward " + Dims({count}),
               [&] { return inner_->SwigluForward(out, in, count); });
}

Status TimedOps::SwigluBackward(TensorRef din, ConstRef in, ConstRef dout, int64_t count) {
  return Timed("SwigluBackward " + Dims({count}),
               [&] { return inner_->SwigluBackward(din, in, dout, count); });
}

Status TimedOps::SquaredReluForward(TensorRef out, ConstRef in, int64_t count) {
  return Timed("SquaredReluForward " + Dims({count}),
               [&] { return inner_->SquaredReluForward(out, in, count); });
}

Status TimedOps::SquaredReluBackward(TensorRef din, ConstRef in, ConstRef dout, int64_t count) {
  return Timed("SquaredReluBackward " + Dims({count}),
               [&] { return inner_->SquaredReluBackward(din, in, dout, count); });
}

Status TimedOps::RotaryEmbedding(TensorRef qkv, const AttentionShape& a, const RopeSpec& rope,
                                 bool inverse) {
  return Timed("RotaryEmbedding " + Dims({a.b, a.LocalSeq(), a.heads_local, a.head_dim}),
               [&] { return inner_->RotaryEmbedding(qkv, a, rope, inverse); });
}

Status TimedOps::QkNormForward(TensorRef qkv, TensorRef qk_in, TensorRef rstd, ConstRef q_w,
                               ConstRef k_w, const AttentionShape& a, double eps) {
  return Timed("QkNormForward " + Dims({a.b, a.LocalSeq(), a.heads_local, a.head_dim}),
               [&] { return inner_->QkNormForward(qkv, qk_in, rstd, q_w, k_w, a, eps); });
}

Status TimedOps::QkNormBackward(TensorRef dqkv, TensorRef dq_w, TensorRef dk_w, ConstRef qk_in,
                                ConstRef rstd, ConstRef q_w, ConstRef k_w,
                                const AttentionShape& a) {
  return Timed("QkNormBackward " + Dims({a.b, a.LocalSeq(), a.heads_local, a.head_dim}),
               [&] { return inner_->QkNormBackward(dqkv, dq_w, dk_w, qk_in, rstd, q_w, k_w, a); });
}

Status TimedOps::ContextKvPack(TensorRef kv, ConstRef qkv, const AttentionShape& a) {
  return Timed("ContextKvPack " + Dims({a.b, a.LocalSeq(), a.heads_local, a.head_dim}),
               [&] { return inner_->ContextKvPack(kv, qkv, a); });
}

Status TimedOps::ContextKvUnpack(TensorRef dqkv, ConstRef dkv, const AttentionShape& a) {
  return Timed("ContextKvUnpack " + Dims({a.b, a.LocalSeq(), a.heads_local, a.head_dim}),
               [&] { return inner_->ContextKvUnpack(dqkv, dkv, a); });
}

Status TimedOps::ContextAttentionForward(TensorRef out, TensorRef lse, ConstRef qkv,
                                         ConstRef kv_all, const AttentionShape& a,
                                         const DropoutSpec& drop) {
  return Timed("ContextAttentionForward " + Dims({a.b, a.s, a.cp, a.heads_local, a.head_dim}),
               [&] { return inner_->ContextAttentionForward(out, lse, qkv, kv_all, a, drop); });
}

Status TimedOps::ContextAttentionBackward(TensorRef dqkv, TensorRef dkv_src, ConstRef dout,
                                          ConstRef out, ConstRef qkv, ConstRef kv_src, ConstRef lse,
                                          const AttentionShape& a, int src,
                                          const DropoutSpec& drop) {
  return Timed("ContextAttentionBackward " + Dims({a.b, a.s, a.cp, a.heads_local, a.head_dim}),
               [&] {
                 return inner_->ContextAttentionBackward(dqkv, dkv_src, dout, out, qkv, kv_src, lse,
                                                         a, src, drop);
               });
}

Status TimedOps::EmbeddingForward(TensorRef out, ConstRef tokens, ConstRef wte, ConstRef wpe,
                                  int64_t b, int64_t s, int64_t c, int64_t vocab_begin,
                                  int64_t vocab_end) {
  return Timed(std::string("EmbeddingForward ") + Dims({b, s, c}), [&] {
    return inner_->EmbeddingForward(out, tokens, wte, wpe, b, s, c, vocab_begin, vocab_end);
  });
}

Status TimedOps::EmbeddingBackward(TensorRef dwte, TensorRef dwpe, ConstRef dout, ConstRef tokens,
                                   int64_t b, int64_t s, int64_t c, int64_t vocab_begin,
                                   int64_t vocab_end) {
  return Timed(std::string("EmbeddingBackward ") + Dims({b, s, c}), [&] {
    return inner_->EmbeddingBackward(dwte, dwpe, dout, tokens, b, s, c, vocab_begin, vocab_end);
  });
}

Status TimedOps::Dropout(TensorRef x, TensorRef mask, const DropoutSpec& drop) {
  return Timed("Dropout", [&] { return inner_->Dropout(x, mask, drop); });
}

Status TimedOps::CrossEntropyLocalStats(TensorRef row_max, TensorRef sums, ConstRef logits,
                                        ConstRef targets, const VocabShard& v) {
  return Timed(std::string("CrossEntropyLocalStats ") + Dims({v.rows, v.v_local}),
               [&] { return inner_->CrossEntropyLocalStats(row_max, sums, logits, targets, v); });
}

Status TimedOps::CrossEntropyRescaleSums(TensorRef sums, ConstRef local_max, ConstRef global_max,
                                         const VocabShard& v) {
  return Timed(std::string("CrossEntropyRescaleSums ") + Dims({v.rows}),
               [&] { return inner_->CrossEntropyRescaleSums(sums, local_max, global_max, v); });
}

Status TimedOps::CrossEntropyLoss(TensorRef row_sum, TensorRef loss_sum, ConstRef sums,
                                  ConstRef row_max, ConstRef targets, const VocabShard& v) {
  return Timed(std::string("CrossEntropyLoss ") + Dims({v.rows, v.v_local}), [&] {
    return inner_->CrossEntropyLoss(row_sum, loss_sum, sums, row_max, targets, v);
  });
}

Status TimedOps::CrossEntropyBackward(TensorRef dlogits, ConstRef logits, ConstRef row_max,
                                      ConstRef row_sum, ConstRef targets, double dloss,
                                      const VocabShard& v) {
  return Timed(std::string("CrossEntropyBackward ") + Dims({v.rows, v.v_local}), [&] {
    return inner_->CrossEntropyBackward(dlogits, logits, row_max, row_sum, targets, dloss, v);
  });
}

Status TimedOps::AdamW(TensorRef param, TensorRef compute_copy, ConstRef grad, TensorRef m,
                       TensorRef v, const AdamWHyper& h) {
  return Timed("AdamW", [&] { return inner_->AdamW(param, compute_copy, grad, m, v, h); });
}

Status TimedOps::SumSquares(TensorRef acc, ConstRef x) {
  return Timed("SumSquares", [&] { return inner_->SumSquares(acc, x); });
}

Status TimedOps::AdamWMany(std::span<const AdamWTensor> tensors, const AdamWHyper& h) {
  if (!inner_->FusesMultiTensor()) return Ops::AdamWMany(tensors, h);
  return Timed("AdamW (multi-tensor)", [&] { return inner_->AdamWMany(tensors, h); });
}

Status TimedOps::SumSquaresMany(TensorRef acc, std::span<const ConstRef> xs) {
  if (!inner_->FusesMultiTensor()) return Ops::SumSquaresMany(acc, xs);
  return Timed("SumSquares (multi-tensor)", [&] { return inner_->SumSquaresMany(acc, xs); });
}

Status TimedOps::Scale(TensorRef x, double factor) {
  return Timed("Scale", [&] { return inner_->Scale(x, factor); });
}

Status TimedOps::FlagNonFinite(TensorRef flag, ConstRef x) {
  return Timed("FlagNonFinite", [&] { return inner_->FlagNonFinite(flag, x); });
}

Status TimedOps::Cast(TensorRef dst, ConstRef src) {
  return Timed("Cast", [&] { return inner_->Cast(dst, src); });
}

Status TimedOps::Fill(TensorRef dst, double value) {
  return Timed("Fill", [&] { return inner_->Fill(dst, value); });
}

Status TimedOps::FillNormal(TensorRef out, uint64_t key, int64_t cols, int64_t global_cols,
                            int64_t col0, int64_t row0, double mean, double stddev) {
  return Timed("FillNormal", [&] {
    return inner_->FillNormal(out, key, cols, global_cols, col0, row0, mean, stddev);
  });
}

}  // namespace ptdp::runtime
