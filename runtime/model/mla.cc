// Multi-latent attention's projections and the packed attention input they make (mla.h).
#include "runtime/model/mla.h"

#include <array>
#include <utility>
#include <vector>

#include "runtime/model/layer_common.h"

namespace ptdp::runtime {

using namespace layer_common;  // NOLINT(build/namespaces): the layers' shared helpers

namespace {

// The features of a token's heads in blocks of g = LayerDims::mla_block: a query or key head is nn
// unrotated blocks then nr rotated ones (the up projection's order), a value head nv blocks; the
// attention input holds per token and head three parts of nqk blocks each.
struct Blocks {
  int64_t g, nn, nr, nv, nqk, heads, tokens;
  explicit Blocks(const LayerDims& d)
      : g(d.mla_block),
        nn((d.D() - d.mla_rope) / g),
        nr(d.mla_rope / g),
        nv(d.mla_v / g),
        nqk(nn + nr),
        heads(d.heads_local),
        tokens(d.N()) {}
  // Block b of part `part` (0 query, 1 key, 2 value) of head j of token n in the attention input.
  int64_t Input(int64_t n, int64_t j, int part, int64_t b) const {
    return ((n * heads + j) * 3 + part) * nqk + b;
  }
  // A query or key head's block b in the input's order: the rotated blocks first.
  int64_t Turned(int64_t b) const { return b < nn ? nr + b : b - nn; }
  // Block b of head j of token n of the key/value up projection's output (nn key blocks, then nv
  // value blocks), and block b of token n's rotated key after all of them (MlaQkvForward's
  // `source`).
  int64_t Kv(int64_t n, int64_t j, int64_t b) const { return (n * heads + j) * (nn + nv) + b; }
  int64_t Pe(int64_t n, int64_t b) const { return tokens * heads * (nn + nv) + n * nr + b; }
};

// The kinds of index (MlaIndexCache): the keys' and values' blocks in kv_up's output, the packed
// input's query, key and value parts, the padded output's value blocks, the input's gradient's
// key and value blocks, its rotated key blocks, and their sum over the heads.
enum IndexKind { kKeys, kValues, kInputQ, kInputK, kInputV, kOutput, kGradKv, kGradPe, kSumPe };

// An index, the cache's (`kept`) or this call's own.
struct BlockIndex {
  Tensor owned;
  const Tensor* kept = nullptr;
  const Tensor& get() const { return kept != nullptr ? *kept : owned; }
};

// The index of `kind` over every token's heads' `per_head` blocks: row (n, j, b) is at(n, j, b);
// from the cache when it holds it, else built (and given to the cache when there is one).
template <typename At>
Result<BlockIndex> HeadIndex(const LayerCtx& c, const Blocks& k, IndexKind kind, int64_t per_head,
                             At&& at) {
  const std::array<int64_t, 3> shape = {k.tokens, k.heads, k.g};
  BlockIndex out;
  if (c.mla_indices != nullptr && (out.kept = c.mla_indices->Find(kind, shape)) != nullptr) {
    return out;
  }
  std::vector<int32_t> rows(size_t(k.tokens * k.heads * per_head));
  size_t i = 0;
  for (int64_t n = 0; n < k.tokens; ++n) {
    for (int64_t j = 0; j < k.heads; ++j) {
      for (int64_t b = 0; b < per_head; ++b) rows[i++] = int32_t(at(n, j, b));
    }
  }
  if (c.mla_indices == nullptr) {
    PTDP_ASSIGN_OR_RETURN(out.owned, RowIndex(c, rows));
    return out;
  }
  // Kept: allocated as its own (not a Tmp of the call), tagged workspace.
  PTDP_ASSIGN_OR_RETURN(Tensor index,
                        Tensor::Make(c.dev, int64_t(rows.size()), DType::kI32, MemTag::kWorkspace));
  c.dev->Upload(index.data(), rows.data(), index.bytes());
  out.kept = &c.mla_indices->Keep(kind, shape, std::move(index));
  return out;
}

// out [index.count][g] = x's blocks at index; out's blocks at index += y [index.count][g].
Status Take(const LayerCtx& c, TensorRef out, ConstRef x, const BlockIndex& index, int64_t g) {
  return c.dev->ops()->MoePermuteRows(out, x, index.get().cref(), index.get().count(), g);
}
Status Place(const LayerCtx& c, TensorRef out, ConstRef y, const BlockIndex& index, int64_t g) {
  return c.dev->ops()->MoeUnpermuteAddRows(out, y, index.get().cref(), index.get().count(), g);
}

// Elements [offset, offset + count) of t.
TensorRef Span(TensorRef t, int64_t offset, int64_t count) {
  return {static_cast<char*>(t.data) + offset * DTypeBytes(t.dtype), t.dtype, count};
}

// A latent [R][lora] = ln1_out w_down^T into *up_in, or with its norm (w_norm non-empty) into
// *in, normed (1/rms into *rstd) into *up_in.
Status LatentForward(const LayerCtx& c, MemTag tag, ConstRef ln1_out, ConstRef w_down,
                     ConstRef w_norm, int64_t lora, Tensor* in, Tensor* rstd, Tensor* up_in) {
  Ops* ops = c.dev->ops();
  const int64_t R = c.d.R(), h = c.d.h;
  PTDP_ASSIGN_OR_RETURN(*up_in, Alloc(c, R * lora, c.types.act, tag));
  if (w_norm.empty()) return ops->LinearForward(up_in->ref(), {}, ln1_out, w_down, {}, R, h, lora);
  PTDP_ASSIGN_OR_RETURN(*in, Alloc(c, R * lora, c.types.act, tag));
  PTDP_ASSIGN_OR_RETURN(*rstd, Alloc(c, R, c.types.wide, tag));
  PTDP_RETURN_IF_ERROR(ops->LinearForward(in->ref(), {}, ln1_out, w_down, {}, R, h, lora));
  return ops->RmsNormForward(up_in->ref(), rstd->ref(), in->cref(), w_norm, R, lora,
                             c.arch.norm_eps);
}

// Its backward from the latent's gradient dlat [R][lora] (summed over the tensor group): the
// norm's, then the down projection's into dln [R][h] (overwritten when `first`, else added).
Status LatentBackward(const LayerCtx& c, Tensor dlat, ConstRef ln1_out, ConstRef w_down,
                      TensorRef g_down, ConstRef w_norm, TensorRef g_norm, const Tensor& in,
                      const Tensor& rstd, int64_t lora, bool first, TensorRef dln) {
  Ops* ops = c.dev->ops();
  const int64_t R = c.d.R(), h = c.d.h;
  Tensor din = std::move(dlat);
  if (!w_norm.empty()) {
    PTDP_ASSIGN_OR_RETURN(Tensor d_in, OutputGrad(c, R * lora));
    PTDP_RETURN_IF_ERROR(ops->RmsNormBackward(d_in.ref(), g_norm, din.cref(), in.cref(), w_norm,
                                              rstd.cref(), R, lora));
    din = std::move(d_in);
  }
  if (first) {
    PTDP_RETURN_IF_ERROR(ops->LinearBackwardData(dln, din.cref(), w_down, R, h, lora));
  } else {
    PTDP_ASSIGN_OR_RETURN(Tensor part, Tmp(c, R * h, c.types.act));
    PTDP_RETURN_IF_ERROR(ops->LinearBackwardData(part.ref(), din.cref(), w_down, R, h, lora));
    PTDP_RETURN_IF_ERROR(ops->Add(dln, dln, part.cref()));
  }
  return WeightGrad(c, g_down, {}, &din, ln1_out, R, h, lora);
}

}  // namespace

RopeSpec MlaRope(const LayerCtx& c) {
  RopeSpec r = c.arch.rope;
  // RotatedFeatures is int(dqk * percent): half a feature over `rope` keeps the product's
  // rounding from landing just under it.
  r.percent = (double(c.d.mla_rope) + 0.5) / double(c.d.D());
  return r;
}

Status MlaQkvForward(const LayerCtx& c, const LayerWeights& w, MemTag tag, LayerStash* st) {
  const LayerDims& d = c.d;
  const ConstRef ln1_out = st->ln1_out.cref();
  if (d.mla_q_lora > 0) {
    PTDP_RETURN_IF_ERROR(LatentForward(c, tag, ln1_out, w.q_down_w, w.q_norm_w, d.mla_q_lora,
                                       &st->mla_q_in, &st->mla_q_rstd, &st->mla_q_up_in));
  }
  PTDP_RETURN_IF_ERROR(LatentForward(c, tag, ln1_out, Rows(w.kv_down_w, 0, d.mla_kv_lora, d.h),
                                     w.kv_norm_w, d.mla_kv_lora, &st->mla_kv_in, &st->mla_kv_rstd,
                                     &st->mla_kv_up_in));
  return MlaUpProjForward(c, w, tag, st);
}

Status MlaUpProjForward(const LayerCtx& c, const LayerWeights& w, MemTag tag, LayerStash* st) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const Blocks k(d);
  const int64_t N = d.N(), R = d.R(), h = d.h, hl = d.heads_local, dqk = d.D();
  const int64_t ql = d.mla_q_lora, kvl = d.mla_kv_lora, rope = d.mla_rope;
  const int64_t kv_width = hl * (dqk - rope + d.mla_v);
  const DType a = c.types.act;
  const ConstRef ln1_out = st->ln1_out.cref();
  // The queries, through their latent or straight from the gathered rows.
  PTDP_ASSIGN_OR_RETURN(st->mla_q, Alloc(c, N * hl * dqk, a, tag));
  {
    PTDP_ASSIGN_OR_RETURN(const FullRows x,
                          GatherRows(c, ql > 0 ? st->mla_q_up_in.cref() : ln1_out));
    PTDP_RETURN_IF_ERROR(
        ops->LinearForward(st->mla_q.ref(), {}, x.ref, w.q_up_w, {}, N, ql > 0 ? ql : h, hl * dqk));
  }
  // YaRN's softmax factor, folded into the queries (the attention's scale stays 1/sqrt(dqk)).
  if (c.arch.mla_softmax_factor != 1) {
    PTDP_RETURN_IF_ERROR(ops->Scale(st->mla_q.ref(), c.arch.mla_softmax_factor));
  }
  // The shared rotated key: kv_down's last `rope` rows, from the rank's own rows (a GEMM of
  // `rope` outputs, done again when the up projections are rebuilt rather than kept).
  PTDP_ASSIGN_OR_RETURN(Tensor pe, Tmp(c, R * rope, a));
  PTDP_RETURN_IF_ERROR(
      ops->LinearForward(pe.ref(), {}, ln1_out, Rows(w.kv_down_w, kvl, rope, h), {}, R, h, rope));
  // One source for the keys' and values' blocks: kv_up's output [N][kv_width], then every row's
  // rotated key [N][rope].
  PTDP_ASSIGN_OR_RETURN(Tensor source, Tmp(c, N * (kv_width + rope), a));
  {
    PTDP_ASSIGN_OR_RETURN(const FullRows lat, GatherRows(c, st->mla_kv_up_in.cref()));
    PTDP_RETURN_IF_ERROR(ops->LinearForward(Span(source.ref(), 0, N * kv_width), {}, lat.ref,
                                            w.kv_up_w, {}, N, kvl, kv_width));
  }
  const TensorRef pe_all = Span(source.ref(), N * kv_width, N * rope);
  if (d.sp > 1) {
    PTDP_RETURN_IF_ERROR(c.tp->AllGather(pe.data(), pe_all.data, R * rope, a));
  } else {
    c.dev->Copy(pe_all.data, pe.data(), pe.bytes());
  }
  pe.Reset();
  PTDP_ASSIGN_OR_RETURN(const BlockIndex k_index,
                        HeadIndex(c, k, kKeys, k.nqk, [&](int64_t n, int64_t j, int64_t b) {
                          return b < k.nn ? k.Kv(n, j, b) : k.Pe(n, b - k.nn);
                        }));
  PTDP_ASSIGN_OR_RETURN(st->mla_k, Alloc(c, N * hl * dqk, a, tag));
  PTDP_RETURN_IF_ERROR(Take(c, st->mla_k.ref(), source.cref(), k_index, k.g));
  PTDP_ASSIGN_OR_RETURN(const BlockIndex v_index,
                        HeadIndex(c, k, kValues, k.nv, [&](int64_t n, int64_t j, int64_t b) {
                          return k.Kv(n, j, k.nn + b);
                        }));
  PTDP_ASSIGN_OR_RETURN(st->mla_v, Alloc(c, N * hl * d.mla_v, a, tag));
  return Take(c, st->mla_v.ref(), source.cref(), v_index, k.g);
}

Result<Tensor> MlaAttentionInput(const LayerCtx& c, const LayerStash& st) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const Blocks k(d);
  PTDP_ASSIGN_OR_RETURN(Tensor input, Tmp(c, d.N() * d.QkvWidth(), c.types.act));
  PTDP_RETURN_IF_ERROR(ops->Fill(input.ref(), 0.0));
  for (int part = 0; part < 2; ++part) {
    PTDP_ASSIGN_OR_RETURN(
        const BlockIndex index,
        HeadIndex(c, k, part == 0 ? kInputQ : kInputK, k.nqk, [&](int64_t n, int64_t j, int64_t b) {
          return k.Input(n, j, part, k.Turned(b));
        }));
    PTDP_RETURN_IF_ERROR(
        Place(c, input.ref(), (part == 0 ? st.mla_q : st.mla_k).cref(), index, k.g));
  }
  PTDP_ASSIGN_OR_RETURN(const BlockIndex v_index,
                        HeadIndex(c, k, kInputV, k.nv, [&](int64_t n, int64_t j, int64_t b) {
                          return k.Input(n, j, 2, b);
                        }));
  PTDP_RETURN_IF_ERROR(Place(c, input.ref(), st.mla_v.cref(), v_index, k.g));
  PTDP_RETURN_IF_ERROR(ops->RotaryEmbedding(input.ref(), Shape(d, c.drop), MlaRope(c), false));
  return input;
}

namespace {
// A padded output's block of each value block (n, j, b): the first nv of the head's nqk.
Result<BlockIndex> OutputIndex(const LayerCtx& c, const Blocks& k) {
  return HeadIndex(c, k, kOutput, k.nv,
                   [&](int64_t n, int64_t j, int64_t b) { return (n * k.heads + j) * k.nqk + b; });
}
}  // namespace

Status MlaOutputUnpad(const LayerCtx& c, ConstRef padded, TensorRef out) {
  const Blocks k(c.d);
  PTDP_ASSIGN_OR_RETURN(const BlockIndex index, OutputIndex(c, k));
  return Take(c, out, padded, index, k.g);
}

Result<Tensor> MlaOutputPad(const LayerCtx& c, ConstRef out) {
  const Blocks k(c.d);
  PTDP_ASSIGN_OR_RETURN(Tensor padded, Tmp(c, c.d.N() * c.d.heads_local * c.d.D(), out.dtype));
  PTDP_RETURN_IF_ERROR(c.dev->ops()->Fill(padded.ref(), 0.0));
  PTDP_ASSIGN_OR_RETURN(const BlockIndex index, OutputIndex(c, k));
  PTDP_RETURN_IF_ERROR(Place(c, padded.ref(), out, index, k.g));
  return padded;
}

Status MlaQkvBackward(const LayerCtx& c, const LayerWeights& w, const LayerGrads& g, LayerStash* st,
                      Tensor dqkv, Tensor* dln) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const Blocks k(d);
  const int64_t N = d.N(), R = d.R(), h = d.h, hl = d.heads_local, dqk = d.D();
  const int64_t ql = d.mla_q_lora, kvl = d.mla_kv_lora, rope = d.mla_rope;
  const int64_t kv_width = hl * (dqk - rope + d.mla_v);
  const DType a = c.types.act;
  const ConstRef ln1_out = st->ln1_out.cref();
  // The input's gradient split back: the queries', kv_up's output's (each head's key part, then
  // its value part) and the rotated key's, summed over the rank's heads.
  PTDP_ASSIGN_OR_RETURN(Tensor dq, OutputGrad(c, N * hl * dqk));
  {
    PTDP_ASSIGN_OR_RETURN(const BlockIndex index,
                          HeadIndex(c, k, kInputQ, k.nqk, [&](int64_t n, int64_t j, int64_t b) {
                            return k.Input(n, j, 0, k.Turned(b));
                          }));
    PTDP_RETURN_IF_ERROR(Take(c, dq.ref(), dqkv.cref(), index, k.g));
  }
  if (c.arch.mla_softmax_factor != 1) {  // the queries' scaling (MlaUpProjForward)
    PTDP_RETURN_IF_ERROR(ops->Scale(dq.ref(), c.arch.mla_softmax_factor));
  }
  PTDP_ASSIGN_OR_RETURN(Tensor dkv, OutputGrad(c, N * kv_width));
  {
    PTDP_ASSIGN_OR_RETURN(
        const BlockIndex index,
        HeadIndex(c, k, kGradKv, k.nn + k.nv, [&](int64_t n, int64_t j, int64_t b) {
          return b < k.nn ? k.Input(n, j, 1, k.nr + b) : k.Input(n, j, 2, b - k.nn);
        }));
    PTDP_RETURN_IF_ERROR(Take(c, dkv.ref(), dqkv.cref(), index, k.g));
  }
  PTDP_ASSIGN_OR_RETURN(Tensor dpe, Tmp(c, N * rope, a));
  {
    PTDP_ASSIGN_OR_RETURN(Tensor per_head, Tmp(c, N * hl * rope, a));
    PTDP_ASSIGN_OR_RETURN(const BlockIndex take,
                          HeadIndex(c, k, kGradPe, k.nr, [&](int64_t n, int64_t j, int64_t b) {
                            return k.Input(n, j, 1, b);
                          }));
    PTDP_RETURN_IF_ERROR(Take(c, per_head.ref(), dqkv.cref(), take, k.g));
    PTDP_ASSIGN_OR_RETURN(
        const BlockIndex sum,
        HeadIndex(c, k, kSumPe, k.nr, [&](int64_t n, int64_t, int64_t b) { return n * k.nr + b; }));
    PTDP_RETURN_IF_ERROR(ops->Fill(dpe.ref(), 0.0));
    PTDP_RETURN_IF_ERROR(Place(c, dpe.ref(), per_head.cref(), sum, k.g));
  }
  dqkv.Reset();
  // The queries: the up projection's input gradient is the tensor group's partial sum.
  if (ql > 0) {
    PTDP_ASSIGN_OR_RETURN(*dln, Tmp(c, R * h, a));
    PTDP_ASSIGN_OR_RETURN(Tensor dlat, Tmp(c, N * ql, a));
    PTDP_RETURN_IF_ERROR(ops->LinearBackwardData(dlat.ref(), dq.cref(), w.q_up_w, N, ql, hl * dqk));
    {
      PTDP_ASSIGN_OR_RETURN(FullRows lat, GatherRows(c, st->mla_q_up_in.cref(), KeptTag(c)));
      PTDP_RETURN_IF_ERROR(WeightGrad(c, g.q_up_w, {}, &dq, lat.ref, N, ql, hl * dqk, &lat.owned));
    }
    PTDP_ASSIGN_OR_RETURN(dlat, SumRows(c, std::move(dlat)));
    PTDP_RETURN_IF_ERROR(LatentBackward(c, std::move(dlat), ln1_out, w.q_down_w, g.q_down_w,
                                        w.q_norm_w, g.q_norm_w, st->mla_q_in, st->mla_q_rstd, ql,
                                        true, dln->ref()));
  } else {
    PTDP_ASSIGN_OR_RETURN(Tensor part, Tmp(c, N * h, a));
    PTDP_RETURN_IF_ERROR(ops->LinearBackwardData(part.ref(), dq.cref(), w.q_up_w, N, h, hl * dqk));
    {
      PTDP_ASSIGN_OR_RETURN(FullRows x, GatherRows(c, ln1_out, KeptTag(c)));
      PTDP_RETURN_IF_ERROR(WeightGrad(c, g.q_up_w, {}, &dq, x.ref, N, h, hl * dqk, &x.owned));
    }
    PTDP_ASSIGN_OR_RETURN(*dln, SumRows(c, std::move(part)));
  }
  // The keys and values, and the rotated key's rows of kv_down.
  PTDP_ASSIGN_OR_RETURN(Tensor dlat, Tmp(c, N * kvl, a));
  PTDP_RETURN_IF_ERROR(
      ops->LinearBackwardData(dlat.ref(), dkv.cref(), w.kv_up_w, N, kvl, kv_width));
  {
    PTDP_ASSIGN_OR_RETURN(FullRows lat, GatherRows(c, st->mla_kv_up_in.cref(), KeptTag(c)));
    PTDP_RETURN_IF_ERROR(WeightGrad(c, g.kv_up_w, {}, &dkv, lat.ref, N, kvl, kv_width, &lat.owned));
  }
  PTDP_ASSIGN_OR_RETURN(dlat, SumRows(c, std::move(dlat)));
  PTDP_RETURN_IF_ERROR(LatentBackward(c, std::move(dlat), ln1_out, Rows(w.kv_down_w, 0, kvl, h),
                                      Rows(g.kv_down_w, 0, kvl, h), w.kv_norm_w, g.kv_norm_w,
                                      st->mla_kv_in, st->mla_kv_rstd, kvl, false, dln->ref()));
  PTDP_ASSIGN_OR_RETURN(dpe, SumRows(c, std::move(dpe)));
  return LatentBackward(c, std::move(dpe), ln1_out, Rows(w.kv_down_w, kvl, rope, h),
                        Rows(g.kv_down_w, kvl, rope, h), {}, {}, Tensor(), Tensor(), rope, false,
                        dln->ref());
}

const Tensor* MlaIndexCache::Find(int kind, const std::array<int64_t, 3>& shape) const {
  if (shape != shape_ || index_[size_t(kind)].empty()) return nullptr;
  return &index_[size_t(kind)];
}

const Tensor& MlaIndexCache::Keep(int kind, const std::array<int64_t, 3>& shape, Tensor index) {
  if (shape != shape_) {  // other shapes (none in a run): the old indices are of no use
    for (Tensor& t : index_) t.Reset();
    shape_ = shape;
  }
  index_[size_t(kind)] = std::move(index);
  return index_[size_t(kind)];
}

}  // namespace ptdp::runtime
