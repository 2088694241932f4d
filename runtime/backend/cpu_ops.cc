#include "runtime/backend/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/reference/context_chunks.h"
#include "kernels/reference/counter_rng.h"
#include "kernels/reference/ops.h"
#include "runtime/backend/cpu_views.h"
#include "runtime/backend/half.h"

namespace ptdp::runtime {
namespace k = ::ptdp::kernels;
using cpu_views::Dispatch;
using cpu_views::In;
using cpu_views::Out;
namespace {

const int32_t* I32(ConstRef r) {
  PTDP_CHECK_MSG(r.dtype == DType::kI32, "cpu ops: token ids must be i32");
  return static_cast<const int32_t*>(r.data);
}
double* Scalar(TensorRef r) {
  PTDP_CHECK_MSG(r.dtype == DType::kFp64 && r.count >= 1, "cpu ops: device scalars are fp64");
  return static_cast<double*>(r.data);
}

// The keep-scale of dropout in T (what kernels/reference's float masks hold).
template <typename T>
T KeepScale(double p) {
  return static_cast<T>(1.0 / (1.0 - p));
}

// mask[i] = 1 when element first + i is kept.
// Run by run (ForEachDropoutRun): under context parallelism the local rows are two chunks of each
// sequence.
void WriteHiddenMask(uint8_t* mask, int64_t count, const DropoutSpec& drop) {
  const Status st = ForEachDropoutRun(drop, count, [&](int64_t at, int64_t n, uint64_t first) {
    k::rng::ForEachDropoutKeep(drop.key, first, n, static_cast<float>(drop.p),
                               [mask, at](int64_t i, bool kept) { mask[at + i] = kept ? 1 : 0; });
    return Status::Ok();
  });
  PTDP_CHECK_MSG(st.ok(), st.ToString());
}

// The attention mask [b][a/t][s][s] at global index (((seq) * heads + head) * s + i) * s + j.
void WriteAttentionMask(uint8_t* mask, const AttentionShape& a, const DropoutSpec& drop) {
  const int64_t ss = a.s * a.s;
  for (int64_t bi = 0; bi < a.b; ++bi) {
    for (int64_t hh = 0; hh < a.heads_local; ++hh) {
      DropoutSpec at = drop;
      at.first =
          static_cast<uint64_t>(((a.batch_begin + bi) * a.heads_total + a.head_begin + hh) * ss);
      WriteHiddenMask(mask + (bi * a.heads_local + hh) * ss, ss, at);
    }
  }
}

// The reference kernels' mask values (0 or 1/(1-p)) from a stored u8 mask.
template <typename T>
std::vector<T> MaskValues(ConstRef mask, double p) {
  std::vector<T> out(static_cast<size_t>(mask.count));
  const auto* m = static_cast<const uint8_t*>(mask.data);
  const T keep = KeepScale<T>(p);
  for (int64_t i = 0; i < mask.count; ++i) out[static_cast<size_t>(i)] = m[i] ? keep : T(0);
  return out;
}

}  // namespace

Status CpuOps::LayerNormForward(TensorRef out, TensorRef mean, TensorRef rstd, ConstRef x,
                                ConstRef w, ConstRef b, int64_t n, int64_t c,
                                double weight_offset) {
  return Dispatch(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> xi(x), wi(w), bi(b);
    Out<T> o(out, false), mo(mean, false), ro(rstd, false);
    k::LayerNormForward(o.get(), mo.get(), ro.get(), xi.get(), wi.get(), bi.get(), n, c,
                        weight_offset);
    return Status::Ok();
  });
}

Status CpuOps::LayerNormBackward(TensorRef dx, TensorRef dw, TensorRef db, ConstRef dout,
                                 ConstRef x, ConstRef w, ConstRef mean, ConstRef rstd, int64_t n,
                                 int64_t c, bool accumulate_dx, double weight_offset) {
  return Dispatch(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> doi(dout), xi(x), wi(w), mi(mean), ri(rstd);
    Out<T> dxo(dx, accumulate_dx), dwo(dw, true), dbo(db, true);
    if (!accumulate_dx) {
      k::LayerNormBackward(dxo.get(), dwo.get(), dbo.get(), doi.get(), xi.get(), wi.get(), mi.get(),
                           ri.get(), n, c, weight_offset);
      return Status::Ok();
    }
    std::vector<T> part(static_cast<size_t>(n * c));
    k::LayerNormBackward(part.data(), dwo.get(), dbo.get(), doi.get(), xi.get(), wi.get(), mi.get(),
                         ri.get(), n, c, weight_offset);
    k::Accumulate(dxo.get(), part.data(), n * c);
    return Status::Ok();
  });
}

Status CpuOps::LinearForward(TensorRef out, TensorRef gelu_out, ConstRef x, ConstRef w,
                             ConstRef bias, int64_t n, int64_t c, int64_t oc) {
  return Dispatch(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> xi(x), wi(w), bi(bias);
    Out<T> o(out, false);
    k::MatmulForward(o.get(), xi.get(), wi.get(), bi.get(), n, c, oc);
    if (!gelu_out.empty()) {
      Out<T> g(gelu_out, false);
      k::GeluForward(g.get(), o.get(), n * oc);
    }
    return Status::Ok();
  });
}

Status CpuOps::LinearBackwardData(TensorRef dx, ConstRef dout, ConstRef w, int64_t n, int64_t c,
                                  int64_t oc) {
  return Dispatch(dout.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> doi(dout), wi(w);
    Out<T> dxo(dx, false);
    k::MatmulBackward<T>(dxo.get(), nullptr, nullptr, doi.get(), nullptr, wi.get(), n, c, oc);
    return Status::Ok();
  });
}

Status CpuOps::LinearBackwardWeight(TensorRef dw, TensorRef dbias, ConstRef dout, ConstRef x,
                                    int64_t n, int64_t c, int64_t oc) {
  return Dispatch(dout.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> doi(dout), xi(x);
    Out<T> dwo(dw, true), dbo(dbias, true);
    k::MatmulBackward<T>(nullptr, dwo.get(), dbo.get(), doi.get(), xi.get(), nullptr, n, c, oc);
    return Status::Ok();
  });
}

Status CpuOps::GeluBackward(TensorRef dpre, ConstRef pre, ConstRef dgelu, int64_t count) {
  return Dispatch(pre.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> pi(pre), gi(dgelu);
    Out<T> o(dpre, false);
    k::GeluBackward(o.get(), pi.get(), gi.get(), count);
    return Status::Ok();
  });
}

Status CpuOps::BiasDropoutResidual(TensorRef out, TensorRef mask, ConstRef x, ConstRef bias,
                                   ConstRef residual, int64_t n, int64_t c,
                                   const DropoutSpec& drop) {
  if (drop.p > 0) WriteHiddenMask(static_cast<uint8_t*>(mask.data), n * c, drop);
  return Dispatch(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> xi(x), bi(bias), ri(residual);
    Out<T> o(out, false);
    const T keep = KeepScale<T>(drop.p);
    const auto* m = static_cast<const uint8_t*>(mask.data);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < c; ++j) {
        const int64_t i = r * c + j;
        T v = bi.get() ? T(xi.get()[i] + bi.get()[j]) : xi.get()[i];
        if (drop.p > 0) v = m[i] ? T(v * keep) : T(0);
        o.get()[i] = ri.get()[i] + v;
      }
    }
    return Status::Ok();
  });
}

Status CpuOps::DropoutBackward(TensorRef dx, TensorRef dbias, ConstRef dy, ConstRef mask, int64_t n,
                               int64_t c, double p) {
  return Dispatch(dy.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> di(dy);
    Out<T> o(dx, false);
    const T keep = KeepScale<T>(p);
    const auto* m = static_cast<const uint8_t*>(mask.data);
    for (int64_t i = 0; i < n * c; ++i) {
      o.get()[i] = p > 0 ? (m[i] ? T(di.get()[i] * keep) : T(0)) : di.get()[i];
    }
    if (!dbias.empty()) {
      Out<T> db(dbias, true);
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t j = 0; j < c; ++j) db.get()[j] += o.get()[r * c + j];
      }
    }
    return Status::Ok();
  });
}

Status CpuOps::Add(TensorRef out, ConstRef a, ConstRef b) {
  return Dispatch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> ai(a), bi(b);
    Out<T> o(out, false);
    k::Add(o.get(), ai.get(), bi.get(), out.count);
    return Status::Ok();
  });
}

namespace {

// The fused form (AttentionStash::fused): the probabilities and the expanded mask are the op's
// scratch, like a fused kernel's tiles; only out and lse outlive it. The mask is regenerated from
// the counter generator, so the forward and the backward draw the same one.
template <typename T>
std::vector<T> RegeneratedMask(const AttentionShape& a, double p, uint64_t key) {
  if (p <= 0) return {};
  std::vector<uint8_t> bits(static_cast<size_t>(a.b * a.heads_local * a.s * a.s));
  WriteAttentionMask(bits.data(), a, DropoutSpec{p, key, 0});
  return MaskValues<T>(ConstRef(bits.data(), DType::kU8, int64_t(bits.size())), p);
}

template <typename T>
Status FusedAttentionForward(TensorRef out, const AttentionStash& stash, ConstRef qkv,
                             const AttentionShape& a, const DropoutSpec& drop) {
  In<T> qi(qkv);
  Out<T> o(out, false), lse(stash.lse, false);
  std::vector<T> probs(static_cast<size_t>(a.b * a.heads_local * a.s * a.s));
  const std::vector<T> mask = RegeneratedMask<T>(a, drop.p, drop.key);
  k::AttentionForward(o.get(), probs.data(), qi.get(), mask.empty() ? nullptr : mask.data(), a.b,
                      a.s, a.heads_local, a.head_dim, a.group, a.window);
  k::AttentionLogSumExp(lse.get(), qi.get(), a.b, a.s, a.heads_local, a.head_dim, a.group,
                        a.window);
  return Status::Ok();
}

template <typename T>
Status FusedAttentionBackward(TensorRef dqkv, ConstRef dout, ConstRef qkv,
                              const AttentionStash& stash, const AttentionShape& a, double p) {
  In<T> doi(dout), qi(qkv), lse(stash.lse);
  Out<T> o(dqkv, false);
  std::vector<T> probs(static_cast<size_t>(a.b * a.heads_local * a.s * a.s));
  k::AttentionProbsFromLse(probs.data(), qi.get(), lse.get(), a.b, a.s, a.heads_local, a.head_dim,
                           a.group, a.window);
  const std::vector<T> mask = RegeneratedMask<T>(a, p, stash.dropout_key);
  k::AttentionBackward(o.get(), doi.get(), qi.get(), probs.data(),
                       mask.empty() ? nullptr : mask.data(), a.b, a.s, a.heads_local, a.head_dim,
                       a.group);
  return Status::Ok();
}

}  // namespace

Status CpuOps::AttentionForward(TensorRef out, AttentionStash* stash, ConstRef qkv,
                                const AttentionShape& a, const DropoutSpec& drop) {
  return Dispatch(qkv.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (stash->fused()) return FusedAttentionForward<T>(out, *stash, qkv, a, drop);
    In<T> qi(qkv);
    Out<T> o(out, false), probs(stash->probs, false);
    std::vector<T> mask;
    if (drop.p > 0) {
      WriteAttentionMask(static_cast<uint8_t*>(stash->mask.data), a, drop);
      mask = MaskValues<T>(stash->mask, drop.p);
    }
    k::AttentionForward(o.get(), probs.get(), qi.get(), drop.p > 0 ? mask.data() : nullptr, a.b,
                        a.s, a.heads_local, a.head_dim, a.group, a.window);
    if (drop.p > 0) {
      Out<T> dropped(stash->dropped, false);
      k::Mul(dropped.get(), probs.get(), mask.data(), stash->dropped.count);
    }
    return Status::Ok();
  });
}

Status CpuOps::AttentionBackward(TensorRef dqkv, ConstRef dout, ConstRef qkv,
                                 const AttentionStash& stash, const AttentionShape& a, double p) {
  return Dispatch(qkv.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (stash.fused()) return FusedAttentionBackward<T>(dqkv, dout, qkv, stash, a, p);
    In<T> doi(dout), qi(qkv), pi(stash.probs);
    Out<T> o(dqkv, false);
    std::vector<T> mask;
    if (p > 0) mask = MaskValues<T>(stash.mask, p);
    k::AttentionBackward(o.get(), doi.get(), qi.get(), pi.get(), p > 0 ? mask.data() : nullptr, a.b,
                         a.s, a.heads_local, a.head_dim, a.group);
    return Status::Ok();
  });
}

Status CpuOps::EmbeddingForward(TensorRef out, ConstRef tokens, ConstRef wte, ConstRef wpe,
                                int64_t b, int64_t s, int64_t c, int64_t vocab_begin,
                                int64_t vocab_end) {
  return Dispatch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> te(wte), pe(wpe);
    Out<T> o(out, false);
    k::EmbeddingForward(o.get(), I32(tokens), te.get(), pe.get(), b, s, c, vocab_begin, vocab_end);
    return Status::Ok();
  });
}

Status CpuOps::EmbeddingBackward(TensorRef dwte, TensorRef dwpe, ConstRef dout, ConstRef tokens,
                                 int64_t b, int64_t s, int64_t c, int64_t vocab_begin,
                                 int64_t vocab_end) {
  return Dispatch(dout.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> di(dout);
    Out<T> te(dwte, true), pe(dwpe, true);
    k::EmbeddingBackward(te.get(), pe.get(), di.get(), I32(tokens), b, s, c, vocab_begin,
                         vocab_end);
    return Status::Ok();
  });
}

Status CpuOps::Dropout(TensorRef x, TensorRef mask, const DropoutSpec& drop) {
  if (drop.p <= 0) return Status::Ok();
  WriteHiddenMask(static_cast<uint8_t*>(mask.data), x.count, drop);
  return Dispatch(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    Out<T> o(x, true);
    const T keep = KeepScale<T>(drop.p);
    const auto* m = static_cast<const uint8_t*>(mask.data);
    for (int64_t i = 0; i < x.count; ++i) o.get()[i] = m[i] ? T(o.get()[i] * keep) : T(0);
    return Status::Ok();
  });
}

Status CpuOps::CrossEntropyLocalStats(TensorRef row_max, TensorRef sums, ConstRef logits,
                                      ConstRef targets, const VocabShard& v) {
  return Dispatch(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> li(logits);
    Out<T> mo(row_max, false), so(sums, false);
    k::CrossEntropyLocalStats(mo.get(), so.get(), so.get() + v.rows, li.get(), I32(targets), v.rows,
                              v.v_local, v.begin, v.real);
    return Status::Ok();
  });
}

Status CpuOps::CrossEntropyRescaleSums(TensorRef sums, ConstRef local_max, ConstRef global_max,
                                       const VocabShard& v) {
  return Dispatch(sums.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> li(local_max), gi(global_max);
    Out<T> so(sums, true);
    k::CrossEntropyRescaleSums(so.get(), li.get(), gi.get(), v.rows);
    return Status::Ok();
  });
}

Status CpuOps::CrossEntropyLoss(TensorRef row_sum, TensorRef loss_sum, ConstRef sums,
                                ConstRef row_max, ConstRef targets, const VocabShard& v) {
  return Dispatch(sums.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> si(sums), mi(row_max);
    Out<T> ro(row_sum, false);
    const int32_t* target = I32(targets);
    double total = 0;
    for (int64_t n = 0; n < v.rows; ++n) {
      ro.get()[n] = si.get()[n];
      if (target[n] < 0) continue;  // no target: out of the loss
      const T loss = std::log(si.get()[n]) + mi.get()[n] - si.get()[v.rows + n];
      total += static_cast<double>(loss);
    }
    *Scalar(loss_sum) += total;
    return Status::Ok();
  });
}

Status CpuOps::CrossEntropyBackward(TensorRef dlogits, ConstRef logits, ConstRef row_max,
                                    ConstRef row_sum, ConstRef targets, double dloss,
                                    const VocabShard& v) {
  return Dispatch(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> li(logits), mi(row_max), si(row_sum);
    Out<T> o(dlogits, false);
    // Per row: dloss, or 0 for a row without a target (out of the loss).
    const int32_t* target = I32(targets);
    std::vector<T> dl(static_cast<size_t>(v.rows));
    for (int64_t n = 0; n < v.rows; ++n) dl[size_t(n)] = target[n] < 0 ? T(0) : T(dloss);
    k::CrossEntropyBackward(o.get(), li.get(), mi.get(), si.get(), I32(targets), dl.data(), v.rows,
                            v.v_local, v.begin, v.real);
    return Status::Ok();
  });
}

Status CpuOps::AdamW(TensorRef param, TensorRef compute_copy, ConstRef grad, TensorRef m,
                     TensorRef v, const AdamWHyper& h) {
  return Dispatch(param.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> gi(grad);
    Out<T> po(param, true), mo(m, true), vo(v, true);
    const T* g = gi.get();
    std::vector<T> scaled;  // as Scale then AdamW: the same roundings
    if (h.grad_scale != 1.0) {
      scaled.assign(g, g + grad.count);
      k::Scale(scaled.data(), h.grad_scale, grad.count);
      g = scaled.data();
    }
    k::AdamWUpdate(po.get(), g, mo.get(), vo.get(), param.count, h.lr, h.beta1, h.beta2, h.eps,
                   h.weight_decay, h.step);
    if constexpr (std::is_same_v<T, float>) {
      if (!compute_copy.empty())
        half::Narrow(compute_copy.data, po.get(), param.count, compute_copy.dtype);
    }
    return Status::Ok();
  });
}

Status CpuOps::SumSquares(TensorRef acc, ConstRef x) {
  return Dispatch(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> xi(x);
    *Scalar(acc) += k::SumSquares(xi.get(), x.count);
    return Status::Ok();
  });
}

Status CpuOps::Scale(TensorRef x, double factor) {
  return Dispatch(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    Out<T> o(x, true);
    k::Scale(o.get(), factor, x.count);
    return Status::Ok();
  });
}

Status CpuOps::FlagNonFinite(TensorRef flag, ConstRef x) {
  return Dispatch(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> xi(x);
    for (int64_t i = 0; i < x.count; ++i) {
      if (!std::isfinite(xi.get()[i])) {
        *Scalar(flag) = 1.0;
        break;
      }
    }
    return Status::Ok();
  });
}

Status CpuOps::Cast(TensorRef dst, ConstRef src) {
  if (dst.count != src.count) return Status::Internal("cpu ops: cast between different counts");
  if (dst.dtype == src.dtype) {
    std::memmove(dst.data, src.data, static_cast<size_t>(src.count * DTypeBytes(src.dtype)));
    return Status::Ok();
  }
  if (src.dtype == DType::kFp64 || dst.dtype == DType::kFp64) {
    return Status::Internal("cpu ops: casts to or from fp64 are not supported");
  }
  In<float> si(src);
  Out<float> o(dst, false);
  std::memcpy(o.get(), si.get(), static_cast<size_t>(src.count) * sizeof(float));
  return Status::Ok();
}

Status CpuOps::Fill(TensorRef dst, double value) {
  if (dst.dtype == DType::kU8) {
    std::memset(dst.data, static_cast<int>(value), static_cast<size_t>(dst.count));
    return Status::Ok();
  }
  if (dst.dtype == DType::kI32) {
    auto* p = static_cast<int32_t*>(dst.data);
    for (int64_t i = 0; i < dst.count; ++i) p[i] = static_cast<int32_t>(value);
    return Status::Ok();
  }
  return Dispatch(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    Out<T> o(dst, false);
    for (int64_t i = 0; i < dst.count; ++i) o.get()[i] = static_cast<T>(value);
    return Status::Ok();
  });
}

Status CpuOps::FillNormal(TensorRef out, uint64_t key, int64_t cols, int64_t global_cols,
                          int64_t col0, int64_t row0, double mean, double stddev) {
  return Dispatch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    Out<T> o(out, false);
    for (int64_t i = 0; i < out.count; ++i) {
      const int64_t global = (row0 + i / cols) * global_cols + col0 + i % cols;
      o.get()[i] =
          static_cast<T>(mean + stddev * k::NormalFromCounter(key, static_cast<uint64_t>(global)));
    }
    return Status::Ok();
  });
}

}  // namespace ptdp::runtime
