// Context-parallel attention (kernels/cuda/ops.h ContextAttention*; the reference twin is
// kernels/reference/context_attention.cc): attention.cu's online-softmax forward and key-block
// backward, with every query and key at its global position (kernels/reference/context_chunks.h).
// Forward: a block owns kFwdRows (FwdRowsOf: 32 for 192) local query rows of one (batch, head) and
// walks the global key positions up to its last row's, reading each key from the rank that holds it
// in kv_all. Backward (one source rank's keys at a time): a block owns kBwdKeys (BwdKeysOf) of the
// source's keys and walks every local query tile whose last position reaches its first key; dK and
// dV are written for the source, dQ accumulates with atomics in an fp32 workspace and is then added
// into dqkv.
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/reference/context_chunks.h"

namespace ptdp::cuda_kernels {
namespace {

using namespace attention;  // NOLINT: the fused attention's helpers (attention_common.cuh)

// Offset of (batch bi, local row t, head hh, part) in a [b][S][h][parts][D] tensor.
__device__ __forceinline__ int64_t PackOffset(int64_t bi, int64_t t, int64_t hh, int part,
                                              int parts, int64_t S, int64_t h, int d) {
  return ((bi * S + t) * h + hh) * parts * d + static_cast<int64_t>(part) * d;
}

template <typename T, int D>
__global__ void __launch_bounds__(FwdRowsOf<D>() * HeadLayout<D>::G)
    CtxAttnFwd(T* out, float* lse, const T* qkv, const T* kv_all, int64_t b,
               kernels::ContextChunks chunks, int64_t h, DropoutParams dp) {
  constexpr int G = HeadLayout<D>::G, E = HeadLayout<D>::E, kRows = FwdRowsOf<D>();
  __shared__ float ks[kFwdKeys][D];
  __shared__ float vs[kFwdKeys][D];
  const int64_t S = chunks.Local(), s = chunks.s, rank_stride = b * S * h * 2 * D;
  const int64_t bh = blockIdx.y, bi = bh / h, hh = bh % h;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int part = threadIdx.x % G;
  const int64_t t = q0 + threadIdx.x / G;
  const bool row_active = t < S;
  const int64_t qi = row_active ? chunks.Position(t) : -1;
  const float scale = rsqrtf(static_cast<float>(D));

  float q[E], o[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    q[e] = row_active ? ToFloat(qkv[PackOffset(bi, t, hh, 0, 3, S, h, D) + e * G + part]) * scale
                      : 0.0f;
    o[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  // Positions grow with the local row (the second chunk lies after the first), so the block's
  // last row sees the most keys.
  const int64_t last_row = min(q0 + kRows, S);  // exclusive
  const int64_t keys = chunks.Position(last_row - 1) + 1;
  const int64_t tiles = (keys + kFwdKeys - 1) / kFwdKeys;
  for (int64_t kt = 0; kt < tiles; ++kt) {
    const int64_t k0 = kt * kFwdKeys;
    __syncthreads();  // the previous tile is no longer read
    for (int idx = threadIdx.x; idx < kFwdKeys * D; idx += blockDim.x) {
      const int jj = idx / D, e = idx % D;
      const int64_t j = k0 + jj;
      const T* at = j < s ? kv_all + chunks.Owner(j) * rank_stride +
                                PackOffset(bi, chunks.LocalOf(j), hh, 0, 2, S, h, D)
                          : nullptr;
      ks[jj][e] = at != nullptr ? ToFloat(at[e]) : 0.0f;
      vs[jj][e] = at != nullptr ? ToFloat(at[D + e]) : 0.0f;
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
      sc[jj] = (row_active && k0 + jj <= qi) ? score : -INFINITY;
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
      const float pd = p == 0.0f ? 0.0f : p * AttnDropFactor(dp, bi, hh, qi, k0 + jj, s);
#pragma unroll
      for (int e = 0; e < E; ++e) o[e] += pd * vs[jj][e * G + part];
    }
    m = m_new;
  }
  if (!row_active) return;
  const float inv_l = 1.0f / l;
  T* orow = out + (bi * S + t) * h * D + hh * D;
#pragma unroll
  for (int e = 0; e < E; ++e) orow[e * G + part] = FromFloat<T>(o[e] * inv_l);
  if (part == 0) lse[bh * S + t] = m + logf(l);
}

template <typename T, int D>
__global__ void __launch_bounds__(BwdKeysOf<D>() * HeadLayout<D>::G)
    CtxAttnBwdKeys(T* dkv_src, float* dq_acc, const T* dout, const T* qkv, const T* kv_src,
                   const float* lse, const float* delta, kernels::ContextChunks mine,
                   kernels::ContextChunks theirs, int64_t h, DropoutParams dp) {
  constexpr int G = HeadLayout<D>::G, E = HeadLayout<D>::E, kKeys = BwdKeysOf<D>();
  extern __shared__ float smem[];
  float(*qs)[D] = reinterpret_cast<float(*)[D]>(smem);                     // [kBwdRows][D]
  float(*dos)[D] = reinterpret_cast<float(*)[D]>(smem + kBwdRows * D);     // [kBwdRows][D]
  float(*ks)[D] = reinterpret_cast<float(*)[D]>(smem + 2 * kBwdRows * D);  // [kKeys][D]
  float(*dss)[kKeys] =
      reinterpret_cast<float(*)[kKeys]>(smem + 2 * kBwdRows * D + kKeys * D);  // [rows][keys]
  float* lse_s = smem + 2 * kBwdRows * D + kKeys * D + kBwdRows * kKeys;
  float* delta_s = lse_s + kBwdRows;

  const int64_t S = mine.Local(), s = mine.s;
  const int64_t bh = blockIdx.y, bi = bh / h, hh = bh % h;
  const int64_t u0 = static_cast<int64_t>(blockIdx.x) * kKeys;
  const int part = threadIdx.x % G;
  const int key_local = threadIdx.x / G;
  const int64_t u = u0 + key_local;
  const bool key_active = u < S;
  const int64_t kj = key_active ? theirs.Position(u) : s;  // beyond every query when inactive
  const float scale = rsqrtf(static_cast<float>(D));

  float k[E], v[E], dk[E], dv[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int64_t at = PackOffset(bi, u, hh, 0, 2, S, h, D) + e * G + part;
    k[e] = key_active ? ToFloat(kv_src[at]) : 0.0f;
    v[e] = key_active ? ToFloat(kv_src[at + D]) : 0.0f;
    dk[e] = 0.0f;
    dv[e] = 0.0f;
  }
  for (int idx = threadIdx.x; idx < kKeys * D; idx += blockDim.x) {
    const int jj = idx / D, e = idx % D;
    ks[jj][e] =
        u0 + jj < S ? ToFloat(kv_src[PackOffset(bi, u0 + jj, hh, 0, 2, S, h, D) + e]) : 0.0f;
  }
  const int64_t first_key = theirs.Position(u0);  // the block's smallest position
  const int64_t tiles = (S + kBwdRows - 1) / kBwdRows;
  for (int64_t qt = 0; qt < tiles; ++qt) {
    const int64_t i0 = qt * kBwdRows;
    // Every thread of the block takes the same branch: no query of the tile sees a key here.
    if (mine.Position(min(i0 + kBwdRows, S) - 1) < first_key) continue;
    __syncthreads();  // previous tile's qs/dos/dss are no longer read (and ks is written)
    for (int idx = threadIdx.x; idx < kBwdRows * D; idx += blockDim.x) {
      const int r = idx / D, e = idx % D;
      const int64_t i = i0 + r;
      qs[r][e] = i < S ? ToFloat(qkv[PackOffset(bi, i, hh, 0, 3, S, h, D) + e]) : 0.0f;
      dos[r][e] = i < S ? ToFloat(dout[(bi * S + i) * h * D + hh * D + e]) : 0.0f;
    }
    for (int r = threadIdx.x; r < kBwdRows; r += blockDim.x) {
      const int64_t i = i0 + r;
      lse_s[r] = i < S ? lse[bh * S + i] : 0.0f;
      delta_s[r] = i < S ? delta[bh * S + i] : 0.0f;
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
      const int64_t qi = i < S ? mine.Position(i) : -1;
      const bool visible = key_active && i < S && kj <= qi;
      const float p = visible ? expf(qk * scale - lse_s[r]) : 0.0f;
      const float drop = visible ? AttnDropFactor(dp, bi, hh, qi, kj, s) : 0.0f;
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
      if (i >= S) continue;
      float acc = 0.0f;
#pragma unroll 8
      for (int jj = 0; jj < kKeys; ++jj) acc += dss[r][jj] * ks[jj][e];
      atomicAdd(dq_acc + ((bi * S + i) * h + hh) * D + e, acc);
    }
  }
  if (!key_active) return;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int64_t at = PackOffset(bi, u, hh, 0, 2, S, h, D) + e * G + part;
    dkv_src[at] = FromFloat<T>(dk[e]);
    dkv_src[at + D] = FromFloat<T>(dv[e]);
  }
}

// dqkv's query slots += the fp32 accumulators [rows][d] (rows = b S h).
template <typename T>
__global__ void CtxAttnAddDq(T* dqkv, const float* dq_acc, int64_t rows, int d) {
  const int64_t total = rows * d;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = idx / d, e = idx % d;
    T* at = dqkv + row * 3 * d + e;
    *at = FromFloat<T>(ToFloat(*at) + dq_acc[idx]);
  }
}

// Copies `width` of every `from_stride` elements (from offset `from_at`) into rows of
// `to_stride` (at `to_at`): the key-value pack of qkv and the gradient's way back.
template <typename T>
__global__ void CtxCopyRows(T* to, const T* from, int64_t rows, int width, int to_stride, int to_at,
                            int from_stride, int from_at) {
  const int64_t total = rows * width;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = idx / width, e = idx % width;
    to[row * to_stride + to_at + e] = from[row * from_stride + from_at + e];
  }
}

template <typename T, int D>
void LaunchCtxForward(T* out, float* lse, const T* qkv, const T* kv_all, const ContextDims& c,
                      const DropoutParams& dp, cudaStream_t stream) {
  const kernels::ContextChunks chunks{c.s, c.cp, c.rank};
  constexpr int kRows = FwdRowsOf<D>();
  const dim3 grid(static_cast<unsigned>((chunks.Local() + kRows - 1) / kRows),
                  static_cast<unsigned>(c.b * c.h));
  CtxAttnFwd<T, D>
      <<<grid, kRows * HeadLayout<D>::G, 0, stream>>>(out, lse, qkv, kv_all, c.b, chunks, c.h, dp);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T, int D>
void LaunchCtxBackwardKeys(T* dkv_src, float* dq_acc, const T* dout, const T* qkv, const T* kv_src,
                           const float* lse, const float* delta, const ContextDims& c, int src,
                           const DropoutParams& dp, cudaStream_t stream) {
  constexpr int kSmemBytes = BwdSharedFloats<D>() * static_cast<int>(sizeof(float));
  PTDP_CUDA_CHECK(cudaFuncSetAttribute(CtxAttnBwdKeys<T, D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const kernels::ContextChunks mine{c.s, c.cp, c.rank}, theirs{c.s, c.cp, src};
  constexpr int kKeys = BwdKeysOf<D>();
  const dim3 grid(static_cast<unsigned>((mine.Local() + kKeys - 1) / kKeys),
                  static_cast<unsigned>(c.b * c.h));
  CtxAttnBwdKeys<T, D><<<grid, kKeys * HeadLayout<D>::G, kSmemBytes, stream>>>(
      dkv_src, dq_acc, dout, qkv, kv_src, lse, delta, mine, theirs, c.h, dp);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

void CheckContextDims(const ContextDims& c) {
  PTDP_CHECK_MSG(
      AttentionSupportsHeadDim(c.d),
      "context attention head dim " + std::to_string(c.d) + " is not one of 16, 32, 64, 128, 192");
  PTDP_CHECK_MSG(c.cp >= 1 && c.rank >= 0 && c.rank < c.cp && c.s % (2 * c.cp) == 0,
                 "context attention: s = " + std::to_string(c.s) +
                     " is not split by cp = " + std::to_string(c.cp));
}

}  // namespace

template <typename T>
void ContextKvPack(T* kv, const T* qkv, int64_t rows, int64_t h, int64_t d, cudaStream_t stream) {
  const int64_t n = rows * h;
  if (n == 0) return;
  CtxCopyRows<T><<<GridFor(n * 2 * d, 256), 256, 0, stream>>>(
      kv, qkv, n, static_cast<int>(2 * d), static_cast<int>(2 * d), 0, static_cast<int>(3 * d),
      static_cast<int>(d));
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void ContextKvUnpack(T* dqkv, const T* dkv, int64_t rows, int64_t h, int64_t d,
                     cudaStream_t stream) {
  const int64_t n = rows * h;
  if (n == 0) return;
  CtxCopyRows<T><<<GridFor(n * 2 * d, 256), 256, 0, stream>>>(
      dqkv, dkv, n, static_cast<int>(2 * d), static_cast<int>(3 * d), static_cast<int>(d),
      static_cast<int>(2 * d), 0);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

int64_t ContextAttentionBackwardWorkspaceFloats(const ContextDims& c) {
  const int64_t S = c.s / c.cp;
  return c.b * S * c.h * c.d + c.b * c.h * S;
}

template <typename T>
void ContextAttentionForward(T* out, float* lse, const T* qkv, const T* kv_all, ContextDims c,
                             AttentionDropout dropout, cudaStream_t stream) {
  CheckContextDims(c);
  if (c.b * c.s * c.h == 0) return;
  const DropoutParams dp = MakeDropout(dropout, c.h);
  switch (c.d) {
    case 16:
      return LaunchCtxForward<T, 16>(out, lse, qkv, kv_all, c, dp, stream);
    case 32:
      return LaunchCtxForward<T, 32>(out, lse, qkv, kv_all, c, dp, stream);
    case 64:
      return LaunchCtxForward<T, 64>(out, lse, qkv, kv_all, c, dp, stream);
    case 192:
      return LaunchCtxForward<T, 192>(out, lse, qkv, kv_all, c, dp, stream);
    default:
      return LaunchCtxForward<T, 128>(out, lse, qkv, kv_all, c, dp, stream);
  }
}

template <typename T>
void ContextAttentionBackward(T* dqkv, T* dkv_src, float* workspace, const T* dout, const T* out,
                              const T* qkv, const T* kv_src, const float* lse, ContextDims c,
                              int src, AttentionDropout dropout, cudaStream_t stream) {
  CheckContextDims(c);
  if (c.b * c.s * c.h == 0) return;
  const DropoutParams dp = MakeDropout(dropout, c.h);
  const int64_t S = c.s / c.cp, rows = c.b * S * c.h;
  float* dq_acc = workspace;
  float* delta = workspace + rows * c.d;
  PTDP_CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, sizeof(float) * rows * c.d, stream));
  AttnBwdDelta<T><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(delta, dout, out, c.b,
                                                                             S, c.h, c.d);
  PTDP_CUDA_CHECK(cudaGetLastError());
  switch (c.d) {
    case 16:
      LaunchCtxBackwardKeys<T, 16>(dkv_src, dq_acc, dout, qkv, kv_src, lse, delta, c, src, dp,
                                   stream);
      break;
    case 32:
      LaunchCtxBackwardKeys<T, 32>(dkv_src, dq_acc, dout, qkv, kv_src, lse, delta, c, src, dp,
                                   stream);
      break;
    case 64:
      LaunchCtxBackwardKeys<T, 64>(dkv_src, dq_acc, dout, qkv, kv_src, lse, delta, c, src, dp,
                                   stream);
      break;
    case 192:
      LaunchCtxBackwardKeys<T, 192>(dkv_src, dq_acc, dout, qkv, kv_src, lse, delta, c, src, dp,
                                    stream);
      break;
    default:
      LaunchCtxBackwardKeys<T, 128>(dkv_src, dq_acc, dout, qkv, kv_src, lse, delta, c, src, dp,
                                    stream);
      break;
  }
  CtxAttnAddDq<T><<<GridFor(rows * c.d, 256), 256, 0, stream>>>(dqkv, dq_acc, rows, c.d);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

#define PTDP_INSTANTIATE(T)                                                                \
  template void ContextKvPack<T>(T*, const T*, int64_t, int64_t, int64_t, cudaStream_t);   \
  template void ContextKvUnpack<T>(T*, const T*, int64_t, int64_t, int64_t, cudaStream_t); \
  template void ContextAttentionForward<T>(T*, float*, const T*, const T*, ContextDims,    \
                                           AttentionDropout, cudaStream_t);                \
  template void ContextAttentionBackward<T>(T*, T*, float*, const T*, const T*, const T*,  \
                                            const T*, const float*, ContextDims, int,      \
                                            AttentionDropout, cudaStream_t);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(bf16)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda_kernels
