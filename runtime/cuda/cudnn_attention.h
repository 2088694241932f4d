// Causal self-attention on tensor cores through cuDNN 9's fused SDPA (flash attention), built with
// the cudnn-frontend graph API. CudaOps (cuda_ops_step.cc) uses it for bf16; kernels/cuda's own
// attention stays the reference and the path for fp32 and for whatever cuDNN refuses.
//
// Same contract as Ops::AttentionForward/Backward (runtime/backend/ops.h): qkv [b s][h][3][D]
// (q, k, v interleaved per head), out [b s][h D], lse fp32 [b][h][s] (natural-log log-sum-exp of
// the scaled scores; cuDNN's softmax "Stats"), scale 1/sqrt(D). cuDNN reads and writes these
// buffers in place through strides: no copies.
//
// Dropout: cuDNN draws its own Philox masks from a (seed, offset) pair, not ptdp's counter
// generator, so with p > 0 the masks differ from the CPU's (equal in distribution only; see
// docs/design-notes-runtime.md). The seed mixes the layer's dropout key with the microbatch's first
// global sequence and this rank's first global head, so microbatches and tensor ranks draw
// different masks; the backward, given the same key and shape, regenerates the forward's.
//
// Graphs are built once per (b, s, heads, D, p) and cached: a forward and its backward are built
// together, so a shape cuDNN refuses falls back as a whole (never a cuDNN forward with a
// kernels/cuda backward, whose dropout masks would not match).
// This header shows no cuDNN type: runtime/cuda's public headers stay free of cuDNN.
// Thread-safety: one thread at a time, like the CudaOps that owns it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "runtime/backend/ops.h"

namespace ptdp::runtime::cuda {

// Whether this build has the cuDNN path (configured with cuDNN and cudnn-frontend).
bool CudnnAttentionBuilt();

class CudnnAttention {
 public:
  // Device scratch of at least n bytes, valid until the next call (CudaOps::Scratch).
  using ScratchFn = std::function<Result<void*>(int64_t)>;

  // A cuDNN handle on `stream`; an error when cuDNN cannot start (or the build has no cuDNN).
  static Result<std::unique_ptr<CudnnAttention>> Create(cudaStream_t stream);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Builds (once) the forward and backward graphs of this shape and dropout. False when cuDNN
  // refuses either: the caller then runs its reference kernel; `why` says what cuDNN said.
  Result<bool> Supports(const AttentionShape& a, double p, std::string* why);

  // Both require Supports(a, p) to have returned true. key: the layer's dropout key.
  Status Forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, const AttentionShape& a,
                 double p, uint64_t key, const ScratchFn& scratch);
  Status Backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                  const __nv_bfloat16* out, const float* lse, const AttentionShape& a, double p,
                  uint64_t key, const ScratchFn& scratch);

 private:
  struct Impl;
  explicit CudnnAttention(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ptdp::runtime::cuda
