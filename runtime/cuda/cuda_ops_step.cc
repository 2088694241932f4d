// CudaOps, second half: attention, embedding, cross-entropy, optimizer, reductions, casts and
// fills (cuda_ops.cc has the layer ops).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <type_traits>

#include "kernels/cuda/ops.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cuda_ops_util.h"
#include "runtime/cuda/cudnn_attention.h"
#include "runtime/cuda/ops_kernels.h"

namespace ptdp::runtime::cuda {
namespace ck = ::ptdp::cuda_kernels;
using namespace detail;  // NOLINT: the helpers of cuda_ops_util.h

namespace {

ck::AttentionDropout AttDrop(const AttentionShape& a, uint64_t key, double p) {
  ck::AttentionDropout d;
  d.key = key;
  d.batch_begin = a.batch_begin;
  d.head_begin = a.head_begin;
  d.h_total = a.heads_total;
  d.p = static_cast<float>(p);
  return d;
}

// The log-sum-exp [b][a/t][s] fp32: the stash's lse with layout.fused_attention (what the ledger
// lists for this kernel); with an unfused layout, the first bytes of probs, which the layer sizes
// for the CPU's [b][a/t][s][s] probabilities (the GPU then uses less than the ledger counts).
Result<float*> LseIn(const AttentionStash& stash, const AttentionShape& a) {
  const int64_t need = a.b * a.heads_local * a.s * static_cast<int64_t>(sizeof(float));
  const TensorRef& held = stash.fused() ? stash.lse : stash.probs;
  if (held.empty() || held.count * DTypeBytes(held.dtype) < need) {
    return Status::Invalid("cuda ops: the attention stash (" + std::to_string(held.count) +
                           " elements) cannot hold the " + std::to_string(need) +
                           "-byte log-sum-exp");
  }
  return static_cast<float*>(held.data);
}

Status CheckHeadDim(const AttentionShape& a) {
  if (ck::AttentionSupportsHeadDim(a.head_dim)) return Status::Ok();
  return Status::Invalid("cuda ops: attention head dim " + std::to_string(a.head_dim) +
                         " is not supported by kernels/cuda (16, 32, 64, 128, 192)");
}

// The multi-head twin of a grouped attention's shape.
AttentionShape MultiHead(const AttentionShape& a) {
  AttentionShape m = a;
  m.group = 1;
  return m;
}

// One line on stderr the first time a bf16 attention leaves cuDNN for kernels/cuda (a slower path
// is worth knowing about, but not once per layer and step).
void WarnFallbackOnce(const std::string& why) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  std::fprintf(stderr, "ptdp: bf16 attention runs kernels/cuda, not cuDNN: %s\n", why.c_str());
}

std::string ShapeText(const AttentionShape& a, double p) {
  return "b=" + std::to_string(a.b) + " s=" + std::to_string(a.s) +
         " heads=" + std::to_string(a.heads_local) + " D=" + std::to_string(a.head_dim) +
         " p=" + std::to_string(p);
}

}  // namespace

Result<bool> CudaOps::UseCudnn(DType t, const AttentionShape& a, double p) {
  if (t != DType::kBf16 || attention_path_ != AttentionPath::kCudnn) return false;
  // The cuDNN graph is causal over every earlier key: a window runs kernels/cuda's attention.
  if (a.window > 0) return false;
  if (!cudnn_tried_) {  // started once: a failure here is not retried every layer
    cudnn_tried_ = true;
    auto created = CudnnAttention::Create(stream_);
    if (created.ok()) {
      cudnn_ = std::move(*created);
    } else {
      WarnFallbackOnce(created.status().ToString());
    }
  }
  if (cudnn_ == nullptr) return false;
  std::string why;
  PTDP_ASSIGN_OR_RETURN(bool ok, cudnn_->Supports(a, p, &why));
  if (!ok) WarnFallbackOnce("cuDNN refused the graph (" + ShapeText(a, p) + "): " + why);
  return ok;
}

// Grouped-query attention runs the multi-head kernels (kernels/cuda and cuDNN) on a copy of qkv
// in multi-head rows, each query head with its group's key and value: the verified kernels stay
// as they are, for one copy of qkv per call and, backward, a multi-head gradient summed back over
// each group (GroupScratch; outside the ledger, like the kernels' own Scratch). The dropout draws
// and the log-sum-exp are per query head either way.
Status CudaOps::AttentionForward(TensorRef out, AttentionStash* stash, ConstRef qkv,
                                 const AttentionShape& a, const DropoutSpec& drop) {
  if (a.group > 1) {
    const kernels::QkvLayout row{a.heads_local, a.head_dim, a.group};
    const int64_t rows = a.b * a.LocalSeq(), mha = rows * a.heads_local * 3 * a.head_dim;
    PTDP_ASSIGN_OR_RETURN(void* copy, GroupScratch(mha * DTypeBytes(qkv.dtype)));
    PTDP_RETURN_IF_ERROR(ForCompute(qkv.dtype, "ExpandGroupedQkv", [&](auto tag) {
      using T = decltype(tag);
      ck::ExpandGroupedQkv<T>(static_cast<T*>(copy), P<T>(qkv), rows, row, stream_);
      return Status::Ok();
    }));
    return AttentionForward(out, stash, ConstRef{copy, qkv.dtype, mha}, MultiHead(a), drop);
  }
  PTDP_ASSIGN_OR_RETURN(float* lse, LseIn(*stash, a));
  PTDP_ASSIGN_OR_RETURN(last_attention_cudnn_, UseCudnn(qkv.dtype, a, drop.p));
  if (last_attention_cudnn_) {
    return Guarded([&] {
      return cudnn_->Forward(P<bf16>(out), lse, P<bf16>(qkv), a, drop.p, drop.key,
                             [this](int64_t n) { return Scratch(n); });
    });
  }
  PTDP_RETURN_IF_ERROR(CheckHeadDim(a));
  return ForCompute(qkv.dtype, "AttentionForward", [&](auto tag) {
    using T = decltype(tag);
    ck::AttentionForward<T>(P<T>(out), lse, P<T>(qkv), a.b, a.s, a.heads_local, a.head_dim,
                            AttDrop(a, drop.key, drop.p), stream_, a.window);
    return Status::Ok();
  });
}

Status CudaOps::AttentionBackward(TensorRef dqkv, ConstRef dout, ConstRef qkv,
                                  const AttentionStash& stash, const AttentionShape& a, double p) {
  if (a.group > 1) {
    const kernels::QkvLayout row{a.heads_local, a.head_dim, a.group};
    const int64_t rows = a.b * a.LocalSeq(), mha = rows * a.heads_local * 3 * a.head_dim;
    const int64_t bytes = mha * DTypeBytes(qkv.dtype);
    PTDP_ASSIGN_OR_RETURN(void* copies, GroupScratch(2 * bytes));  // qkv's, then its gradient's
    void* dcopy = static_cast<char*>(copies) + bytes;
    PTDP_RETURN_IF_ERROR(ForCompute(qkv.dtype, "ExpandGroupedQkv", [&](auto tag) {
      using T = decltype(tag);
      ck::ExpandGroupedQkv<T>(static_cast<T*>(copies), P<T>(qkv), rows, row, stream_);
      return Status::Ok();
    }));
    PTDP_RETURN_IF_ERROR(AttentionBackward(TensorRef{dcopy, dqkv.dtype, mha}, dout,
                                           ConstRef{copies, qkv.dtype, mha}, stash, MultiHead(a),
                                           p));
    return ForCompute(qkv.dtype, "SumGroupedDqkv", [&](auto tag) {
      using T = decltype(tag);
      ck::SumGroupedDqkv<T>(P<T>(dqkv), static_cast<const T*>(dcopy), rows, row, stream_);
      return Status::Ok();
    });
  }
  if (stash.out.empty()) {
    return Status::Invalid("cuda ops: AttentionBackward needs the forward's output (stash.out)");
  }
  PTDP_ASSIGN_OR_RETURN(float* lse, LseIn(stash, a));
  // The same decision as the forward's (same shape and p): the lse and the dropout masks match.
  PTDP_ASSIGN_OR_RETURN(last_attention_cudnn_, UseCudnn(qkv.dtype, a, p));
  if (last_attention_cudnn_) {
    return Guarded([&] {
      return cudnn_->Backward(P<bf16>(dqkv), P<bf16>(dout), P<bf16>(qkv), P<bf16>(stash.out), lse,
                              a, p, stash.dropout_key, [this](int64_t n) { return Scratch(n); });
    });
  }
  PTDP_RETURN_IF_ERROR(CheckHeadDim(a));
  const int64_t ws_floats =
      ck::AttentionBackwardWorkspaceFloats(a.b, a.s, a.heads_local, a.head_dim);
  PTDP_ASSIGN_OR_RETURN(void* ws, Scratch(ws_floats * static_cast<int64_t>(sizeof(float))));
  // The dropout key is not in the backward's arguments: the kernel needs only p > 0 to know the
  // forward dropped, and the key to redraw; the layer passes the same key through the stash.
  return ForCompute(qkv.dtype, "AttentionBackward", [&](auto tag) {
    using T = decltype(tag);
    ck::AttentionBackward<T>(P<T>(dqkv), static_cast<float*>(ws), P<T>(dout), P<T>(qkv),
                             P<T>(stash.out), lse, a.b, a.s, a.heads_local, a.head_dim,
                             AttDrop(a, stash.dropout_key, p), stream_, a.window);
    return Status::Ok();
  });
}

// Context parallelism: kernels/cuda/context_attention.cu, whose dropout draws the CPU's masks
// (no cuDNN path: its ring variants are Transformer Engine's, not a cuDNN graph).
ck::ContextDims CtxDims(const AttentionShape& a) {
  return {a.b, a.s, a.heads_local, a.head_dim, a.cp, a.cp_rank};
}

// Grouped-query attention's packs are the CPU's [rows][kv][2][D]; its attention runs the
// multi-head kernels on copies (kernels/cuda/ops.h GroupedContext*, in GroupScratch).
Status CudaOps::ContextKvPack(TensorRef kv, ConstRef qkv, const AttentionShape& a) {
  const kernels::QkvLayout row{a.heads_local, a.head_dim, a.group};
  return ForCompute(qkv.dtype, "ContextKvPack", [&](auto tag) {
    using T = decltype(tag);
    if (a.group > 1) {
      ck::GroupedContextKvPack<T>(P<T>(kv), P<T>(qkv), a.b * a.LocalSeq(), row, stream_);
      return Status::Ok();
    }
    ck::ContextKvPack<T>(P<T>(kv), P<T>(qkv), a.b * a.LocalSeq(), a.heads_local, a.head_dim,
                         stream_);
    return Status::Ok();
  });
}

Status CudaOps::ContextKvUnpack(TensorRef dqkv, ConstRef dkv, const AttentionShape& a) {
  const kernels::QkvLayout row{a.heads_local, a.head_dim, a.group};
  return ForCompute(dkv.dtype, "ContextKvUnpack", [&](auto tag) {
    using T = decltype(tag);
    if (a.group > 1) {
      ck::GroupedContextKvUnpack<T>(P<T>(dqkv), P<T>(dkv), a.b * a.LocalSeq(), row, stream_);
      return Status::Ok();
    }
    ck::ContextKvUnpack<T>(P<T>(dqkv), P<T>(dkv), a.b * a.LocalSeq(), a.heads_local, a.head_dim,
                           stream_);
    return Status::Ok();
  });
}

Status CudaOps::ContextAttentionForward(TensorRef out, TensorRef lse, ConstRef qkv, ConstRef kv_all,
                                        const AttentionShape& a, const DropoutSpec& drop) {
  PTDP_RETURN_IF_ERROR(CheckHeadDim(a));
  if (lse.dtype != DType::kFp32) return Status::Invalid("cuda ops: the lse stash must be fp32");
  void* copies = nullptr;
  if (a.group > 1) {
    const int64_t n = ck::GroupedContextWorkspace(CtxDims(a), false) * DTypeBytes(qkv.dtype);
    PTDP_ASSIGN_OR_RETURN(copies, GroupScratch(n));
  }
  return ForCompute(qkv.dtype, "ContextAttentionForward", [&](auto tag) {
    using T = decltype(tag);
    if (a.group > 1) {
      ck::GroupedContextAttentionForward<T>(P<T>(out), P<float>(lse), P<T>(qkv), P<T>(kv_all),
                                            CtxDims(a), a.group, AttDrop(a, drop.key, drop.p),
                                            static_cast<T*>(copies), stream_);
      return Status::Ok();
    }
    ck::ContextAttentionForward<T>(P<T>(out), P<float>(lse), P<T>(qkv), P<T>(kv_all), CtxDims(a),
                                   AttDrop(a, drop.key, drop.p), stream_);
    return Status::Ok();
  });
}

Status CudaOps::ContextAttentionBackward(TensorRef dqkv, TensorRef dkv_src, ConstRef dout,
                                         ConstRef out, ConstRef qkv, ConstRef kv_src, ConstRef lse,
                                         const AttentionShape& a, int src,
                                         const DropoutSpec& drop) {
  PTDP_RETURN_IF_ERROR(CheckHeadDim(a));
  if (lse.dtype != DType::kFp32) return Status::Invalid("cuda ops: the lse stash must be fp32");
  const int64_t ws_floats = ck::ContextAttentionBackwardWorkspaceFloats(CtxDims(a));
  PTDP_ASSIGN_OR_RETURN(void* ws, Scratch(ws_floats * static_cast<int64_t>(sizeof(float))));
  void* copies = nullptr;
  if (a.group > 1) {
    const int64_t n = ck::GroupedContextWorkspace(CtxDims(a), true) * DTypeBytes(qkv.dtype);
    PTDP_ASSIGN_OR_RETURN(copies, GroupScratch(n));
  }
  return ForCompute(qkv.dtype, "ContextAttentionBackward", [&](auto tag) {
    using T = decltype(tag);
    if (a.group > 1) {
      ck::GroupedContextAttentionBackward<T>(P<T>(dqkv), P<T>(dkv_src), static_cast<float*>(ws),
                                             static_cast<T*>(copies), P<T>(dout), P<T>(out),
                                             P<T>(qkv), P<T>(kv_src), P<float>(lse), CtxDims(a),
                                             a.group, src, AttDrop(a, drop.key, drop.p), stream_);
      return Status::Ok();
    }
    ck::ContextAttentionBackward<T>(P<T>(dqkv), P<T>(dkv_src), static_cast<float*>(ws), P<T>(dout),
                                    P<T>(out), P<T>(qkv), P<T>(kv_src), P<float>(lse), CtxDims(a),
                                    src, AttDrop(a, drop.key, drop.p), stream_);
    return Status::Ok();
  });
}

Status CudaOps::EmbeddingForward(TensorRef out, ConstRef tokens, ConstRef wte, ConstRef wpe,
                                 int64_t b, int64_t s, int64_t c, int64_t vocab_begin,
                                 int64_t vocab_end) {
  return ForCompute(out.dtype, "EmbeddingForward", [&](auto tag) {
    using T = decltype(tag);
    ck::EmbeddingForward<T>(P<T>(out), P<int32_t>(tokens), P<T>(wte), P<T>(wpe), b, s, c,
                            vocab_begin, vocab_end, stream_);
    return Status::Ok();
  });
}

Status CudaOps::EmbeddingBackward(TensorRef dwte, TensorRef dwpe, ConstRef dout, ConstRef tokens,
                                  int64_t b, int64_t s, int64_t c, int64_t vocab_begin,
                                  int64_t vocab_end) {
  return ForCompute(dout.dtype, "EmbeddingBackward", [&](auto tag) {
    using T = decltype(tag);
    ck::EmbeddingBackward<T>(P<float>(dwte), P<float>(dwpe), P<T>(dout), P<int32_t>(tokens), b, s,
                             c, vocab_begin, vocab_end, stream_);
    return Status::Ok();
  });
}

Status CudaOps::CrossEntropyLocalStats(TensorRef row_max, TensorRef sums, ConstRef logits,
                                       ConstRef targets, const VocabShard& v) {
  return ForCompute(logits.dtype, "CrossEntropyLocalStats", [&](auto tag) {
    using T = decltype(tag);
    float* s = P<float>(sums);
    ck::CrossEntropyLocalStats<T>(P<float>(row_max), s, s + v.rows, P<T>(logits),
                                  P<int32_t>(targets), v.rows, v.v_local, v.begin, v.real, stream_);
    return Status::Ok();
  });
}

Status CudaOps::CrossEntropyRescaleSums(TensorRef sums, ConstRef local_max, ConstRef global_max,
                                        const VocabShard& v) {
  if (sums.dtype != DType::kFp32) return NotImplemented("CrossEntropyRescaleSums", sums.dtype);
  return Guarded([&]() -> Status {
    ck::CrossEntropyRescaleSums(P<float>(sums), P<float>(local_max), P<float>(global_max), v.rows,
                                stream_);
    return Status::Ok();
  });
}

Status CudaOps::CrossEntropyLoss(TensorRef row_sum, TensorRef loss_sum, ConstRef sums,
                                 ConstRef row_max, ConstRef targets, const VocabShard& v) {
  return Guarded([&]() -> Status {
    PTDP_CUDA_RETURN(opk::CrossEntropyLossSum(P<float>(row_sum), P<double>(loss_sum),
                                              P<float>(sums), P<float>(row_max),
                                              P<int32_t>(targets), v.rows, stream_));
    return Status::Ok();
  });
}

Status CudaOps::CrossEntropyBackward(TensorRef dlogits, ConstRef logits, ConstRef row_max,
                                     ConstRef row_sum, ConstRef targets, double dloss,
                                     const VocabShard& v) {
  if (logits.dtype != DType::kFp32) return NotImplemented("CrossEntropyBackward", logits.dtype);
  // Scratch: dloss per row, then (when dlogits is neither fp32 nor bf16) fp32 dlogits to cast.
  // bf16 dlogits are written by the kernel itself, one rounding per element as in CpuOps.
  const bool direct = dlogits.dtype == DType::kFp32 || dlogits.dtype == DType::kBf16;
  const int64_t floats = v.rows + (direct ? 0 : v.rows * v.v_local);
  PTDP_ASSIGN_OR_RETURN(void* scratch, Scratch(floats * static_cast<int64_t>(sizeof(float))));
  auto* dl = static_cast<float*>(scratch);
  return Guarded([&]() -> Status {
    PTDP_CUDA_RETURN(opk::FillValue<float>(dl, v.rows, dloss, stream_));
    auto run = [&](auto* out) {
      ck::CrossEntropyBackward(out, P<float>(logits), P<float>(row_max), P<float>(row_sum),
                               P<int32_t>(targets), dl, v.rows, v.v_local, v.begin, v.real,
                               stream_);
    };
    if (dlogits.dtype == DType::kBf16) {
      run(P<bf16>(dlogits));
      return Status::Ok();
    }
    float* wide = direct ? P<float>(dlogits) : dl + v.rows;
    run(wide);
    if (direct) return Status::Ok();
    return Cast(dlogits, ConstRef(wide, DType::kFp32, v.rows * v.v_local));
  });
}

Status CudaOps::AdamW(TensorRef param, TensorRef compute_copy, ConstRef grad, TensorRef m,
                      TensorRef v, const AdamWHyper& h) {
  if (param.dtype != DType::kFp32) return NotImplemented("AdamW", param.dtype);
  return Guarded([&]() -> Status {
    auto run = [&](auto copy) {
      ck::AdamWUpdate(P<float>(param), copy, P<float>(grad), P<float>(m), P<float>(v), param.count,
                      h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.step,
                      static_cast<float>(h.grad_scale), stream_);  // as Scale<float> rounds
    };
    switch (compute_copy.empty() ? DType::kFp32 : compute_copy.dtype) {
      case DType::kBf16:
        run(P<bf16>(compute_copy));
        return Status::Ok();
      case DType::kFp16:
        run(P<fp16>(compute_copy));
        return Status::Ok();
      case DType::kFp32:
        run(static_cast<bf16*>(nullptr));
        if (compute_copy.empty()) return Status::Ok();
        return Cast(compute_copy, param);  // an fp32 copy: a plain copy
      default:
        return NotImplemented("AdamW compute copy", compute_copy.dtype);
    }
  });
}

Status CudaOps::SumSquares(TensorRef acc, ConstRef x) {
  return ForFloat(x.dtype, "SumSquares", [&](auto tag) -> Status {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      return NotImplemented("SumSquares", x.dtype);
    } else {
      ck::SumSquaresAccumulate<T>(P<double>(acc), P<T>(x), x.count, stream_);
      return Status::Ok();
    }
  });
}

Status CudaOps::Scale(TensorRef x, double factor) {
  return ForCompute(x.dtype, "Scale", [&](auto tag) {
    using T = decltype(tag);
    ck::Scale<T>(P<T>(x), static_cast<float>(factor), x.count, stream_);
    return Status::Ok();
  });
}

Status CudaOps::FlagNonFinite(TensorRef flag, ConstRef x) {
  return ForFloat(x.dtype, "FlagNonFinite", [&](auto tag) -> Status {
    using T = decltype(tag);
    PTDP_CUDA_RETURN(opk::FlagNonFinite<T>(P<double>(flag), P<T>(x), x.count, stream_));
    return Status::Ok();
  });
}

Status CudaOps::Cast(TensorRef dst, ConstRef src) {
  if (dst.count != src.count) return Status::Internal("cuda ops: cast between different counts");
  if (dst.dtype == src.dtype) {
    PTDP_CUDA_RETURN(cudaMemcpyAsync(dst.data, src.data,
                                     static_cast<size_t>(src.count * DTypeBytes(src.dtype)),
                                     cudaMemcpyDeviceToDevice, stream_));
    return Status::Ok();
  }
  return Guarded([&]() -> Status {
    const DType s = src.dtype, d = dst.dtype;
    if (s == DType::kFp32 && d == DType::kBf16) {
      ck::Cast<bf16, float>(P<bf16>(dst), P<float>(src), src.count, stream_);
    } else if (s == DType::kBf16 && d == DType::kFp32) {
      ck::Cast<float, bf16>(P<float>(dst), P<bf16>(src), src.count, stream_);
    } else if (s == DType::kFp32 && d == DType::kFp16) {
      ck::Cast<fp16, float>(P<fp16>(dst), P<float>(src), src.count, stream_);
    } else if (s == DType::kFp16 && d == DType::kFp32) {
      ck::Cast<float, fp16>(P<float>(dst), P<fp16>(src), src.count, stream_);
    } else {
      return Status::Invalid(std::string("cuda ops: Cast from ") + DTypeName(s) + " to " +
                             DTypeName(d) + " is not implemented");
    }
    return Status::Ok();
  });
}

Status CudaOps::Fill(TensorRef dst, double value) {
  if (dst.dtype == DType::kU8) {
    PTDP_CUDA_RETURN(cudaMemsetAsync(dst.data, static_cast<int>(value),
                                     static_cast<size_t>(dst.count), stream_));
    return Status::Ok();
  }
  if (dst.dtype == DType::kI32) {
    PTDP_CUDA_RETURN(opk::FillValue<int32_t>(P<int32_t>(dst), dst.count, value, stream_));
    return Status::Ok();
  }
  return ForFloat(dst.dtype, "Fill", [&](auto tag) -> Status {
    using T = decltype(tag);
    PTDP_CUDA_RETURN(opk::FillValue<T>(P<T>(dst), dst.count, value, stream_));
    return Status::Ok();
  });
}

Status CudaOps::FillNormal(TensorRef out, uint64_t key, int64_t cols, int64_t global_cols,
                           int64_t col0, int64_t row0, double mean, double stddev) {
  return ForFloat(out.dtype, "FillNormal", [&](auto tag) -> Status {
    using T = decltype(tag);
    PTDP_CUDA_RETURN(opk::FillNormal<T>(P<T>(out), out.count, key, cols, global_cols, col0, row0,
                                        mean, stddev, stream_));
    return Status::Ok();
  });
}

}  // namespace ptdp::runtime::cuda
