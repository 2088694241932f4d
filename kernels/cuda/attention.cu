// Fused causal attention, FlashAttention-2 style: the s x s score matrix never reaches memory.
//
// Forward: a block owns kFwdRows (FwdRowsOf) query rows of one (batch, head); it walks the
// key/value tiles up to the diagonal, keeping per row a running max m, running sum l and an
// unnormalised output o (online softmax: on a new tile, m' = max(m, tile max), l and o are
// rescaled by exp(m - m')). It writes out = o / l and lse = m + log(l).
//
// Backward: with delta_i = dout_i . out_i precomputed, a block owns kBwdKeys (BwdKeysOf) keys of
// one (batch, head) and walks the query tiles from the diagonal down; P is recomputed from lse,
// dK and dV accumulate in registers, and dQ = dS K is added with atomics into an fp32 workspace.
//
// Thread layout: G = max(1, D / 32) (8 for 192) consecutive threads share one row (query row
// forward, key row backward), thread `part` of the group holding elements e * G + part (e < D / G)
// so that the group reads consecutive shared-memory banks; dot products finish with xor-shuffles in
// the group. All arithmetic is fp32 (CUDA cores; a tensor-core version is future work). A sliding
// window W > 0 (model.window_size) masks keys j < i - W as well; the forward starts at the first
// tile a block's rows can see and the backward stops at the last query tile that sees a block's
// keys.
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace ptdp::cuda_kernels {
namespace {

using namespace attention;  // NOLINT: this file's own helpers (attention_common.cuh)

template <typename T, int D>
__global__ void __launch_bounds__(FwdRowsOf<D>() * HeadLayout<D>::G)
    AttnFwdOnlineSoftmax(T* out, float* lse, const T* qkv, int64_t s, int64_t h, DropoutParams dp,
                         int64_t window) {
  constexpr int G = HeadLayout<D>::G, E = HeadLayout<D>::E, kRows = FwdRowsOf<D>();
  __shared__ float ks[kFwdKeys][D];
  __shared__ float vs[kFwdKeys][D];
  const int64_t bh = blockIdx.y, bi = bh / h, hh = bh % h;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int part = threadIdx.x % G;
  const int64_t i = q0 + threadIdx.x / G;
  const bool row_active = i < s;
  const float scale = rsqrtf(static_cast<float>(D));

  float q[E], o[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    q[e] =
        row_active ? ToFloat(qkv[QkvOffset(bi, i, hh, 0, s, h, D) + e * G + part]) * scale : 0.0f;
    o[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int64_t last_row = min(q0 + kRows, s);  // exclusive
  const int64_t tiles = (last_row + kFwdKeys - 1) / kFwdKeys;
  const int64_t first_tile = window > 0 ? max(q0 - window, int64_t(0)) / kFwdKeys : 0;
  for (int64_t kt = first_tile; kt < tiles; ++kt) {
    const int64_t k0 = kt * kFwdKeys;
    __syncthreads();  // the previous tile is no longer read
    for (int idx = threadIdx.x; idx < kFwdKeys * D; idx += blockDim.x) {
      const int jj = idx / D, e = idx % D;
      const int64_t j = k0 + jj;
      ks[jj][e] = j < s ? ToFloat(qkv[QkvOffset(bi, j, hh, 1, s, h, D) + e]) : 0.0f;
      vs[jj][e] = j < s ? ToFloat(qkv[QkvOffset(bi, j, hh, 2, s, h, D) + e]) : 0.0f;
    }
    __syncthreads();
    float sc[kFwdKeys];
    float tile_max = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < kFwdKeys; ++jj) {
      float partial = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) partial += q[e] * ks[jj][e * G + part];
      const float score = GroupSum<G>(partial);
      const int64_t j = k0 + jj;
      sc[jj] = (row_active && j <= i && (window == 0 || j >= i - window)) ? score : -INFINITY;
      tile_max = fmaxf(tile_max, sc[jj]);
    }
    const float m_new = fmaxf(m, tile_max);
    if (m_new == -INFINITY) continue;    // no visible key yet (inactive row): nothing to add
    const float corr = expf(m - m_new);  // 0 when m == -inf
    l *= corr;
#pragma unroll
    for (int e = 0; e < E; ++e) o[e] *= corr;
#pragma unroll
    for (int jj = 0; jj < kFwdKeys; ++jj) {
      const float p = expf(sc[jj] - m_new);  // 0 for masked keys
      l += p;
      const float pd = p == 0.0f ? 0.0f : p * AttnDropFactor(dp, bi, hh, i, k0 + jj, s);
#pragma unroll
      for (int e = 0; e < E; ++e) o[e] += pd * vs[jj][e * G + part];
    }
    m = m_new;
  }
  if (!row_active) return;
  const float inv_l = 1.0f / l;
  T* orow = out + (bi * s + i) * h * D + hh * D;
#pragma unroll
  for (int e = 0; e < E; ++e) orow[e * G + part] = FromFloat<T>(o[e] * inv_l);
  if (part == 0) lse[bh * s + i] = m + logf(l);
}

template <typename T, int D>
__global__ void __launch_bounds__(BwdKeysOf<D>() * HeadLayout<D>::G)
    AttnBwdKeyBlock(T* dqkv, float* dq_acc, const T* dout, const T* qkv, const float* lse,
                    const float* delta, int64_t s, int64_t h, DropoutParams dp, int64_t window) {
  constexpr int G = HeadLayout<D>::G, E = HeadLayout<D>::E, kKeys = BwdKeysOf<D>();
  extern __shared__ float smem[];
  float(*qs)[D] = reinterpret_cast<float(*)[D]>(smem);                     // [kBwdRows][D]
  float(*dos)[D] = reinterpret_cast<float(*)[D]>(smem + kBwdRows * D);     // [kBwdRows][D]
  float(*ks)[D] = reinterpret_cast<float(*)[D]>(smem + 2 * kBwdRows * D);  // [kKeys][D]
  float(*dss)[kKeys] =
      reinterpret_cast<float(*)[kKeys]>(smem + 2 * kBwdRows * D + kKeys * D);  // [rows][keys]
  float* lse_s = smem + 2 * kBwdRows * D + kKeys * D + kBwdRows * kKeys;
  float* delta_s = lse_s + kBwdRows;

  const int64_t bh = blockIdx.y, bi = bh / h, hh = bh % h;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kKeys;
  const int part = threadIdx.x % G;
  const int key_local = threadIdx.x / G;
  const int64_t j = k0 + key_local;
  const bool key_active = j < s;
  const float scale = rsqrtf(static_cast<float>(D));

  float k[E], v[E], dk[E], dv[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    k[e] = key_active ? ToFloat(qkv[QkvOffset(bi, j, hh, 1, s, h, D) + e * G + part]) : 0.0f;
    v[e] = key_active ? ToFloat(qkv[QkvOffset(bi, j, hh, 2, s, h, D) + e * G + part]) : 0.0f;
    dk[e] = 0.0f;
    dv[e] = 0.0f;
  }
  for (int idx = threadIdx.x; idx < kKeys * D; idx += blockDim.x) {
    const int jj = idx / D, e = idx % D;
    ks[jj][e] = k0 + jj < s ? ToFloat(qkv[QkvOffset(bi, k0 + jj, hh, 1, s, h, D) + e]) : 0.0f;
  }

  const int64_t all_tiles = (s + kBwdRows - 1) / kBwdRows;
  // With a window the block's last key is seen by queries up to k0 + kKeys - 1 + window.
  const int64_t tiles =
      window > 0 ? min(all_tiles, (k0 + kKeys + window + kBwdRows - 1) / kBwdRows) : all_tiles;
  for (int64_t qt = k0 / kBwdRows; qt < tiles; ++qt) {
    const int64_t i0 = qt * kBwdRows;
    __syncthreads();  // previous tile's qs/dos/dss are no longer read (and ks is written)
    for (int idx = threadIdx.x; idx < kBwdRows * D; idx += blockDim.x) {
      const int r = idx / D, e = idx % D;
      const int64_t i = i0 + r;
      qs[r][e] = i < s ? ToFloat(qkv[QkvOffset(bi, i, hh, 0, s, h, D) + e]) : 0.0f;
      dos[r][e] = i < s ? ToFloat(dout[(bi * s + i) * h * D + hh * D + e]) : 0.0f;
    }
    for (int r = threadIdx.x; r < kBwdRows; r += blockDim.x) {
      const int64_t i = i0 + r;
      lse_s[r] = i < s ? lse[bh * s + i] : 0.0f;
      delta_s[r] = i < s ? delta[bh * s + i] : 0.0f;
    }
    __syncthreads();
    for (int r = 0; r < kBwdRows; ++r) {
      const int64_t i = i0 + r;
      float qk = 0.0f, dov = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        qk += qs[r][e * G + part] * k[e];
        dov += dos[r][e * G + part] * v[e];
      }
      qk = GroupSum<G>(qk);
      dov = GroupSum<G>(dov);
      const bool visible = key_active && i < s && j <= i && (window == 0 || i - j <= window);
      const float p = visible ? expf(qk * scale - lse_s[r]) : 0.0f;
      const float drop = visible ? AttnDropFactor(dp, bi, hh, i, j, s) : 0.0f;
      const float ds = p * (drop * dov - delta_s[r]) * scale;  // dS, with the score's scale
#pragma unroll
      for (int e = 0; e < E; ++e) {
        dv[e] += p * drop * dos[r][e * G + part];
        dk[e] += ds * qs[r][e * G + part];
      }
      if (part == 0) dss[r][key_local] = ds;
    }
    __syncthreads();
    // dQ[i] += sum over this block's keys of dS[i][j] K[j].
    for (int idx = threadIdx.x; idx < kBwdRows * D; idx += blockDim.x) {
      const int r = idx / D, e = idx % D;
      const int64_t i = i0 + r;
      if (i >= s) continue;
      float acc = 0.0f;
#pragma unroll 8
      for (int jj = 0; jj < kKeys; ++jj) acc += dss[r][jj] * ks[jj][e];
      atomicAdd(dq_acc + ((bi * s + i) * h + hh) * D + e, acc);
    }
  }
  if (!key_active) return;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    dqkv[QkvOffset(bi, j, hh, 1, s, h, D) + e * G + part] = FromFloat<T>(dk[e]);
    dqkv[QkvOffset(bi, j, hh, 2, s, h, D) + e * G + part] = FromFloat<T>(dv[e]);
  }
}

template <typename T, int D>
void LaunchForward(T* out, float* lse, const T* qkv, int64_t b, int64_t s, int64_t h,
                   const DropoutParams& dp, int64_t window, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((s + FwdRowsOf<D>() - 1) / FwdRowsOf<D>()),
                  static_cast<unsigned>(b * h));
  AttnFwdOnlineSoftmax<T, D>
      <<<grid, FwdRowsOf<D>() * HeadLayout<D>::G, 0, stream>>>(out, lse, qkv, s, h, dp, window);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T, int D>
void LaunchBackwardKeys(T* dqkv, float* dq_acc, const T* dout, const T* qkv, const float* lse,
                        const float* delta, int64_t b, int64_t s, int64_t h,
                        const DropoutParams& dp, int64_t window, cudaStream_t stream) {
  constexpr int kSmemBytes = BwdSharedFloats<D>() * static_cast<int>(sizeof(float));
  PTDP_CUDA_CHECK(cudaFuncSetAttribute(AttnBwdKeyBlock<T, D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const dim3 grid(static_cast<unsigned>((s + BwdKeysOf<D>() - 1) / BwdKeysOf<D>()),
                  static_cast<unsigned>(b * h));
  AttnBwdKeyBlock<T, D><<<grid, BwdKeysOf<D>() * HeadLayout<D>::G, kSmemBytes, stream>>>(
      dqkv, dq_acc, dout, qkv, lse, delta, s, h, dp, window);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool AttentionSupportsHeadDim(int64_t d) {
  return d == 16 || d == 32 || d == 64 || d == 128 || d == 192;
}

int64_t AttentionBackwardWorkspaceFloats(int64_t b, int64_t s, int64_t h, int64_t d) {
  return b * s * h * d + b * h * s;
}

template <typename T>
void AttentionForward(T* out, float* lse, const T* qkv, int64_t b, int64_t s, int64_t h, int64_t d,
                      AttentionDropout dropout, cudaStream_t stream, int64_t window) {
  PTDP_CHECK_MSG(AttentionSupportsHeadDim(d),
                 "attention head dim " + std::to_string(d) + " is not one of 16, 32, 64, 128, 192");
  if (b * s * h == 0) return;
  const DropoutParams dp = MakeDropout(dropout, h);
  switch (d) {
    case 16:
      return LaunchForward<T, 16>(out, lse, qkv, b, s, h, dp, window, stream);
    case 32:
      return LaunchForward<T, 32>(out, lse, qkv, b, s, h, dp, window, stream);
    case 64:
      return LaunchForward<T, 64>(out, lse, qkv, b, s, h, dp, window, stream);
    case 192:
      return LaunchForward<T, 192>(out, lse, qkv, b, s, h, dp, window, stream);
    default:
      return LaunchForward<T, 128>(out, lse, qkv, b, s, h, dp, window, stream);
  }
}

template <typename T>
void AttentionBackward(T* dqkv, float* workspace, const T* dout, const T* qkv, const T* out,
                       const float* lse, int64_t b, int64_t s, int64_t h, int64_t d,
                       AttentionDropout dropout, cudaStream_t stream, int64_t window) {
  PTDP_CHECK_MSG(AttentionSupportsHeadDim(d),
                 "attention head dim " + std::to_string(d) + " is not one of 16, 32, 64, 128, 192");
  if (b * s * h == 0) return;
  const DropoutParams dp = MakeDropout(dropout, h);
  float* dq_acc = workspace;
  float* delta = workspace + b * s * h * d;
  PTDP_CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, sizeof(float) * b * s * h * d, stream));
  const int64_t rows = b * s * h;
  AttnBwdDelta<T>
      <<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(delta, dout, out, b, s, h, d);
  PTDP_CUDA_CHECK(cudaGetLastError());
  switch (d) {
    case 16:
      LaunchBackwardKeys<T, 16>(dqkv, dq_acc, dout, qkv, lse, delta, b, s, h, dp, window, stream);
      break;
    case 32:
      LaunchBackwardKeys<T, 32>(dqkv, dq_acc, dout, qkv, lse, delta, b, s, h, dp, window, stream);
      break;
    case 64:
      LaunchBackwardKeys<T, 64>(dqkv, dq_acc, dout, qkv, lse, delta, b, s, h, dp, window, stream);
      break;
    case 192:
      LaunchBackwardKeys<T, 192>(dqkv, dq_acc, dout, qkv, lse, delta, b, s, h, dp, window, stream);
      break;
    default:
      LaunchBackwardKeys<T, 128>(dqkv, dq_acc, dout, qkv, lse, delta, b, s, h, dp, window, stream);
      break;
  }
  AttnBwdWriteDq<T><<<GridFor(rows * d, 256), 256, 0, stream>>>(dqkv, dq_acc, rows, d);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

#define PTDP_INSTANTIATE(T)                                                                   \
  template void AttentionForward<T>(T*, float*, const T*, int64_t, int64_t, int64_t, int64_t, \
                                    AttentionDropout, cudaStream_t, int64_t);                 \
  template void AttentionBackward<T>(T*, float*, const T*, const T*, const T*, const float*,  \
                                     int64_t, int64_t, int64_t, int64_t, AttentionDropout,    \
                                     cudaStream_t, int64_t);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(bf16)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda_kernels
