// CpuOps' ops of Llama-style layers (runtime/backend/ops.h RmsNorm*, Swiglu*, RotaryEmbedding,
// QkNorm*): the reference kernels of kernels/reference/llama_ops.cc, through the compute-type views
// of every CpuOps op.
#include "kernels/reference/ops.h"
#include "runtime/backend/cpu_ops.h"
#include "runtime/backend/cpu_views.h"
#include "runtime/backend/rope_freqs.h"

namespace ptdp::runtime {
namespace k = ::ptdp::kernels;
using cpu_views::Dispatch;
using cpu_views::In;
using cpu_views::Out;

Status CpuOps::RmsNormForward(TensorRef out, TensorRef rstd, ConstRef x, ConstRef w, int64_t n,
                              int64_t c, double eps) {
  return Dispatch(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> xi(x), wi(w);
    Out<T> o(out, false), ro(rstd, false);
    k::RmsNormForward(o.get(), ro.get(), xi.get(), wi.get(), n, c, eps);
    return Status::Ok();
  });
}

Status CpuOps::RmsNormBackward(TensorRef dx, TensorRef dw, ConstRef dout, ConstRef x, ConstRef w,
                               ConstRef rstd, int64_t n, int64_t c) {
  return Dispatch(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> doi(dout), xi(x), wi(w), ri(rstd);
    Out<T> dxo(dx, false), dwo(dw, true);
    k::RmsNormBackward(dxo.get(), dwo.get(), doi.get(), xi.get(), wi.get(), ri.get(), n, c);
    return Status::Ok();
  });
}

Status CpuOps::SwigluForward(TensorRef out, ConstRef in, int64_t count) {
  return Dispatch(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> ii(in);
    Out<T> o(out, false);
    k::SwigluForward(o.get(), ii.get(), count);
    return Status::Ok();
  });
}

Status CpuOps::SwigluBackward(TensorRef din, ConstRef in, ConstRef dout, int64_t count) {
  return Dispatch(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> ii(in), di(dout);
    Out<T> o(din, false);
    k::SwigluBackward(o.get(), ii.get(), di.get(), count);
    return Status::Ok();
  });
}

Status CpuOps::SquaredReluForward(TensorRef out, ConstRef in, int64_t count) {
  return Dispatch(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> ii(in);
    Out<T> o(out, false);
    k::SquaredReluForward(o.get(), ii.get(), count);
    return Status::Ok();
  });
}

Status CpuOps::SquaredReluBackward(TensorRef din, ConstRef in, ConstRef dout, int64_t count) {
  return Dispatch(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> ii(in), di(dout);
    Out<T> o(din, false);
    k::SquaredReluBackward(o.get(), ii.get(), di.get(), count);
    return Status::Ok();
  });
}

Status CpuOps::RotaryEmbedding(TensorRef qkv, const AttentionShape& a, const RopeSpec& rope,
                               bool inverse) {
  k::RotaryDims r;
  r.b = a.b;
  r.s = a.s;
  r.h = a.heads_local;
  r.d = a.head_dim;
  r.group = a.group;
  r.cp = a.cp;
  r.rank = a.cp_rank;
  r.rope = RopeFreqsOf(rope);
  return Dispatch(qkv.dtype, [&](auto tag) {
    using T = decltype(tag);
    Out<T> o(qkv, true);
    k::RotaryEmbedding(o.get(), r, inverse);
    return Status::Ok();
  });
}

Status CpuOps::QkNormForward(TensorRef qkv, TensorRef qk_in, TensorRef rstd, ConstRef q_w,
                             ConstRef k_w, const AttentionShape& a, double eps) {
  const k::QkvLayout row{a.heads_local, a.head_dim, a.group};
  return Dispatch(qkv.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> qi(q_w), ki(k_w);
    Out<T> o(qkv, true), saved(qk_in, false), ro(rstd, false);
    k::QkNormForward(o.get(), saved.get(), ro.get(), qi.get(), ki.get(), a.b * a.LocalSeq(), row,
                     eps);
    return Status::Ok();
  });
}

Status CpuOps::QkNormBackward(TensorRef dqkv, TensorRef dq_w, TensorRef dk_w, ConstRef qk_in,
                              ConstRef rstd, ConstRef q_w, ConstRef k_w, const AttentionShape& a) {
  const k::QkvLayout row{a.heads_local, a.head_dim, a.group};
  return Dispatch(dqkv.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> si(qk_in), ri(rstd), qi(q_w), ki(k_w);
    Out<T> o(dqkv, true), dqo(dq_w, true), dko(dk_w, true);
    k::QkNormBackward(o.get(), dqo.get(), dko.get(), si.get(), ri.get(), qi.get(), ki.get(),
                      a.b * a.LocalSeq(), row);
    return Status::Ok();
  });
}

}  // namespace ptdp::runtime
