#include "runtime/cuda/cuda_ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdlib>
#include <string>
#include <type_traits>

#include "kernels/cuda/ops.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/cuda_ops_util.h"
#include "runtime/cuda/cudnn_attention.h"
#include "runtime/cuda/layernorm_kernels.h"
#include "runtime/cuda/multi_tensor_table.h"
#include "runtime/cuda/ops_kernels.h"

namespace ptdp::runtime::cuda {
namespace ck = ::ptdp::cuda_kernels;
using namespace detail;  // NOLINT: the helpers of cuda_ops_util.h

CudaOps::CudaOps(cudaStream_t stream) : stream_(stream) {}

Result<std::unique_ptr<CudaOps>> CudaOps::Create(cudaStream_t stream) {
  std::unique_ptr<CudaOps> ops(new CudaOps(stream));
  // Tests force either attention path; a misspelt value is refused rather than ignored.
  if (const char* env = std::getenv("PTDP_ATTENTION"); env != nullptr && *env != '\0') {
    const std::string v = env;
    if (v == "reference") {
      ops->attention_path_ = AttentionPath::kReference;
    } else if (v != "cudnn") {
      return Status::Invalid("PTDP_ATTENTION=" + v + ": expected reference or cudnn");
    }
  }
  // PTDP_LAYERNORM=scalar keeps kernels/cuda's kernels (measured side by side with the packs).
  if (const char* env = std::getenv("PTDP_LAYERNORM"); env != nullptr && *env != '\0') {
    const std::string v = env;
    if (v == "scalar") {
      ops->layernorm_packs_ = false;
    } else if (v != "packs") {
      return Status::Invalid("PTDP_LAYERNORM=" + v + ": expected scalar or packs");
    }
  }
  PTDP_ASSIGN_OR_RETURN(ops->lt_, cublas::LtGemm::Create());
  // Side-by-side switches of the GPU script's op table (bench/gpu/run_all.sh): PTDP_GEMM_TUNE=0
  // keeps cuBLASLt's first-ranked algorithm per shape, PTDP_GELU_EPILOGUE=0 the separate GeLU pass,
  // PTDP_MULTI_TENSOR=0 one optimizer launch per tensor.
  for (const auto& [name, flag] :
       {std::pair<const char*, bool*>{"PTDP_GEMM_TUNE", &ops->gemm_tune_},
        {"PTDP_GELU_EPILOGUE", &ops->gelu_epilogue_},
        {"PTDP_MULTI_TENSOR", &ops->multi_tensor_}}) {
    const char* env = std::getenv(name);
    if (env == nullptr || *env == '\0') continue;
    const std::string v = env;
    if (v != "0" && v != "1")
      return Status::Invalid(std::string(name) + "=" + v + ": expected 0 or 1");
    *flag = v == "1";
  }
  ops->lt_->set_tuning(ops->gemm_tune_);
  PTDP_BLAS_RETURN(cublasCreate(&ops->blas_));
  PTDP_BLAS_RETURN(cublasSetStream(ops->blas_, stream));
  // True fp32 GEMMs (no TF32): the fp32 backend is the one compared element by element.
  PTDP_BLAS_RETURN(cublasSetMathMode(ops->blas_, CUBLAS_PEDANTIC_MATH));
  return ops;
}

CudaOps::~CudaOps() {
  cudnn_.reset();  // its handle and seed buffer, before the stream's scratch
  multi_.reset();
  if (scratch_ != nullptr) cudaFreeAsync(scratch_, stream_);
  if (group_scratch_ != nullptr) cudaFreeAsync(group_scratch_, stream_);
  if (blas_ != nullptr) cublasDestroy(blas_);
}

namespace {
// *buffer grown to at least `bytes` (its size in *have).
Result<void*> GrowScratch(void** buffer, int64_t* have, int64_t bytes, cudaStream_t stream) {
  if (bytes <= *have) return *buffer;
  // Stream-ordered: work queued earlier on the stream still reads the old buffer safely.
  if (*buffer != nullptr) PTDP_CUDA_RETURN(cudaFreeAsync(*buffer, stream));
  *buffer = nullptr;
  *have = 0;
  PTDP_CUDA_RETURN(cudaMallocAsync(buffer, static_cast<size_t>(bytes), stream));
  *have = bytes;
  return *buffer;
}
}  // namespace

Result<void*> CudaOps::Scratch(int64_t bytes) {
  return GrowScratch(&scratch_, &scratch_bytes_, bytes, stream_);
}

Result<void*> CudaOps::GroupScratch(int64_t bytes) {
  return GrowScratch(&group_scratch_, &group_scratch_bytes_, bytes, stream_);
}

Status CudaOps::LayerNormForward(TensorRef out, TensorRef mean, TensorRef rstd, ConstRef x,
                                 ConstRef w, ConstRef b, int64_t n, int64_t c,
                                 double weight_offset) {
  const float offset = static_cast<float>(weight_offset);
  return ForCompute(x.dtype, "LayerNormForward", [&](auto tag) {
    using T = decltype(tag);
    if (layernorm_packs_ && opk::LayerNormPacksApply<T>(c, out.data, x.data, w.data, b.data)) {
      PTDP_CUDA_RETURN(opk::LayerNormForwardPacks<T>(P<T>(out), P<float>(mean), P<float>(rstd),
                                                     P<T>(x), P<T>(w), P<T>(b), n, c, stream_,
                                                     offset));
      return Status::Ok();
    }
    ck::LayerNormForward<T>(P<T>(out), P<float>(mean), P<float>(rstd), P<T>(x), P<T>(w), P<T>(b), n,
                            c, stream_, offset);
    return Status::Ok();
  });
}

Status CudaOps::LayerNormBackward(TensorRef dx, TensorRef dw, TensorRef db, ConstRef dout,
                                  ConstRef x, ConstRef w, ConstRef mean, ConstRef rstd, int64_t n,
                                  int64_t c, bool accumulate_dx, double weight_offset) {
  const float offset = static_cast<float>(weight_offset);
  return ForCompute(x.dtype, "LayerNormBackward", [&](auto tag) -> Status {
    using T = decltype(tag);
    T* target = P<T>(dx);
    if (accumulate_dx) {  // the kernel overwrites: compute the part, then add it
      PTDP_ASSIGN_OR_RETURN(void* part, Scratch(n * c * static_cast<int64_t>(sizeof(T))));
      target = static_cast<T*>(part);
    }
    if (layernorm_packs_ && opk::LayerNormPacksApply<T>(c, target, dout.data, x.data, w.data)) {
      PTDP_CUDA_RETURN(opk::LayerNormBackwardPacks<T>(target, P<float>(dw), P<float>(db),
                                                      P<T>(dout), P<T>(x), P<T>(w), P<float>(mean),
                                                      P<float>(rstd), n, c, stream_, offset));
    } else {
      ck::LayerNormBackward<T>(target, P<float>(dw), P<float>(db), P<T>(dout), P<T>(x), P<T>(w),
                               P<float>(mean), P<float>(rstd), n, c, stream_, offset);
    }
    if (accumulate_dx) ck::Accumulate<T>(P<T>(dx), target, n * c, stream_);
    return Status::Ok();
  });
}

Status CudaOps::SgemmForward(float* out, const float* x, const float* w, const float* bias,
                             int64_t n, int64_t c, int64_t oc) {
  float beta = 0.0f;
  if (bias != nullptr) {
    PTDP_CUDA_RETURN(opk::BroadcastRows(out, bias, n, oc, stream_));
    beta = 1.0f;
  }
  const float alpha = 1.0f;
  // Column-major: out^T (oc x n) = W^T (W stored c x oc, transposed) * x^T (stored c x n).
  PTDP_BLAS_RETURN(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, int(oc), int(n), int(c), &alpha, w,
                               int(c), x, int(c), &beta, out, int(oc)));
  return Status::Ok();
}

Status CudaOps::LinearForward(TensorRef out, TensorRef gelu_out, ConstRef x, ConstRef w,
                              ConstRef bias, int64_t n, int64_t c, int64_t oc) {
  return ForCompute(x.dtype, "LinearForward", [&](auto tag) -> Status {
    using T = decltype(tag);
    // Output in the compute dtype, or fp32 (the logits); the bias has the output's dtype.
    auto run = [&](auto out_tag) -> Status {
      using O = decltype(out_tag);
      if constexpr (std::is_same_v<T, float>) {
        PTDP_RETURN_IF_ERROR(
            SgemmForward(P<float>(out), P<float>(x), P<float>(w), P<float>(bias), n, c, oc));
      } else {
        // bias + GeLU in the GEMM's epilogue (pre-activation to `out`, GeLU of the fp32 sum to
        // gelu_out): no 2-byte-per-element pass over the fc1 output (~0.45 ms a call at gpt-1.3b
        // mbs 16 on an H200, packed).
        if constexpr (std::is_same_v<T, bf16> && std::is_same_v<O, bf16>) {
          if (!gelu_out.empty() && gelu_epilogue_ && oc % 8 == 0 &&
              reinterpret_cast<uintptr_t>(out.data) % 16 == 0) {
            lt_->LinearForwardGelu(P<bf16>(gelu_out), P<bf16>(out), P<T>(x), P<T>(w), P<bf16>(bias),
                                   n, c, oc, stream_);
            return Status::Ok();
          }
        }
        lt_->LinearForward<O>(P<O>(out), P<T>(x), P<T>(w), P<O>(bias), n, c, oc, stream_);
      }
      // GeLU in 16-byte packs (kernels/cuda's grid-stride BiasGeluForward read 2 bytes a thread:
      // 0.7 ms of a 2.1 ms fc1 call at gpt-1.3b mbs 16 on an H200).
      if (!gelu_out.empty()) {
        PTDP_CUDA_RETURN(opk::GeluForward<O>(P<O>(gelu_out), P<O>(out), n * oc, stream_));
      }
      return Status::Ok();
    };
    if (out.dtype == DType::kFp32) return run(float{});
    return run(T{});
  });
}

Status CudaOps::LinearBackwardData(TensorRef dx, ConstRef dout, ConstRef w, int64_t n, int64_t c,
                                   int64_t oc) {
  return ForCompute(dout.dtype, "LinearBackwardData", [&](auto tag) -> Status {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      const float alpha = 1.0f, beta = 0.0f;
      // dx^T (c x n) = W^T (stored c x oc) * dout^T (stored oc x n).
      PTDP_BLAS_RETURN(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, int(c), int(n), int(oc), &alpha,
                                   P<float>(w), int(c), P<float>(dout), int(oc), &beta,
                                   P<float>(dx), int(c)));
    } else {
      lt_->LinearBackwardData(P<T>(dx), P<T>(dout), P<T>(w), n, c, oc, false, stream_);
    }
    return Status::Ok();
  });
}

Status CudaOps::LinearBackwardWeight(TensorRef dw, TensorRef dbias, ConstRef dout, ConstRef x,
                                     int64_t n, int64_t c, int64_t oc) {
  return ForCompute(dout.dtype, "LinearBackwardWeight", [&](auto tag) -> Status {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      const float alpha = 1.0f, beta = 1.0f;  // accumulate into the main gradient
      // dW^T (c x oc) += x^T (stored c x n) * dout (stored oc x n, transposed).
      PTDP_BLAS_RETURN(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_T, int(c), int(oc), int(n), &alpha,
                                   P<float>(x), int(c), P<float>(dout), int(oc), &beta,
                                   P<float>(dw), int(c)));
    } else {
      lt_->LinearBackwardWeight(P<float>(dw), P<T>(dout), P<T>(x), n, c, oc, stream_);
    }
    if (!dbias.empty()) {
      PTDP_CUDA_RETURN(opk::BiasGradAccumulate<T>(P<float>(dbias), P<T>(dout), n, oc, stream_));
    }
    return Status::Ok();
  });
}

Status CudaOps::GeluBackward(TensorRef dpre, ConstRef pre, ConstRef dgelu, int64_t count) {
  // Not kernels/cuda's BiasGeluBackward: without a bias it ran one row of count columns, one
  // thread in eight busy (5.1 ms per 268M-element call on an H200, 18% of a gpt-1.3b step).
  return ForCompute(pre.dtype, "GeluBackward", [&](auto tag) -> Status {
    using T = decltype(tag);
    PTDP_CUDA_RETURN(opk::GeluBackward<T>(P<T>(dpre), P<T>(pre), P<T>(dgelu), count, stream_));
    return Status::Ok();
  });
}

Status CudaOps::LinearBackwardDataGelu(TensorRef dpre, ConstRef dout, ConstRef w, ConstRef pre,
                                       int64_t n, int64_t c, int64_t oc) {
  if (dout.dtype != DType::kBf16) return NotImplemented("LinearBackwardDataGelu", dout.dtype);
  // The DGELU epilogue's conditions (kernels/cublas/gemm.h); otherwise the GEMM, then GeLU' in
  // place (each pack of dpre is read before it is written).
  if (c % 8 != 0 || reinterpret_cast<uintptr_t>(pre.data) % 16 != 0) {
    PTDP_RETURN_IF_ERROR(LinearBackwardData(dpre, dout, w, n, c, oc));
    return GeluBackward(dpre, pre, ConstRef(dpre.data, dpre.dtype, dpre.count), n * c);
  }
  return Guarded([&]() -> Status {
    lt_->LinearBackwardDataGelu(P<bf16>(dpre), P<bf16>(dout), P<bf16>(w), P<bf16>(pre), n, c, oc,
                                stream_);
    return Status::Ok();
  });
}

Status CudaOps::BiasDropoutResidual(TensorRef out, TensorRef mask, ConstRef x, ConstRef bias,
                                    ConstRef residual, int64_t n, int64_t c,
                                    const DropoutSpec& drop) {
  // Run by run (ForEachDropoutRun: whole rows under context parallelism, one run otherwise).
  return ForCompute(x.dtype, "BiasDropoutResidual", [&](auto tag) -> Status {
    using T = decltype(tag);
    return ForEachDropoutRun(drop, n * c, [&](int64_t at, int64_t count, uint64_t first) {
      PTDP_CHECK_MSG(at % c == 0 && count % c == 0, "dropout runs must be whole rows");
      PTDP_CUDA_RETURN(opk::BiasDropoutResidualMask<T>(
          P<T>(out) + at, mask.empty() ? nullptr : P<uint8_t>(mask) + at, P<T>(x) + at, P<T>(bias),
          residual.empty() ? nullptr : P<T>(residual) + at, count / c, c, drop.key, first, drop.p,
          stream_));
      return Status::Ok();
    });
  });
}

Status CudaOps::DropoutBackward(TensorRef dx, TensorRef dbias, ConstRef dy, ConstRef mask,
                                int64_t n, int64_t c, double p) {
  return ForCompute(dy.dtype, "DropoutBackward", [&](auto tag) -> Status {
    using T = decltype(tag);
    PTDP_CUDA_RETURN(
        opk::MaskedDropoutBackward<T>(P<T>(dx), P<T>(dy), P<uint8_t>(mask), n * c, p, stream_));
    if (!dbias.empty()) {
      PTDP_CUDA_RETURN(opk::BiasGradAccumulate<T>(P<float>(dbias), P<T>(dx), n, c, stream_));
    }
    return Status::Ok();
  });
}

Status CudaOps::Add(TensorRef out, ConstRef a, ConstRef b) {
  return ForCompute(out.dtype, "Add", [&](auto tag) -> Status {
    using T = decltype(tag);
    PTDP_CUDA_RETURN(opk::Add<T>(P<T>(out), P<T>(a), P<T>(b), out.count, stream_));
    return Status::Ok();
  });
}

Status CudaOps::Dropout(TensorRef x, TensorRef mask, const DropoutSpec& drop) {
  if (drop.p <= 0) return Status::Ok();
  return ForCompute(x.dtype, "Dropout", [&](auto tag) -> Status {
    using T = decltype(tag);
    return ForEachDropoutRun(drop, x.count, [&](int64_t at, int64_t count, uint64_t first) {
      PTDP_CUDA_RETURN(opk::BiasDropoutResidualMask<T>(P<T>(x) + at, P<uint8_t>(mask) + at,
                                                       P<T>(x) + at, nullptr, nullptr, 1, count,
                                                       drop.key, first, drop.p, stream_));
      return Status::Ok();
    });
  });
}

}  // namespace ptdp::runtime::cuda
