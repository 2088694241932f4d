// CpuOps' ops of a mixture-of-experts layer (runtime/backend/ops.h Moe*): the reference kernels of
// kernels/reference/moe.h through the compute-type views (the index tensors are int32 as they
// are).
#include "kernels/reference/moe.h"
#include "runtime/backend/cpu_ops.h"
#include "runtime/backend/cpu_views.h"

namespace ptdp::runtime {
namespace k = ::ptdp::kernels;
using cpu_views::Dispatch;
using cpu_views::In;
using cpu_views::Out;

namespace {

Status CheckMoeIndex(ConstRef r, int64_t n, const char* what) {
  if (r.dtype != DType::kI32 || r.count < n) {
    return Status::Internal(std::string("cpu ops: ") + what + " must be i32 of at least " +
                            std::to_string(n));
  }
  return Status::Ok();
}
const int32_t* MoeIndexData(ConstRef r) {
  return static_cast<const int32_t*>(r.data);
}
k::MoeAuxRule AuxRuleOf(const MoeAuxGrouping& g) {
  return {g.group_rows, g.first_row, g.sigmoid};
}
template <typename T>
k::MoeRouterRule<T> RuleOf(const MoeRouting& r, const T* bias) {
  return {r.groups, r.group_topk, r.pre_softmax, r.sigmoid, r.scale, bias};
}

}  // namespace

Status CpuOps::MoeRouterTopK(TensorRef probs, TensorRef index, ConstRef logits, int64_t n,
                             const MoeRouting& r) {
  if (index.dtype != DType::kI32) return Status::Internal("cpu ops: router index must be i32");
  return Dispatch(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> li(logits);
    Out<T> po(probs, false);
    In<T> bi(r.bias);
    k::MoeRouterTopK(po.get(), static_cast<int32_t*>(index.data), li.get(), n, r.experts, r.k,
                     RuleOf<T>(r, r.bias.count > 0 ? bi.get() : nullptr));
    return Status::Ok();
  });
}

Status CpuOps::MoeRouterTopKBackward(TensorRef dlogits, ConstRef dprobs, ConstRef probs,
                                     ConstRef index, ConstRef logits, int64_t n,
                                     const MoeRouting& r) {
  PTDP_RETURN_IF_ERROR(CheckMoeIndex(index, n * r.k, "router index"));
  return Dispatch(probs.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> di(dprobs), pi(probs), li(logits);
    Out<T> o(dlogits, false);
    k::MoeRouterTopKBackward(o.get(), di.get(), pi.get(), MoeIndexData(index), li.get(), n,
                             r.experts, r.k, RuleOf<T>(r, nullptr));
    return Status::Ok();
  });
}

Status CpuOps::MoeAuxLossBackward(TensorRef dlogits, ConstRef logits, ConstRef counts, double scale,
                                  int64_t n, int64_t experts, const MoeAuxGrouping& g) {
  return Dispatch(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> li(logits), ci(counts);
    Out<T> o(dlogits, true);
    k::MoeAuxLossBackward(o.get(), li.get(), ci.get(), scale, n, experts, AuxRuleOf(g));
    return Status::Ok();
  });
}

Status CpuOps::MoeZLossBackward(TensorRef dlogits, TensorRef sum_sq, ConstRef logits, double scale,
                                int64_t n, int64_t experts) {
  return Dispatch(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> li(logits);
    Out<T> o(dlogits, true), z(sum_sq, false);
    k::MoeZLossBackward(o.get(), z.get(), li.get(), scale, n, experts);
    return Status::Ok();
  });
}

Status CpuOps::MoeRouterProbSums(TensorRef out, ConstRef logits, int64_t n, int64_t experts,
                                 const MoeAuxGrouping& g) {
  return Dispatch(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> li(logits);
    Out<T> o(out, false);
    k::MoeRouterProbSums(o.get(), li.get(), n, experts, out.count / experts, AuxRuleOf(g));
    return Status::Ok();
  });
}

Status CpuOps::MoePermuteRows(TensorRef out, ConstRef x, ConstRef rows, int64_t n, int64_t width) {
  PTDP_RETURN_IF_ERROR(CheckMoeIndex(rows, n, "rows"));
  return Dispatch(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> xi(x);
    Out<T> o(out, false);
    k::MoePermuteRows(o.get(), xi.get(), MoeIndexData(rows), n, width);
    return Status::Ok();
  });
}

Status CpuOps::MoeUnpermuteAddRows(TensorRef out, ConstRef y, ConstRef rows, int64_t n,
                                   int64_t width) {
  PTDP_RETURN_IF_ERROR(CheckMoeIndex(rows, n, "rows"));
  return Dispatch(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> yi(y);
    Out<T> o(out, true);
    k::MoeUnpermuteAddRows(o.get(), yi.get(), MoeIndexData(rows), n, width);
    return Status::Ok();
  });
}

Status CpuOps::MoeScaleRows(TensorRef out, ConstRef in, ConstRef weight, ConstRef slot, int64_t n,
                            int64_t width) {
  PTDP_RETURN_IF_ERROR(CheckMoeIndex(slot, n, "slot"));
  return Dispatch(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> ii(in), wi(weight);
    Out<T> o(out, false);
    k::MoeScaleRows(o.get(), ii.get(), wi.get(), MoeIndexData(slot), n, width);
    return Status::Ok();
  });
}

Status CpuOps::MoeRowDots(TensorRef out, ConstRef a, ConstRef b, ConstRef slot, int64_t n,
                          int64_t width) {
  PTDP_RETURN_IF_ERROR(CheckMoeIndex(slot, n, "slot"));
  return Dispatch(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> ai(a), bi(b);
    Out<T> o(out, true);
    k::MoeRowDots(o.get(), ai.get(), bi.get(), MoeIndexData(slot), n, width);
    return Status::Ok();
  });
}

Status CpuOps::MoeGateSigmoid(TensorRef gate, ConstRef logit, int64_t n) {
  return Dispatch(logit.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> li(logit);
    Out<T> o(gate, false);
    k::MoeGateSigmoid(o.get(), li.get(), n);
    return Status::Ok();
  });
}

Status CpuOps::MoeGateSigmoidBackward(TensorRef dlogit, ConstRef gate, ConstRef dgate, int64_t n) {
  return Dispatch(dlogit.dtype, [&](auto tag) {
    using T = decltype(tag);
    In<T> gi(gate), di(dgate);
    Out<T> o(dlogit, false);
    k::MoeGateSigmoidBackward(o.get(), gi.get(), di.get(), n);
    return Status::Ok();
  });
}

}  // namespace ptdp::runtime
