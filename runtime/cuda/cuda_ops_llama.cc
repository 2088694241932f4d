// CudaOps' ops of Llama-style layers (runtime/backend/ops.h RmsNorm*, Swiglu*, RotaryEmbedding,
// QkNorm*): kernels/cuda/llama.cu on the compute stream, fp32 and bf16 like every CudaOps op.
#include "kernels/cuda/ops.h"
#include "runtime/backend/rope_freqs.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_ops_util.h"

namespace ptdp::runtime::cuda {
namespace ck = ::ptdp::cuda_kernels;
using namespace detail;  // NOLINT: the helpers of cuda_ops_util.h

Status CudaOps::RmsNormForward(TensorRef out, TensorRef rstd, ConstRef x, ConstRef w, int64_t n,
                               int64_t c, double eps) {
  return ForCompute(x.dtype, "RmsNormForward", [&](auto tag) {
    using T = decltype(tag);
    ck::RmsNormForward<T>(P<T>(out), P<float>(rstd), P<T>(x), P<T>(w), n, c,
                          static_cast<float>(eps), stream_);
    return Status::Ok();
  });
}

Status CudaOps::RmsNormBackward(TensorRef dx, TensorRef dw, ConstRef dout, ConstRef x, ConstRef w,
                                ConstRef rstd, int64_t n, int64_t c) {
  return ForCompute(x.dtype, "RmsNormBackward", [&](auto tag) {
    using T = decltype(tag);
    ck::RmsNormBackward<T>(P<T>(dx), P<float>(dw), P<T>(dout), P<T>(x), P<T>(w), P<float>(rstd), n,
                           c, stream_);
    return Status::Ok();
  });
}

Status CudaOps::SwigluForward(TensorRef out, ConstRef in, int64_t count) {
  return ForCompute(in.dtype, "SwigluForward", [&](auto tag) {
    using T = decltype(tag);
    ck::SwigluForward<T>(P<T>(out), P<T>(in), count, stream_);
    return Status::Ok();
  });
}

Status CudaOps::SwigluBackward(TensorRef din, ConstRef in, ConstRef dout, int64_t count) {
  return ForCompute(in.dtype, "SwigluBackward", [&](auto tag) {
    using T = decltype(tag);
    ck::SwigluBackward<T>(P<T>(din), P<T>(in), P<T>(dout), count, stream_);
    return Status::Ok();
  });
}

Status CudaOps::SquaredReluForward(TensorRef out, ConstRef in, int64_t count) {
  return ForCompute(in.dtype, "SquaredReluForward", [&](auto tag) {
    using T = decltype(tag);
    ck::SquaredReluForward<T>(P<T>(out), P<T>(in), count, stream_);
    return Status::Ok();
  });
}

Status CudaOps::SquaredReluBackward(TensorRef din, ConstRef in, ConstRef dout, int64_t count) {
  return ForCompute(in.dtype, "SquaredReluBackward", [&](auto tag) {
    using T = decltype(tag);
    ck::SquaredReluBackward<T>(P<T>(din), P<T>(in), P<T>(dout), count, stream_);
    return Status::Ok();
  });
}

Status CudaOps::RotaryEmbedding(TensorRef qkv, const AttentionShape& a, const RopeSpec& rope,
                                bool inverse) {
  ck::RotaryDims r;
  r.b = a.b;
  r.s = a.s;
  r.h = a.heads_local;
  r.d = a.head_dim;
  r.group = a.group;
  r.cp = a.cp;
  r.rank = a.cp_rank;
  r.rope = RopeFreqsOf(rope);
  return ForCompute(qkv.dtype, "RotaryEmbedding", [&](auto tag) {
    using T = decltype(tag);
    ck::RotaryEmbedding<T>(P<T>(qkv), r, inverse, stream_);
    return Status::Ok();
  });
}

Status CudaOps::QkNormForward(TensorRef qkv, TensorRef qk_in, TensorRef rstd, ConstRef q_w,
                              ConstRef k_w, const AttentionShape& a, double eps) {
  const kernels::QkvLayout row{a.heads_local, a.head_dim, a.group};
  return ForCompute(qkv.dtype, "QkNormForward", [&](auto tag) {
    using T = decltype(tag);
    ck::QkNormForward<T>(P<T>(qkv), P<T>(qk_in), P<float>(rstd), P<T>(q_w), P<T>(k_w),
                         a.b * a.LocalSeq(), row, static_cast<float>(eps), stream_);
    return Status::Ok();
  });
}

Status CudaOps::QkNormBackward(TensorRef dqkv, TensorRef dq_w, TensorRef dk_w, ConstRef qk_in,
                               ConstRef rstd, ConstRef q_w, ConstRef k_w, const AttentionShape& a) {
  const kernels::QkvLayout row{a.heads_local, a.head_dim, a.group};
  return ForCompute(dqkv.dtype, "QkNormBackward", [&](auto tag) {
    using T = decltype(tag);
    ck::QkNormBackward<T>(P<T>(dqkv), P<float>(dq_w), P<float>(dk_w), P<T>(qk_in), P<float>(rstd),
                          P<T>(q_w), P<T>(k_w), a.b * a.LocalSeq(), row, stream_);
    return Status::Ok();
  });
}

}  // namespace ptdp::runtime::cuda
