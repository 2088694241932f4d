// CudaOps' multi-tensor optimizer ops: AdamWMany and SumSquaresMany as one kernels/cuda launch
// each over device tables (multi_tensor_table.h) cached while the tensors are unchanged. What
// the one launch cannot take (a tensor that is not fp32, fp32 or mixed compute copies) runs Ops'
// loop over the single-tensor ops, which computes the same values.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <vector>

#include "kernels/cuda/ops.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_ops_util.h"
#include "runtime/cuda/multi_tensor_table.h"

namespace ptdp::runtime::cuda {
namespace ck = ::ptdp::cuda_kernels;
using namespace detail;  // NOLINT: the helpers of cuda_ops_util.h

namespace {

// The compute copies' one dtype (kFp32 when every copy is empty), or kU8 when the one launch
// cannot take the tensors: a tensor not fp32, an fp32 copy, two copy dtypes.
DType OneLaunchCopyType(std::span<const AdamWTensor> tensors) {
  DType copy = DType::kFp32;
  for (const AdamWTensor& t : tensors) {
    for (DType d : {t.param.dtype, t.grad.dtype, t.m.dtype, t.v.dtype}) {
      if (d != DType::kFp32) return DType::kU8;
    }
    if (t.compute_copy.empty()) continue;
    const DType c = t.compute_copy.dtype;
    if ((c != DType::kBf16 && c != DType::kFp16) || (copy != DType::kFp32 && copy != c)) {
      return DType::kU8;
    }
    copy = c;
  }
  return copy;
}

Status CheckCounts(const AdamWTensor& t, size_t i) {
  const int64_t n = t.param.count;
  if (t.grad.count == n && t.m.count == n && t.v.count == n &&
      (t.compute_copy.empty() || t.compute_copy.count == n)) {
    return Status::Ok();
  }
  return Status::Invalid("cuda ops: AdamWMany tensor " + std::to_string(i) +
                         ": param, grad, m, v and compute copy counts differ");
}

}  // namespace

int64_t CudaOps::multi_tensor_uploads() const {
  return multi_ == nullptr ? 0 : multi_->adamw.uploads() + multi_->squares.uploads();
}

Status CudaOps::AdamWMany(std::span<const AdamWTensor> tensors, const AdamWHyper& h) {
  const DType copy = OneLaunchCopyType(tensors);
  if (!multi_tensor_ || copy == DType::kU8) return Ops::AdamWMany(tensors, h);
  if (multi_ == nullptr) multi_ = std::make_unique<MultiTensorTables>();
  std::vector<ck::AdamWSegment> segments(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const AdamWTensor& t = tensors[i];
    PTDP_RETURN_IF_ERROR(CheckCounts(t, i));
    ck::AdamWSegment& s = segments[i];
    s.param = static_cast<float*>(t.param.data);
    s.copy = t.compute_copy.data;  // nullptr when empty
    s.grad = static_cast<const float*>(t.grad.data);
    s.m = static_cast<float*>(t.m.data);
    s.v = static_cast<float*>(t.v.data);
    s.count = t.param.count;
    s.weight_decay = static_cast<float>(t.weight_decay);  // as AdamWUpdate rounds it
    s.vector = ck::VectorAligned({s.param, s.grad, s.m, s.v}, s.copy) ? 1 : 0;
  }
  MultiTensorTable<ck::AdamWSegment>& table = multi_->adamw;
  PTDP_RETURN_IF_ERROR(table.Update(segments, ck::kChunkElements, stream_));
  return Guarded([&]() -> Status {
    auto run = [&](auto* copy_type) {
      using CopyT = std::remove_pointer_t<decltype(copy_type)>;
      ck::AdamWMultiUpdate<CopyT>(table.segments(), table.items(), table.item_count(),
                                  ck::kChunkElements, h.lr, h.beta1, h.beta2, h.eps, h.step,
                                  static_cast<float>(h.grad_scale), stream_);  // as AdamW
    };
    if (copy == DType::kFp16) {
      run(static_cast<fp16*>(nullptr));
    } else {
      run(static_cast<bf16*>(nullptr));  // bf16 copies, or none
    }
    return Status::Ok();
  });
}

Status CudaOps::SumSquaresMany(TensorRef acc, std::span<const ConstRef> xs) {
  bool fp32 = true;
  for (const ConstRef& x : xs) fp32 = fp32 && x.dtype == DType::kFp32;
  if (!multi_tensor_ || !fp32) return Ops::SumSquaresMany(acc, xs);
  if (multi_ == nullptr) multi_ = std::make_unique<MultiTensorTables>();
  std::vector<ck::SquaresSegment> segments(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    segments[i].x = static_cast<const float*>(xs[i].data);
    segments[i].count = xs[i].count;
    segments[i].vector = ck::VectorAligned({xs[i].data}, nullptr) ? 1 : 0;
  }
  MultiTensorTable<ck::SquaresSegment>& table = multi_->squares;
  PTDP_RETURN_IF_ERROR(table.Update(segments, ck::kChunkElements, stream_));
  return Guarded([&]() -> Status {
    ck::SumSquaresMulti(P<double>(acc), table.partials(), table.segments(), table.items(),
                        table.item_count(), ck::kChunkElements, stream_);
    return Status::Ok();
  });
}

}  // namespace ptdp::runtime::cuda
