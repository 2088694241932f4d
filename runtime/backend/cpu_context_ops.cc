// CpuOps' context-parallel attention (runtime/backend/ops.h Context*): the reference kernels of
// kernels/reference/context_attention.cc, through the compute-type views of every CpuOps op.
#include "kernels/reference/ops.h"
#include "runtime/backend/cpu_ops.h"
#include "runtime/backend/cpu_views.h"

namespace ptdp::runtime {
namespace k = ::ptdp::kernels;
using cpu_views::Dispatch;
using cpu_views::In;
using cpu_views::Out;

namespace {

k::ContextAttentionDims Dims(const AttentionShape& a, const DropoutSpec& drop) {
  k::ContextAttentionDims d;
  d.b = a.b;
  d.s = a.s;
  d.h = a.heads_local;
  d.d = a.head_dim;
  d.group = a.group;
  d.cp = a.cp;
  d.rank = a.cp_rank;
  d.p = drop.p;
  d.key = drop.key;
  d.heads_total = a.heads_total;
  d.head_begin = a.head_begin;
  d.batch_begin = a.batch_begin;
  return d;
}

}  // namespace

Status CpuOps::ContextKvPack(TensorRef kv, ConstRef qkv, const AttentionShape& a) {
  return Dispatch(qkv.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> qi(qkv);
    Out<T> o(kv, false);
    k::ContextKvPack(o.get(), qi.get(), a.b * a.LocalSeq(), a.heads_local, a.head_dim, a.group);
    return Status::Ok();
  });
}

Status CpuOps::ContextKvUnpack(TensorRef dqkv, ConstRef dkv, const AttentionShape& a) {
  return Dispatch(dkv.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> di(dkv);
    Out<T> o(dqkv, true);
    k::ContextKvUnpack(o.get(), di.get(), a.b * a.LocalSeq(), a.heads_local, a.head_dim, a.group);
    return Status::Ok();
  });
}

Status CpuOps::ContextAttentionForward(TensorRef out, TensorRef lse, ConstRef qkv, ConstRef kv_all,
                                       const AttentionShape& a, const DropoutSpec& drop) {
  return Dispatch(qkv.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> qi(qkv), kvi(kv_all);
    Out<T> o(out, false), l(lse, false);
    k::ContextAttentionForward(o.get(), l.get(), qi.get(), kvi.get(), Dims(a, drop));
    return Status::Ok();
  });
}

Status CpuOps::ContextAttentionBackward(TensorRef dqkv, TensorRef dkv_src, ConstRef dout,
                                        ConstRef out, ConstRef qkv, ConstRef kv_src, ConstRef lse,
                                        const AttentionShape& a, int src, const DropoutSpec& drop) {
  return Dispatch(qkv.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> doi(dout), oi(out), qi(qkv), kvi(kv_src), li(lse);
    Out<T> dq(dqkv, true), dkv(dkv_src, false);
    k::ContextAttentionBackward(dq.get(), dkv.get(), doi.get(), oi.get(), qi.get(), kvi.get(),
                                li.get(), Dims(a, drop), src);
    return Status::Ok();
  });
}

}  // namespace ptdp::runtime
