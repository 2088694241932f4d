// Device helpers of the fused attention kernels (attention.cu, context_attention.cu): the
// thread layout of a head row, group reductions, the attention dropout's draw, the per-row
// dout . out and the dQ write-back. Included only by .cu files.
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/reference/counter_rng.h"

namespace ptdp::cuda_kernels::attention {

constexpr int kFwdRows = 64;  // query rows per forward block
constexpr int kFwdKeys = 32;  // keys per forward tile
constexpr int kBwdKeys = 64;  // keys per backward block
constexpr int kBwdRows = 32;  // query rows per backward tile

// A row's G threads sum with xor-shuffles (GroupSum), so G is a power of two dividing the warp:
// D / 32 for the powers of two, 8 for multi-latent attention's 192 (DeepSeek-V3's 128 + 64
// query/key features: 24 elements a thread, in blocks of half the rows: FwdRowsOf, BwdKeysOf).
template <int D>
struct HeadLayout {
  static constexpr int G = D == 192 ? 8 : D >= 32 ? D / 32 : 1;  // threads per row
  static constexpr int E = D / G;                                // elements per thread
  static_assert((G & (G - 1)) == 0 && 32 % G == 0 && E * G == D, "a head width of its own");
};

// Query rows per forward block and keys per backward block: kFwdRows and kBwdKeys, but 32 for a
// head of 8 threads a row (192), so that a block stays at 256 threads and each may hold 255
// registers (kernels/cuda/attention.cu; the context-parallel kernels never see 192).
template <int D>
constexpr int FwdRowsOf() {
  return HeadLayout<D>::G > 4 ? 32 : kFwdRows;
}
template <int D>
constexpr int BwdKeysOf() {
  return HeadLayout<D>::G > 4 ? 32 : kBwdKeys;
}

// Dynamic shared memory of the backward block, in floats.
template <int D>
constexpr int BwdSharedFloats() {
  return 2 * kBwdRows * D + BwdKeysOf<D>() * D + kBwdRows * BwdKeysOf<D>() + 2 * kBwdRows;
}

// Offset of (batch bi, position i, head hh, part 0=q 1=k 2=v) in qkv [b*s][h][3][D].
__device__ __forceinline__ int64_t QkvOffset(int64_t bi, int64_t i, int64_t hh, int part, int64_t s,
                                             int64_t h, int d) {
  return ((bi * s + i) * h + hh) * 3 * d + static_cast<int64_t>(part) * d;
}

// Sum over the G threads of a row group (all lanes of the warp must call it).
template <int G>
__device__ __forceinline__ float GroupSum(float v) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

struct DropoutParams {
  uint64_t key;
  int64_t batch_begin, head_begin, h_total;
  float p, keep_scale;  // keep_scale = 1/(1-p)
};

// The dropout factor (0 or 1/(1-p)) of probability (bi, hh, i, j).
__device__ __forceinline__ float AttnDropFactor(const DropoutParams& dp, int64_t bi, int64_t hh,
                                                int64_t i, int64_t j, int64_t s) {
  if (dp.p <= 0.0f) return 1.0f;
  const uint64_t index = static_cast<uint64_t>(
      (((dp.batch_begin + bi) * dp.h_total + dp.head_begin + hh) * s + i) * s + j);
  return kernels::rng::DropoutKeeps(dp.key, index, dp.p) ? dp.keep_scale : 0.0f;
}

// delta[bi][hh][i] = dout_i . out_i (one warp per row).
template <typename T>
__global__ void AttnBwdDelta(float* delta, const T* dout, const T* out, int64_t b, int64_t s,
                             int64_t h, int d) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;  // (bi*s+i)*h+hh
  const int lane = threadIdx.x % 32;
  if (row >= b * s * h) return;
  float acc = 0.0f;
  for (int e = lane; e < d; e += 32) acc += ToFloat(dout[row * d + e]) * ToFloat(out[row * d + e]);
  acc = WarpSum(acc);
  if (lane == 0) {
    const int64_t hh = row % h, bs = row / h, bi = bs / s, i = bs % s;
    delta[(bi * h + hh) * s + i] = acc;
  }
}

// The q part of dqkv from the fp32 accumulators [b*s][h][d].
template <typename T>
__global__ void AttnBwdWriteDq(T* dqkv, const float* dq_acc, int64_t rows, int d) {
  const int64_t total = rows * d;  // rows = b * s * h
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = idx / d, e = idx % d;
    dqkv[row * 3 * d + e] = FromFloat<T>(dq_acc[idx]);
  }
}

inline DropoutParams MakeDropout(const AttentionDropout& d, int64_t h) {
  DropoutParams p;
  p.key = d.key;
  p.batch_begin = d.batch_begin;
  p.head_begin = d.head_begin;
  p.h_total = d.h_total > 0 ? d.h_total : h;
  p.p = d.p;
  p.keep_scale = d.p > 0.0f ? static_cast<float>(1.0 / (1.0 - static_cast<double>(d.p))) : 1.0f;
  return p;
}

}  // namespace ptdp::cuda_kernels::attention
