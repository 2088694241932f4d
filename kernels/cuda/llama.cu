// The kernels of Llama-style layers (kernels/cuda/ops.h): RMSNorm with one warp per row and a
// column reduction for the weight gradient, SwiGLU elementwise, the rotary embedding with one
// thread per rotated pair, Qwen3's QK norm (RMSNorm's kernels over the head rows of qkv), and the
// copy of a grouped QKV to multi-head rows and the sum back of their gradients. Twins of
// kernels/reference/llama_ops.cc, in fp32 arithmetic.
#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/reference/context_chunks.h"
#include "kernels/reference/qkv_layout.h"

namespace ptdp::cuda_kernels {
namespace {

constexpr int kWarpsPerBlock = 8;

template <typename T>
__global__ void RmsNormFwdWarpPerRow(T* out, float* rstd, const T* x, const T* weight, int64_t n,
                                     int64_t c, float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;  // whole warps leave together
  const T* xr = x + row * c;
  float sq = 0.0f;
  for (int64_t i = lane; i < c; i += 32) {
    const float v = ToFloat(xr[i]);
    sq += v * v;
  }
  const float rs = rsqrtf(WarpSum(sq) / static_cast<float>(c) + eps);
  T* o = out + row * c;
  for (int64_t i = lane; i < c; i += 32)
    o[i] = FromFloat<T>(ToFloat(xr[i]) * rs * ToFloat(weight[i]));
  if (lane == 0) rstd[row] = rs;
}

// dx = rstd (g - x rstd^2 mean(g x)), g = dout * weight.
template <typename T>
__global__ void RmsNormBwdDxWarpPerRow(T* dx, const T* dout, const T* x, const T* weight,
                                       const float* rstd, int64_t n, int64_t c) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const T* xr = x + row * c;
  const T* dr = dout + row * c;
  const float rs = rstd[row];
  float gx = 0.0f;
  for (int64_t i = lane; i < c; i += 32) gx += ToFloat(dr[i]) * ToFloat(weight[i]) * ToFloat(xr[i]);
  const float gx_mean = WarpSum(gx) / static_cast<float>(c);
  T* o = dx + row * c;
  for (int64_t i = lane; i < c; i += 32) {
    const float g = ToFloat(dr[i]) * ToFloat(weight[i]);
    o[i] = FromFloat<T>(rs * (g - ToFloat(xr[i]) * rs * rs * gx_mean));
  }
}

// dweight[col] += sum_r dout x rstd. Block (32 columns) x (8 row lanes), as LayerNorm's.
template <typename T>
__global__ void RmsNormBwdWeightColumns(float* dweight, const T* dout, const T* x,
                                        const float* rstd, int64_t n, int64_t c) {
  __shared__ float sw[8][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.0f;
  if (col < c) {
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; r < n;
         r += static_cast<int64_t>(gridDim.y) * 8) {
      acc += ToFloat(dout[r * c + col]) * ToFloat(x[r * c + col]) * rstd[r];
    }
  }
  sw[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < c) {
    float t = 0.0f;
    for (int k = 0; k < 8; ++k) t += sw[k][threadIdx.x];
    atomicAdd(dweight + col, t);
  }
}

__device__ __forceinline__ float Sigmoid(float z) {
  return 1.0f / (1.0f + expf(-z));
}

template <typename T>
__global__ void SwigluFwd(T* out, const T* in, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gate = ToFloat(in[2 * i]), up = ToFloat(in[2 * i + 1]);
    out[i] = FromFloat<T>(gate * Sigmoid(gate) * up);
  }
}

template <typename T>
__global__ void SwigluBwd(T* din, const T* in, const T* dout, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gate = ToFloat(in[2 * i]), up = ToFloat(in[2 * i + 1]), g = ToFloat(dout[i]);
    const float sig = Sigmoid(gate);
    din[2 * i] = FromFloat<T>(g * up * sig * (1.0f + gate * (1.0f - sig)));
    din[2 * i + 1] = FromFloat<T>(g * gate * sig);
  }
}

template <typename T>
__global__ void SquaredReluFwd(T* out, const T* in, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float r = fmaxf(ToFloat(in[i]), 0.0f);
    out[i] = FromFloat<T>(r * r);
  }
}

template <typename T>
__global__ void SquaredReluBwd(T* din, const T* in, const T* dout, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    din[i] = FromFloat<T>(2.0f * fmaxf(ToFloat(in[i]), 0.0f) * ToFloat(dout[i]));
  }
}

// One thread per (row, rotated head, pair e < rotated / 2): the rotated heads of a row are its
// query heads, then its key heads; partial rotation (r.rope.percent) leaves a head's other
// features.

template <typename T>
__global__ void RotaryPairs(T* qkv, RotaryDims r, float sign) {
  const kernels::ContextChunks chunks{r.s, r.cp, r.rank};
  const kernels::QkvLayout row{r.h, r.d, r.group};
  const int64_t rotated = kernels::RotatedFeatures(r.d, r.rope), half = rotated / 2;
  const int64_t heads = r.h + row.KvHeads(), S = chunks.Local();
  const int64_t total = r.b * S * heads * half;
  const auto ramp =
      r.rope.yarn ? kernels::YarnRampOf<float>(rotated, r.rope) : kernels::YarnRamp<float>{};
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i % half, head = (i / half) % heads, n = i / (half * heads);
    const int64_t at = head < r.h ? row.Q(head) : row.KvOf(head - r.h);
    T* x = qkv + n * row.Width() + at;
    const float pos = static_cast<float>(chunks.Position(n % S));
    const float angle = pos * kernels::RopeInvFreq<float>(e, rotated, r.rope, ramp);
    float sn, cs;
    sincosf(angle, &sn, &cs);
    const float scale = static_cast<float>(r.rope.attention_factor);  // 1 but under YaRN
    cs *= scale;
    sn *= sign * scale;
    const float x1 = ToFloat(x[e]), x2 = ToFloat(x[e + half]);
    x[e] = FromFloat<T>(x1 * cs - x2 * sn);
    x[e + half] = FromFloat<T>(x2 * cs + x1 * sn);
  }
}

// The QK norm's slots (kernels/reference/ops.h QkNormForward): slot u of key/value head g of a row
// is its u-th query head (u < group) or its key (u = group); `slot` counts them over the rows.
struct QkSlots {
  kernels::QkvLayout row;
  int64_t rows = 0;
  __host__ __device__ int64_t PerRow() const { return row.KvHeads() * (row.group + 1); }
  __host__ __device__ int64_t Count() const { return rows * PerRow(); }
  // The slot's offset in qkv [rows][row.Width()], and whether it is a query.
  __device__ int64_t At(int64_t slot, bool* query) const {
    const int64_t r = slot / PerRow(), k = slot % PerRow();
    const int64_t g = k / (row.group + 1), u = k % (row.group + 1);
    *query = u < row.group;
    return r * row.Width() + (g * (row.group + 2) + u) * row.d;
  }
};

// One warp per slot: saved = x, x = x rstd w (w the queries' or the keys' weight).
template <typename T>
__global__ void QkNormFwdWarpPerSlot(T* qkv, T* saved, float* rstd, const T* q_w, const T* k_w,
                                     QkSlots q, float eps) {
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (slot >= q.Count()) return;
  const int64_t d = q.row.d;
  bool query = false;
  T* x = qkv + q.At(slot, &query);
  const T* w = query ? q_w : k_w;
  T* keep = saved + slot * d;
  float sq = 0.0f;
  for (int64_t i = lane; i < d; i += 32) {
    const float v = ToFloat(x[i]);
    keep[i] = x[i];
    sq += v * v;
  }
  const float rs = rsqrtf(WarpSum(sq) / static_cast<float>(d) + eps);
  for (int64_t i = lane; i < d; i += 32) x[i] = FromFloat<T>(ToFloat(keep[i]) * rs * ToFloat(w[i]));
  if (lane == 0) rstd[slot] = rs;
}

// One warp per slot, in place: dy (the normed row's gradient in dqkv) becomes dx, RMSNorm's.
// Every lane reads its elements of dy for the sum before any lane writes (WarpSum).
template <typename T>
__global__ void QkNormBwdDxWarpPerSlot(T* dqkv, const T* saved, const float* rstd, const T* q_w,
                                       const T* k_w, QkSlots q) {
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (slot >= q.Count()) return;
  const int64_t d = q.row.d;
  bool query = false;
  T* dy = dqkv + q.At(slot, &query);
  const T* w = query ? q_w : k_w;
  const T* x = saved + slot * d;
  const float rs = rstd[slot];
  float gx = 0.0f;
  for (int64_t i = lane; i < d; i += 32) gx += ToFloat(dy[i]) * ToFloat(w[i]) * ToFloat(x[i]);
  const float gx_mean = WarpSum(gx) / static_cast<float>(d);
  for (int64_t i = lane; i < d; i += 32) {
    const float g = ToFloat(dy[i]) * ToFloat(w[i]);
    dy[i] = FromFloat<T>(rs * (g - ToFloat(x[i]) * rs * rs * gx_mean));
  }
}

// dq_w[e] += sum over query slots of dy x rstd, dk_w[e] over key slots. Block (32 features) x
// (8 slot lanes), as RMSNorm's column reduction.
template <typename T>
__global__ void QkNormBwdWeightColumns(float* dq_w, float* dk_w, const T* dqkv, const T* saved,
                                       const float* rstd, QkSlots q) {
  __shared__ float sq[8][33], sk[8][33];
  const int64_t d = q.row.d, col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float acc_q = 0.0f, acc_k = 0.0f;
  if (col < d) {
    for (int64_t slot = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; slot < q.Count();
         slot += static_cast<int64_t>(gridDim.y) * 8) {
      bool query = false;
      const int64_t at = q.At(slot, &query);
      const float v = ToFloat(dqkv[at + col]) * ToFloat(saved[slot * d + col]) * rstd[slot];
      if (query) {
        acc_q += v;
      } else {
        acc_k += v;
      }
    }
  }
  sq[threadIdx.y][threadIdx.x] = acc_q;
  sk[threadIdx.y][threadIdx.x] = acc_k;
  __syncthreads();
  if (threadIdx.y == 0 && col < d) {
    float tq = 0.0f, tk = 0.0f;
    for (int k = 0; k < 8; ++k) {
      tq += sq[k][threadIdx.x];
      tk += sk[k][threadIdx.x];
    }
    atomicAdd(dq_w + col, tq);
    atomicAdd(dk_w + col, tk);
  }
}

// Multi-head rows [rows][heads][3][d] from grouped ones: one thread per output element.
template <typename T>
__global__ void ExpandGroupedQkvElems(T* mha, const T* grouped, kernels::QkvLayout row,
                                      int64_t rows) {
  const int64_t d = row.d, width = row.heads * 3 * d, total = rows * width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i % d, part = (i / d) % 3, hh = (i / (3 * d)) % row.heads, n = i / width;
    const int64_t at = part == 0 ? row.Q(hh) : part == 1 ? row.K(hh) : row.V(hh);
    mha[i] = grouped[n * row.Width() + at + e];
  }
}

// The grouped gradient from the multi-head one: queries copied, each key and value the sum over
// its group's heads (in fp32, rounded once). One thread per grouped element.
template <typename T>
__global__ void SumGroupedDqkvElems(T* grouped, const T* mha, kernels::QkvLayout row,
                                    int64_t rows) {
  const int64_t d = row.d, total = rows * row.Width(), slots = row.group + 2;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i % d, u = (i / d) % slots, g = (i / (d * slots)) % row.KvHeads();
    const T* m = mha + (i / row.Width()) * row.heads * 3 * d;
    if (u < row.group) {
      grouped[i] = m[((g * row.group + u) * 3) * d + e];
      continue;
    }
    const int64_t part = u - row.group + 1;  // 1: key, 2: value
    float sum = 0.0f;
    for (int64_t j = 0; j < row.group; ++j)
      sum += ToFloat(m[((g * row.group + j) * 3 + part) * d + e]);
    grouped[i] = FromFloat<T>(sum);
  }
}

// Context parallelism's packs [rows][kv][2][d] of a grouped qkv (the CPU's layout), and their
// multi-head twins [rows][h][2][d]. One thread per element of the larger side.
template <typename T>
__global__ void PackGroupedKvElems(T* kv, T* qkv, kernels::QkvLayout row, int64_t rows,
                                   bool unpack) {
  const int64_t d = row.d, kvh = row.KvHeads(), total = rows * kvh * 2 * d;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / (kvh * 2 * d), k = i % (kvh * 2 * d);  // k = (g 2 + part) d + e
    T* slot = qkv + n * row.Width() + row.KvOf(k / (2 * d)) + k % (2 * d);
    if (unpack) {
      *slot = kv[i];
    } else {
      kv[i] = *slot;
    }
  }
}

template <typename T>
__global__ void ExpandGroupedKvElems(T* mha, const T* kv, kernels::QkvLayout row, int64_t rows) {
  const int64_t d = row.d, total = rows * row.heads * 2 * d;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = i % (2 * d), hh = (i / (2 * d)) % row.heads, n = i / (row.heads * 2 * d);
    mha[i] = kv[(n * row.KvHeads() + hh / row.group) * 2 * d + k];
  }
}

template <typename T>
__global__ void SumGroupedKvElems(T* kv, const T* mha, kernels::QkvLayout row, int64_t rows) {
  const int64_t d = row.d, kvh = row.KvHeads(), total = rows * kvh * 2 * d;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = i % (2 * d), g = (i / (2 * d)) % kvh, n = i / (kvh * 2 * d);
    float sum = 0.0f;
    for (int64_t j = 0; j < row.group; ++j) {
      sum += ToFloat(mha[(n * row.heads + g * row.group + j) * 2 * d + k]);
    }
    kv[i] = FromFloat<T>(sum);
  }
}

// grouped's query slots += the multi-head gradient's [rows][h][3][d] query slots.
template <typename T>
__global__ void AddGroupedDqElems(T* grouped, const T* mha, kernels::QkvLayout row, int64_t rows) {
  const int64_t d = row.d, total = rows * row.heads * d;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i % d, hh = (i / d) % row.heads, n = i / (row.heads * d);
    T* q = grouped + n * row.Width() + row.Q(hh) + e;
    *q = FromFloat<T>(ToFloat(*q) + ToFloat(mha[(n * row.heads + hh) * 3 * d + e]));
  }
}

}  // namespace

template <typename T>
void RmsNormForward(T* out, float* rstd, const T* x, const T* weight, int64_t n, int64_t c,
                    float eps, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  RmsNormFwdWarpPerRow<T>
      <<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(out, rstd, x, weight, n, c, eps);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void RmsNormBackward(T* dx, float* dweight, const T* dout, const T* x, const T* weight,
                     const float* rstd, int64_t n, int64_t c, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  RmsNormBwdDxWarpPerRow<T>
      <<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(dx, dout, x, weight, rstd, n, c);
  PTDP_CUDA_CHECK(cudaGetLastError());
  const dim3 grid(static_cast<unsigned>((c + 31) / 32), ColumnGridRows(n));
  RmsNormBwdWeightColumns<T><<<grid, dim3(32, 8), 0, stream>>>(dweight, dout, x, rstd, n, c);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void SwigluForward(T* out, const T* in, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  SwigluFwd<T><<<GridFor(count, 256), 256, 0, stream>>>(out, in, count);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void SwigluBackward(T* din, const T* in, const T* dout, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  SwigluBwd<T><<<GridFor(count, 256), 256, 0, stream>>>(din, in, dout, count);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void SquaredReluForward(T* out, const T* in, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  SquaredReluFwd<T><<<GridFor(count, 256), 256, 0, stream>>>(out, in, count);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void SquaredReluBackward(T* din, const T* in, const T* dout, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  SquaredReluBwd<T><<<GridFor(count, 256), 256, 0, stream>>>(din, in, dout, count);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void RotaryEmbedding(T* qkv, const RotaryDims& r, bool inverse, cudaStream_t stream) {
  const int64_t total =
      r.b * (r.s / r.cp) * (r.h + r.h / r.group) * (kernels::RotatedFeatures(r.d, r.rope) / 2);
  if (total == 0) return;
  RotaryPairs<T><<<GridFor(total, 256), 256, 0, stream>>>(qkv, r, inverse ? -1.0f : 1.0f);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void QkNormForward(T* qkv, T* saved, float* rstd, const T* q_w, const T* k_w, int64_t rows,
                   const kernels::QkvLayout& row, float eps, cudaStream_t stream) {
  const QkSlots q{row, rows};
  if (q.Count() == 0) return;
  const unsigned blocks = static_cast<unsigned>((q.Count() + kWarpsPerBlock - 1) / kWarpsPerBlock);
  QkNormFwdWarpPerSlot<T>
      <<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(qkv, saved, rstd, q_w, k_w, q, eps);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void QkNormBackward(T* dqkv, float* dq_w, float* dk_w, const T* saved, const float* rstd,
                    const T* q_w, const T* k_w, int64_t rows, const kernels::QkvLayout& row,
                    cudaStream_t stream) {
  const QkSlots q{row, rows};
  if (q.Count() == 0) return;
  // The weights' gradients read dy before the rows' kernel overwrites it with dx.
  const dim3 grid(static_cast<unsigned>((row.d + 31) / 32), ColumnGridRows(q.Count()));
  QkNormBwdWeightColumns<T><<<grid, dim3(32, 8), 0, stream>>>(dq_w, dk_w, dqkv, saved, rstd, q);
  PTDP_CUDA_CHECK(cudaGetLastError());
  const unsigned blocks = static_cast<unsigned>((q.Count() + kWarpsPerBlock - 1) / kWarpsPerBlock);
  QkNormBwdDxWarpPerSlot<T>
      <<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(dqkv, saved, rstd, q_w, k_w, q);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void ExpandGroupedQkv(T* mha, const T* grouped, int64_t rows, const kernels::QkvLayout& row,
                      cudaStream_t stream) {
  const int64_t total = rows * row.heads * 3 * row.d;
  if (total == 0) return;
  ExpandGroupedQkvElems<T><<<GridFor(total, 256), 256, 0, stream>>>(mha, grouped, row, rows);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void SumGroupedDqkv(T* grouped, const T* mha, int64_t rows, const kernels::QkvLayout& row,
                    cudaStream_t stream) {
  const int64_t total = rows * row.Width();
  if (total == 0) return;
  SumGroupedDqkvElems<T><<<GridFor(total, 256), 256, 0, stream>>>(grouped, mha, row, rows);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void GroupedContextKvPack(T* kv, const T* qkv, int64_t rows, const kernels::QkvLayout& row,
                          cudaStream_t stream) {
  const int64_t total = rows * row.KvHeads() * 2 * row.d;
  if (total == 0) return;
  PackGroupedKvElems<T>
      <<<GridFor(total, 256), 256, 0, stream>>>(kv, const_cast<T*>(qkv), row, rows, false);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void GroupedContextKvUnpack(T* dqkv, const T* dkv, int64_t rows, const kernels::QkvLayout& row,
                            cudaStream_t stream) {
  const int64_t total = rows * row.KvHeads() * 2 * row.d;
  if (total == 0) return;
  PackGroupedKvElems<T>
      <<<GridFor(total, 256), 256, 0, stream>>>(const_cast<T*>(dkv), dqkv, row, rows, true);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

int64_t GroupedContextWorkspace(const ContextDims& c, bool backward) {
  const int64_t rows = c.b * (c.s / c.cp), mha = rows * c.h * c.d;
  return backward ? mha * (3 + 2 + 3 + 2) : mha * (3 + 2 * c.cp);
}

template <typename T>
void GroupedContextAttentionForward(T* out, float* lse, const T* qkv, const T* kv_all,
                                    ContextDims c, int64_t group, AttentionDropout dropout,
                                    T* workspace, cudaStream_t stream) {
  const kernels::QkvLayout row{c.h, c.d, group};
  const int64_t rows = c.b * (c.s / c.cp), kv2 = c.cp * rows * c.h * 2 * c.d;
  T* qkv_mha = workspace;
  T* kv_mha = workspace + rows * c.h * 3 * c.d;
  ExpandGroupedQkv<T>(qkv_mha, qkv, rows, row, stream);
  if (kv2 > 0) {
    ExpandGroupedKvElems<T>
        <<<GridFor(kv2, 256), 256, 0, stream>>>(kv_mha, kv_all, row, c.cp * rows);
    PTDP_CUDA_CHECK(cudaGetLastError());
  }
  ContextAttentionForward<T>(out, lse, qkv_mha, kv_mha, c, dropout, stream);
}

template <typename T>
void GroupedContextAttentionBackward(T* dqkv, T* dkv_src, float* attention_workspace, T* workspace,
                                     const T* dout, const T* out, const T* qkv, const T* kv_src,
                                     const float* lse, ContextDims c, int64_t group, int src,
                                     AttentionDropout dropout, cudaStream_t stream) {
  const kernels::QkvLayout row{c.h, c.d, group};
  const int64_t rows = c.b * (c.s / c.cp), q3 = rows * c.h * 3 * c.d, kv2 = rows * c.h * 2 * c.d;
  if (rows == 0) return;
  T* qkv_mha = workspace;
  T* kv_mha = qkv_mha + q3;
  T* dqkv_mha = kv_mha + kv2;
  T* dkv_mha = dqkv_mha + q3;
  ExpandGroupedQkv<T>(qkv_mha, qkv, rows, row, stream);
  ExpandGroupedKvElems<T><<<GridFor(kv2, 256), 256, 0, stream>>>(kv_mha, kv_src, row, rows);
  PTDP_CUDA_CHECK(cudaGetLastError());
  PTDP_CUDA_CHECK(cudaMemsetAsync(dqkv_mha, 0, sizeof(T) * q3, stream));  // dQ is added to it
  ContextAttentionBackward<T>(dqkv_mha, dkv_mha, attention_workspace, dout, out, qkv_mha, kv_mha,
                              lse, c, src, dropout, stream);
  const int64_t dq = rows * c.h * c.d, dkv = rows * row.KvHeads() * 2 * c.d;
  AddGroupedDqElems<T><<<GridFor(dq, 256), 256, 0, stream>>>(dqkv, dqkv_mha, row, rows);
  PTDP_CUDA_CHECK(cudaGetLastError());
  SumGroupedKvElems<T><<<GridFor(dkv, 256), 256, 0, stream>>>(dkv_src, dkv_mha, row, rows);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

#define PTDP_INSTANTIATE(T)                                                                        \
  template void RmsNormForward<T>(T*, float*, const T*, const T*, int64_t, int64_t, float,         \
                                  cudaStream_t);                                                   \
  template void RmsNormBackward<T>(T*, float*, const T*, const T*, const T*, const float*,         \
                                   int64_t, int64_t, cudaStream_t);                                \
  template void SwigluForward<T>(T*, const T*, int64_t, cudaStream_t);                             \
  template void SwigluBackward<T>(T*, const T*, const T*, int64_t, cudaStream_t);                  \
  template void SquaredReluForward<T>(T*, const T*, int64_t, cudaStream_t);                        \
  template void SquaredReluBackward<T>(T*, const T*, const T*, int64_t, cudaStream_t);             \
  template void RotaryEmbedding<T>(T*, const RotaryDims&, bool, cudaStream_t);                     \
  template void QkNormForward<T>(T*, T*, float*, const T*, const T*, int64_t,                      \
                                 const kernels::QkvLayout&, float, cudaStream_t);                  \
  template void QkNormBackward<T>(T*, float*, float*, const T*, const float*, const T*, const T*,  \
                                  int64_t, const kernels::QkvLayout&, cudaStream_t);               \
  template void ExpandGroupedQkv<T>(T*, const T*, int64_t, const kernels::QkvLayout&,              \
                                    cudaStream_t);                                                 \
  template void SumGroupedDqkv<T>(T*, const T*, int64_t, const kernels::QkvLayout&, cudaStream_t); \
  template void GroupedContextKvPack<T>(T*, const T*, int64_t, const kernels::QkvLayout&,          \
                                        cudaStream_t);                                             \
  template void GroupedContextKvUnpack<T>(T*, const T*, int64_t, const kernels::QkvLayout&,        \
                                          cudaStream_t);                                           \
  template void GroupedContextAttentionForward<T>(T*, float*, const T*, const T*, ContextDims,     \
                                                  int64_t, AttentionDropout, T*, cudaStream_t);    \
  template void GroupedContextAttentionBackward<T>(T*, T*, float*, T*, const T*, const T*,         \
                                                   const T*, const T*, const float*, ContextDims,  \
                                                   int64_t, int, AttentionDropout, cudaStream_t);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(bf16)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda_kernels
