#include "runtime/model/context_attention.h"

namespace ptdp::runtime {
namespace {

// One rank's keys and values: [b S][kv/t][2][D] (kv/t = a/t with multi-head attention).
int64_t KvElements(const AttentionShape& a) {
  return a.b * a.LocalSeq() * (a.heads_local / a.group) * 2 * a.head_dim;
}

}  // namespace

Status ContextGroupAttentionForward(const LayerCtx& c, const AttentionShape& a,
                                    const DropoutSpec& drop, ConstRef qkv, TensorRef out,
                                    TensorRef lse) {
  PTDP_CHECK_MSG(c.cp != nullptr && c.cp->size() == a.cp && c.cp->rank() == a.cp_rank,
                 "context attention: the layer's group is not the shape's");
  PTDP_CHECK_MSG(!lse.empty(),
                 "context attention: needs the fused stash (ParallelConfig::Validate)");
  Ops* ops = c.dev->ops();
  const int64_t unit = KvElements(a);
  PTDP_ASSIGN_OR_RETURN(Tensor kv_all,
                        Tensor::Make(c.dev, a.cp * unit, qkv.dtype, MemTag::kWorkspace));
  const TensorRef own = kv_all.slice(a.cp_rank * unit, unit);
  PTDP_RETURN_IF_ERROR(ops->ContextKvPack(own, qkv, a));
  PTDP_RETURN_IF_ERROR(c.cp->AllGather(own.data, kv_all.data(), unit, kv_all.dtype()));
  return ops->ContextAttentionForward(out, lse, qkv, kv_all.cref(), a, drop);
}

Status ContextGroupAttentionBackward(const LayerCtx& c, const AttentionShape& a,
                                     const DropoutSpec& drop, ConstRef dout, ConstRef out,
                                     ConstRef qkv, ConstRef lse, TensorRef dqkv) {
  PTDP_CHECK_MSG(c.cp != nullptr && c.cp->size() == a.cp && c.cp->rank() == a.cp_rank,
                 "context attention: the layer's group is not the shape's");
  Ops* ops = c.dev->ops();
  const int64_t unit = KvElements(a);
  PTDP_ASSIGN_OR_RETURN(Tensor kv, Tensor::Make(c.dev, unit, qkv.dtype, MemTag::kWorkspace));
  PTDP_ASSIGN_OR_RETURN(Tensor dkv, Tensor::Make(c.dev, unit, qkv.dtype, MemTag::kWorkspace));
  PTDP_RETURN_IF_ERROR(ops->Fill(dqkv, 0.0));  // the query slots accumulate over the sources
  for (int src = 0; src < a.cp; ++src) {
    if (src == a.cp_rank) PTDP_RETURN_IF_ERROR(ops->ContextKvPack(kv.ref(), qkv, a));
    PTDP_RETURN_IF_ERROR(c.cp->Broadcast(kv.data(), unit, kv.dtype(), src));
    PTDP_RETURN_IF_ERROR(ops->ContextAttentionBackward(dqkv, dkv.ref(), dout, out, qkv, kv.cref(),
                                                       lse, a, src, drop));
    PTDP_ASSIGN_OR_RETURN(std::unique_ptr<CommRequest> sum,
                          c.cp->ReduceSumAsync(dkv.data(), unit, dkv.dtype(), src));
    PTDP_RETURN_IF_ERROR(sum->Wait());
    if (src == a.cp_rank) PTDP_RETURN_IF_ERROR(ops->ContextKvUnpack(dqkv, dkv.cref(), a));
  }
  return Status::Ok();
}

}  // namespace ptdp::runtime
