// CudaOps' ops of a mixture-of-experts layer (runtime/backend/ops.h Moe*): kernels/cuda/moe.cu on
// the compute stream. The router's logits, probabilities and gradients are the trainer's wide
// type, fp32 on this backend; the rows moved are the compute type (fp32 or bf16), or fp32 for the
// probabilities the expert-parallel exchange carries as rows of one.
#include "kernels/cuda/ops.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_ops_util.h"

namespace ptdp::runtime::cuda {
namespace ck = ::ptdp::cuda_kernels;
using namespace detail;  // NOLINT: the helpers of cuda_ops_util.h

namespace {

ck::MoeRouterShape ShapeOf(const MoeRouting& r) {
  return {r.experts,     r.k,
          r.groups,      r.group_topk,
          r.pre_softmax, r.sigmoid,
          r.scale,       r.bias.count > 0 ? static_cast<const float*>(r.bias.data) : nullptr};
}

Status CheckIndex(ConstRef r, int64_t n, const char* what) {
  if (r.dtype != DType::kI32 || r.count < n) {
    return Status::Internal(std::string("cuda ops: ") + what + " must be i32 of at least " +
                            std::to_string(n));
  }
  return Status::Ok();
}

}  // namespace

Status CudaOps::MoeRouterTopK(TensorRef probs, TensorRef index, ConstRef logits, int64_t n,
                              const MoeRouting& routing) {
  return Guarded([&] {
    ck::MoeRouterTopK(P<float>(probs), P<int32_t>(index), P<float>(logits), n, ShapeOf(routing),
                      stream_);
    return Status::Ok();
  });
}

Status CudaOps::MoeRouterTopKBackward(TensorRef dlogits, ConstRef dprobs, ConstRef probs,
                                      ConstRef index, ConstRef logits, int64_t n,
                                      const MoeRouting& routing) {
  PTDP_RETURN_IF_ERROR(CheckIndex(index, n * routing.k, "router index"));
  return Guarded([&] {
    ck::MoeRouterTopKBackward(P<float>(dlogits), P<float>(dprobs), P<float>(probs),
                              P<int32_t>(index), P<float>(logits), n, ShapeOf(routing), stream_);
    return Status::Ok();
  });
}

Status CudaOps::MoeAuxLossBackward(TensorRef dlogits, ConstRef logits, ConstRef counts,
                                   double scale, int64_t n, int64_t experts,
                                   const MoeAuxGrouping& g) {
  return Guarded([&] {
    ck::MoeAuxLossBackward(P<float>(dlogits), P<float>(logits), P<float>(counts), scale, n, experts,
                           {g.group_rows, g.first_row, g.sigmoid}, stream_);
    return Status::Ok();
  });
}

Status CudaOps::MoeZLossBackward(TensorRef dlogits, TensorRef sum_sq, ConstRef logits, double scale,
                                 int64_t n, int64_t experts) {
  PTDP_ASSIGN_OR_RETURN(void* rows, Scratch(n * static_cast<int64_t>(sizeof(double))));
  return Guarded([&] {
    ck::MoeZLossBackward(P<float>(dlogits), P<float>(sum_sq), static_cast<double*>(rows),
                         P<float>(logits), scale, n, experts, stream_);
    return Status::Ok();
  });
}

Status CudaOps::MoeRouterProbSums(TensorRef out, ConstRef logits, int64_t n, int64_t experts,
                                  const MoeAuxGrouping& g) {
  PTDP_ASSIGN_OR_RETURN(void* stats, Scratch(ck::MoeProbSumsScratchBytes(n)));
  return Guarded([&] {
    ck::MoeRouterProbSums(P<float>(out), stats, P<float>(logits), n, experts, out.count / experts,
                          {g.group_rows, g.first_row, g.sigmoid}, stream_);
    return Status::Ok();
  });
}

Status CudaOps::MoePermuteRows(TensorRef out, ConstRef x, ConstRef rows, int64_t n, int64_t width) {
  PTDP_RETURN_IF_ERROR(CheckIndex(rows, n, "rows"));
  return ForCompute(x.dtype, "MoePermuteRows", [&](auto tag) {
    using T = decltype(tag);
    ck::MoePermuteRows<T>(P<T>(out), P<T>(x), P<int32_t>(rows), n, width, stream_);
    return Status::Ok();
  });
}

// The destination's rows are out.count / width (the tokens of the combine, the slots of the
// probabilities' gradients).
Status CudaOps::MoeUnpermuteAddRows(TensorRef out, ConstRef y, ConstRef rows, int64_t n,
                                    int64_t width) {
  PTDP_RETURN_IF_ERROR(CheckIndex(rows, n, "rows"));
  if (width <= 0 || out.count % width != 0) {
    return Status::Internal("cuda ops: MoeUnpermuteAddRows: " + std::to_string(out.count) +
                            " elements are not rows of " + std::to_string(width));
  }
  const int64_t out_rows = out.count / width;
  PTDP_ASSIGN_OR_RETURN(void* scratch, Scratch(ck::MoeUnpermuteScratchBytes(n, out_rows)));
  return ForCompute(y.dtype, "MoeUnpermuteAddRows", [&](auto tag) {
    using T = decltype(tag);
    ck::MoeUnpermuteAddRows<T>(P<T>(out), P<T>(y), P<int32_t>(rows), n, out_rows, width, scratch,
                               stream_);
    return Status::Ok();
  });
}

Status CudaOps::MoeScaleRows(TensorRef out, ConstRef in, ConstRef weight, ConstRef slot, int64_t n,
                             int64_t width) {
  PTDP_RETURN_IF_ERROR(CheckIndex(slot, n, "slot"));
  return ForCompute(in.dtype, "MoeScaleRows", [&](auto tag) {
    using T = decltype(tag);
    ck::MoeScaleRows<T>(P<T>(out), P<T>(in), P<float>(weight), P<int32_t>(slot), n, width, stream_);
    return Status::Ok();
  });
}

Status CudaOps::MoeRowDots(TensorRef out, ConstRef a, ConstRef b, ConstRef slot, int64_t n,
                           int64_t width) {
  PTDP_RETURN_IF_ERROR(CheckIndex(slot, n, "slot"));
  return ForCompute(a.dtype, "MoeRowDots", [&](auto tag) {
    using T = decltype(tag);
    ck::MoeRowDots<T>(P<float>(out), P<T>(a), P<T>(b), P<int32_t>(slot), n, width, stream_);
    return Status::Ok();
  });
}

Status CudaOps::MoeGateSigmoid(TensorRef gate, ConstRef logit, int64_t n) {
  return ForCompute(logit.dtype, "MoeGateSigmoid", [&](auto tag) {
    using T = decltype(tag);
    ck::MoeGateSigmoid<T>(P<float>(gate), P<T>(logit), n, stream_);
    return Status::Ok();
  });
}

Status CudaOps::MoeGateSigmoidBackward(TensorRef dlogit, ConstRef gate, ConstRef dgate, int64_t n) {
  return ForCompute(dlogit.dtype, "MoeGateSigmoidBackward", [&](auto tag) {
    using T = decltype(tag);
    ck::MoeGateSigmoidBackward<T>(P<T>(dlogit), P<float>(gate), P<float>(dgate), n, stream_);
    return Status::Ok();
  });
}

}  // namespace ptdp::runtime::cuda
