// The kernels of a mixture-of-experts layer (kernels/cuda/ops.h Moe*): twins of
// kernels/reference/moe.h. The router's kernels give a thread a token row and work in double, as
// the reference does, so that the experts chosen (an argmax, where the last bit decides a near
// tie) are the reference's; the per-row work is O(k E) and a router's E is tens to hundreds. The
// moves of token rows are elementwise, and the sums of copies into their tokens (the combine, the
// dispatch's backward) add each row's copies in the order of their index, as the reference does,
// through a counting sort of the copies by destination row: no atomics on the values, so a sum is
// the same from run to run.
#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace ptdp::cuda_kernels {
namespace {

constexpr int kThreads = 256;

// The softmax statistics of a row of logits: its maximum and sum_e exp(l_e - max), in double.
struct RowStats {
  double top = 0, sum = 0;
};

__device__ RowStats StatsOf(const float* row, int64_t experts) {
  RowStats s;
  s.top = row[0];
  for (int64_t e = 1; e < experts; ++e) s.top = fmax(s.top, double(row[e]));
  for (int64_t e = 0; e < experts; ++e) s.sum += exp(double(row[e]) - s.top);
  return s;
}

// A routing's score of expert e (Weight): its logit, or with pre_softmax its share of the full
// softmax, or with sigmoid its sigmoid; and the score it is chosen by (operator()): that plus the
// expert bias, when there is one.
struct Scorer {
  const float* row;
  RowStats stats;
  bool pre_softmax;
  bool sigmoid;
  const float* bias;
  __device__ double Weight(int64_t e) const {
    if (pre_softmax) return exp(double(row[e]) - stats.top) / stats.sum;
    if (sigmoid) return 1.0 / (1.0 + exp(-double(row[e])));
    return double(row[e]);
  }
  __device__ double operator()(int64_t e) const {
    return Weight(e) + (bias != nullptr ? double(bias[e]) : 0.0);
  }
};

__device__ bool Chosen(const int32_t* chosen, int64_t count, int64_t e) {
  for (int64_t j = 0; j < count; ++j) {
    if (chosen[j] == e) return true;
  }
  return false;
}

// The best expert of [begin, end) not among chosen[0, count) (allowed by the group mask when
// per_group > 0), ties to the lower index; -1 when none is left.
__device__ int32_t BestUnchosen(const Scorer& score, int64_t begin, int64_t end,
                                const int32_t* chosen, int64_t count, uint64_t groups_on,
                                int64_t per_group) {
  int32_t best = -1;
  double best_score = 0;
  for (int64_t e = begin; e < end; ++e) {
    if (per_group > 0 && ((groups_on >> (e / per_group)) & 1u) == 0) continue;
    if (Chosen(chosen, count, e)) continue;
    const double v = score(e);
    if (best < 0 || v > best_score) {
      best = static_cast<int32_t>(e);
      best_score = v;
    }
  }
  return best;
}

// Group g's score: the sum of its `summed` largest scores (chosen: scratch of `summed` slots).
__device__ double GroupScore(const Scorer& score, int64_t g, int64_t per_group, int64_t summed,
                             int32_t* chosen) {
  double total = 0;
  for (int64_t j = 0; j < summed; ++j) {
    chosen[j] = BestUnchosen(score, g * per_group, (g + 1) * per_group, chosen, j, 0, 0);
    total += score(chosen[j]);
  }
  return total;
}

// The group_topk best groups (ties to the lower group) as a bit mask.
__device__ uint64_t BestGroups(const Scorer& score, const MoeRouterShape& m, int32_t* scratch) {
  const int64_t per_group = m.experts / m.groups;
  const int64_t summed = m.k / m.group_topk > 1 ? m.k / m.group_topk : 1;
  uint64_t on = 0;
  for (int64_t pick = 0; pick < m.group_topk; ++pick) {
    int64_t best = -1;
    double best_score = 0;
    for (int64_t g = 0; g < m.groups; ++g) {
      if ((on >> g) & 1u) continue;
      const double v = GroupScore(score, g, per_group, summed, scratch);
      if (best < 0 || v > best_score) {
        best = g;
        best_score = v;
      }
    }
    on |= uint64_t{1} << best;
  }
  return on;
}

__global__ void RouterTopK(float* probs, int32_t* index, const float* logits, int64_t n,
                           MoeRouterShape m) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= n) return;
  const float* row = logits + r * m.experts;
  Scorer score{row, {}, m.pre_softmax, m.sigmoid, m.bias};
  if (m.pre_softmax) score.stats = StatsOf(row, m.experts);
  int32_t* chosen = index + r * m.k;  // the output row, also the groups' scratch
  uint64_t on = 0;
  int64_t per_group = 0;
  if (m.groups > 0) {
    on = BestGroups(score, m, chosen);
    per_group = m.experts / m.groups;
  }
  for (int64_t j = 0; j < m.k; ++j) {
    chosen[j] = BestUnchosen(score, 0, m.experts, chosen, j, on, per_group);
  }
  // The softmax over the k chosen logits (the first is their largest), the sigmoids over their
  // sum, or the scores as they are (pre_softmax; sigmoid with k = 1); times the scale.
  const double first = row[chosen[0]];
  double sum = 0;
  for (int64_t j = 0; j < m.k; ++j) {
    sum += m.sigmoid ? score.Weight(chosen[j]) : exp(double(row[chosen[j]]) - first);
  }
  for (int64_t j = 0; j < m.k; ++j) {
    const int32_t e = chosen[j];
    double p = exp(double(row[e]) - first) / sum;
    if (m.pre_softmax || (m.sigmoid && m.k == 1)) p = score.Weight(e);
    if (m.sigmoid && m.k > 1) p = score.Weight(e) / sum;
    probs[r * m.k + j] = static_cast<float>(p * m.scale);
  }
}

__global__ void RouterTopKBackward(float* dlogits, const float* dprobs, const float* probs,
                                   const int32_t* index, const float* logits, int64_t n,
                                   MoeRouterShape m) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= n) return;
  double dot = 0;
  for (int64_t j = 0; j < m.k; ++j) dot += double(probs[r * m.k + j]) * double(dprobs[r * m.k + j]);
  float* dl = dlogits + r * m.experts;
  if (m.pre_softmax) {
    const float* row = logits + r * m.experts;
    const RowStats s = StatsOf(row, m.experts);
    for (int64_t e = 0; e < m.experts; ++e) {
      dl[e] = static_cast<float>(-exp(double(row[e]) - s.top) / s.sum * dot);
    }
    for (int64_t j = 0; j < m.k; ++j) {
      const int32_t e = index[r * m.k + j];
      const double se = exp(double(row[e]) - s.top) / s.sum;
      dl[e] = static_cast<float>(se * (m.scale * double(dprobs[r * m.k + j]) - dot));
    }
    return;
  }
  for (int64_t e = 0; e < m.experts; ++e) dl[e] = 0.0f;
  if (m.sigmoid) {  // through the k's sigmoids over their sum (kernels/reference/moe.h)
    const float* row = logits + r * m.experts;
    double sum = 0;
    for (int64_t j = 0; j < m.k; ++j) sum += 1.0 / (1.0 + exp(-double(row[index[r * m.k + j]])));
    for (int64_t j = 0; j < m.k; ++j) {
      const int32_t e = index[r * m.k + j];
      const double se = 1.0 / (1.0 + exp(-double(row[e]))), dp = dprobs[r * m.k + j];
      dl[e] = static_cast<float>(se * (1 - se) *
                                 (m.k > 1 ? m.scale / sum * (dp - dot / m.scale) : m.scale * dp));
    }
    return;
  }
  for (int64_t j = 0; j < m.k; ++j) {
    const double p = probs[r * m.k + j];
    dl[index[r * m.k + j]] = static_cast<float>(p * (double(dprobs[r * m.k + j]) - dot / m.scale));
  }
}

// dl += scale 2 lse softmax, and lse^2 per row into sq (summed by SumRows).
__global__ void ZLossRows(float* dlogits, double* sq, const float* logits, double scale, int64_t n,
                          int64_t experts) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= n) return;
  const float* row = logits + r * experts;
  const RowStats s = StatsOf(row, experts);
  const double lse = s.top + log(s.sum);
  sq[r] = lse * lse;
  for (int64_t e = 0; e < experts; ++e) {
    dlogits[r * experts + e] += static_cast<float>(scale * 2 * lse * exp(double(row[e]) - lse));
  }
}

// out[0] = sum of v[0, n), one block: each thread a strided part, then the parts in thread
// order (the same sum on every run).
__global__ void SumRows(float* out, const double* v, int64_t n) {
  __shared__ double part[kThreads];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += v[i];
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0;
  for (int t = 0; t < static_cast<int>(blockDim.x); ++t) total += part[t];
  out[0] = static_cast<float>(total);
}

__device__ double Sigmoid(double l) {
  return 1.0 / (1.0 + exp(-l));
}

// The auxiliary loss's statistics of a row: the softmax's, or with sigmoid the sigmoids' sum (top
// 0); and its unnormalised score of expert e.
__device__ RowStats AuxStatsOf(const float* row, int64_t experts, bool sigmoid) {
  if (!sigmoid) return StatsOf(row, experts);
  RowStats s;
  for (int64_t e = 0; e < experts; ++e) s.sum += Sigmoid(double(row[e]));
  return s;
}
__device__ double AuxRaw(double l, const RowStats& s, bool sigmoid) {
  return sigmoid ? Sigmoid(l) : exp(l - s.top);
}

__global__ void AuxLossRows(float* dlogits, const float* logits, const float* counts, double scale,
                            int64_t n, int64_t experts, MoeAuxShape g) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= n) return;
  const float* row = logits + r * experts;
  const float* c = counts + (g.group_rows > 0 ? (g.first_row + r) / g.group_rows : 0) * experts;
  const RowStats s = AuxStatsOf(row, experts, g.sigmoid);
  double dot = 0;
  for (int64_t e = 0; e < experts; ++e) dot += AuxRaw(row[e], s, g.sigmoid) / s.sum * c[e];
  for (int64_t e = 0; e < experts; ++e) {
    const double raw = AuxRaw(row[e], s, g.sigmoid);
    const double own = g.sigmoid ? raw * (1 - raw) / s.sum : raw / s.sum;
    dlogits[r * experts + e] += static_cast<float>(scale * own * (double(c[e]) - dot));
  }
}

__global__ void RowStatsKernel(RowStats* stats, const float* logits, int64_t n, int64_t experts,
                               bool sigmoid) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < n) stats[r] = AuxStatsOf(logits + r * experts, experts, sigmoid);
}

// One block per (group, expert): out[g][e] = the sum over group g's rows of their e-th score.
__global__ void ProbSumsPerExpert(float* out, const RowStats* stats, const float* logits, int64_t n,
                                  int64_t experts, MoeAuxShape g) {
  __shared__ double part[kThreads];
  const int64_t group = blockIdx.x / experts, e = blockIdx.x % experts;
  // The group's rows among this rank's n (all of them without grouping).
  int64_t begin = 0, end = n;
  if (g.group_rows > 0) {
    begin = group * g.group_rows - g.first_row;
    end = begin + g.group_rows;
    begin = begin < 0 ? 0 : begin;
    end = end > n ? n : end;
  } else if (group > 0) {
    end = 0;
  }
  double s = 0;
  for (int64_t r = begin + threadIdx.x; r < end; r += blockDim.x) {
    s += AuxRaw(logits[r * experts + e], stats[r], g.sigmoid) / stats[r].sum;
  }
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0;
  for (int t = 0; t < static_cast<int>(blockDim.x); ++t) total += part[t];
  out[blockIdx.x] = static_cast<float>(total);
}

template <typename T>
__global__ void PermuteRows(T* out, const T* x, const int32_t* rows, int64_t n, int64_t width) {
  const int64_t count = n * width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / width;
    out[i] = x[int64_t(rows[row]) * width + i % width];
  }
}

// The copies per destination row: counts into start[1 + row].
__global__ void CountRows(int32_t* start, const int32_t* rows, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&start[rows[i] + 1], 1);
}

// start[0, len) := its inclusive prefix sum, one block: each thread a contiguous part.
__global__ void PrefixSum(int32_t* start, int64_t len) {
  __shared__ int32_t part[kThreads];
  const int64_t per = (len + blockDim.x - 1) / blockDim.x;
  const int64_t begin = threadIdx.x * per;
  const int64_t end = begin + per < len ? begin + per : len;
  int32_t s = 0;
  for (int64_t i = begin; i < end; ++i) s += start[i];
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = 0;
    for (int t = 0; t < static_cast<int>(blockDim.x); ++t) {
      const int32_t v = part[t];
      part[t] = run;
      run += v;
    }
  }
  __syncthreads();
  int32_t run = part[threadIdx.x];
  for (int64_t i = begin; i < end; ++i) {
    run += start[i];
    start[i] = run;
  }
}

// Each copy's index into its destination row's segment (in no particular order yet).
__global__ void FillSegments(int32_t* list, int32_t* cursor, const int32_t* start,
                             const int32_t* rows, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t at = atomicAdd(&cursor[rows[i]], 1);
  list[start[rows[i]] + at] = static_cast<int32_t>(i);
}

// Each row's segment in ascending copy order (insertion sort: a row has a few copies).
__global__ void SortSegments(int32_t* list, const int32_t* start, int64_t out_rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= out_rows) return;
  for (int32_t i = start[r] + 1; i < start[r + 1]; ++i) {
    const int32_t v = list[i];
    int32_t j = i - 1;
    for (; j >= start[r] && list[j] > v; --j) list[j + 1] = list[j];
    list[j + 1] = v;
  }
}

template <typename T>
__global__ void AddSegments(T* out, const T* y, const int32_t* list, const int32_t* start,
                            int64_t out_rows, int64_t width) {
  const int64_t count = out_rows * width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / width, col = i % width;
    if (start[row] == start[row + 1]) continue;
    float acc = ToFloat(out[i]);
    for (int32_t j = start[row]; j < start[row + 1]; ++j) {
      acc += ToFloat(y[int64_t(list[j]) * width + col]);
    }
    out[i] = FromFloat<T>(acc);
  }
}

template <typename T>
__global__ void ScaleRows(T* out, const T* in, const float* weight, const int32_t* slot, int64_t n,
                          int64_t width) {
  const int64_t count = n * width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = FromFloat<T>(ToFloat(in[i]) * weight[slot[i / width]]);
  }
}

// One warp per row: out[slot[row]] = <a[row], b[row]>.
template <typename T>
__global__ void RowDots(float* out, const T* a, const T* b, const int32_t* slot, int64_t n,
                        int64_t width) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;  // whole warps leave together
  float s = 0.0f;
  for (int64_t c = lane; c < width; c += 32) {
    s += ToFloat(a[row * width + c]) * ToFloat(b[row * width + c]);
  }
  s = WarpSum(s);
  if (lane == 0) out[slot[row]] = s;
}

template <typename T>
__global__ void GateSigmoid(float* gate, const T* logit, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) gate[i] = 1.0f / (1.0f + expf(-ToFloat(logit[i])));
}

template <typename T>
__global__ void GateSigmoidBackward(T* dlogit, const float* gate, const float* dgate, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dlogit[i] = FromFloat<T>(dgate[i] * gate[i] * (1.0f - gate[i]));
}

unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>((rows + kThreads - 1) / kThreads);
}

}  // namespace

void MoeRouterTopK(float* probs, int32_t* index, const float* logits, int64_t n,
                   const MoeRouterShape& m, cudaStream_t stream) {
  PTDP_CHECK_MSG(m.k >= 1 && m.k <= m.experts, "router top-k " + std::to_string(m.k));
  PTDP_CHECK_MSG(m.groups <= kMaxRouterGroups, "router groups " + std::to_string(m.groups) +
                                                   " above " + std::to_string(kMaxRouterGroups));
  if (n == 0) return;
  RouterTopK<<<RowBlocks(n), kThreads, 0, stream>>>(probs, index, logits, n, m);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

void MoeRouterTopKBackward(float* dlogits, const float* dprobs, const float* probs,
                           const int32_t* index, const float* logits, int64_t n,
                           const MoeRouterShape& m, cudaStream_t stream) {
  if (n == 0) return;
  RouterTopKBackward<<<RowBlocks(n), kThreads, 0, stream>>>(dlogits, dprobs, probs, index, logits,
                                                            n, m);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

void MoeZLossBackward(float* dlogits, float* sum_sq, double* row_sq, const float* logits,
                      double scale, int64_t n, int64_t experts, cudaStream_t stream) {
  if (n > 0) {
    ZLossRows<<<RowBlocks(n), kThreads, 0, stream>>>(dlogits, row_sq, logits, scale, n, experts);
  }
  SumRows<<<1, kThreads, 0, stream>>>(sum_sq, row_sq, n);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

void MoeAuxLossBackward(float* dlogits, const float* logits, const float* counts, double scale,
                        int64_t n, int64_t experts, const MoeAuxShape& g, cudaStream_t stream) {
  if (n == 0) return;
  AuxLossRows<<<RowBlocks(n), kThreads, 0, stream>>>(dlogits, logits, counts, scale, n, experts, g);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

int64_t MoeProbSumsScratchBytes(int64_t n) {
  return n * static_cast<int64_t>(sizeof(RowStats));
}

void MoeRouterProbSums(float* out, void* scratch, const float* logits, int64_t n, int64_t experts,
                       int64_t groups, const MoeAuxShape& g, cudaStream_t stream) {
  auto* stats = static_cast<RowStats*>(scratch);
  if (n > 0) {
    RowStatsKernel<<<RowBlocks(n), kThreads, 0, stream>>>(stats, logits, n, experts, g.sigmoid);
  }
  ProbSumsPerExpert<<<static_cast<unsigned>(groups * experts), kThreads, 0, stream>>>(
      out, stats, logits, n, experts, g);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void MoePermuteRows(T* out, const T* x, const int32_t* rows, int64_t n, int64_t width,
                    cudaStream_t stream) {
  if (n * width == 0) return;
  PermuteRows<T><<<GridFor(n * width, kThreads), kThreads, 0, stream>>>(out, x, rows, n, width);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

int64_t MoeUnpermuteScratchBytes(int64_t n, int64_t out_rows) {
  return (2 * (out_rows + 1) + n) * static_cast<int64_t>(sizeof(int32_t));
}

template <typename T>
void MoeUnpermuteAddRows(T* out, const T* y, const int32_t* rows, int64_t n, int64_t out_rows,
                         int64_t width, void* scratch, cudaStream_t stream) {
  if (n == 0 || width == 0) return;
  auto* start = static_cast<int32_t*>(scratch);  // [out_rows + 1]
  int32_t* cursor = start + out_rows + 1;        // [out_rows + 1]
  int32_t* list = cursor + out_rows + 1;         // [n]
  PTDP_CUDA_CHECK(cudaMemsetAsync(start, 0, 2 * (out_rows + 1) * sizeof(int32_t), stream));
  CountRows<<<RowBlocks(n), kThreads, 0, stream>>>(start, rows, n);
  PrefixSum<<<1, kThreads, 0, stream>>>(start, out_rows + 1);
  FillSegments<<<RowBlocks(n), kThreads, 0, stream>>>(list, cursor, start, rows, n);
  SortSegments<<<RowBlocks(out_rows), kThreads, 0, stream>>>(list, start, out_rows);
  AddSegments<T><<<GridFor(out_rows * width, kThreads), kThreads, 0, stream>>>(out, y, list, start,
                                                                               out_rows, width);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void MoeScaleRows(T* out, const T* in, const float* weight, const int32_t* slot, int64_t n,
                  int64_t width, cudaStream_t stream) {
  if (n * width == 0) return;
  ScaleRows<T>
      <<<GridFor(n * width, kThreads), kThreads, 0, stream>>>(out, in, weight, slot, n, width);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void MoeRowDots(float* out, const T* a, const T* b, const int32_t* slot, int64_t n, int64_t width,
                cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kWarps = kThreads / 32;
  RowDots<T><<<static_cast<unsigned>((n + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
      out, a, b, slot, n, width);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void MoeGateSigmoid(float* gate, const T* logit, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  GateSigmoid<T><<<RowBlocks(n), kThreads, 0, stream>>>(gate, logit, n);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void MoeGateSigmoidBackward(T* dlogit, const float* gate, const float* dgate, int64_t n,
                            cudaStream_t stream) {
  if (n == 0) return;
  GateSigmoidBackward<T><<<RowBlocks(n), kThreads, 0, stream>>>(dlogit, gate, dgate, n);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

#define PTDP_MOE_INSTANTIATE(T)                                                                  \
  template void MoePermuteRows<T>(T*, const T*, const int32_t*, int64_t, int64_t, cudaStream_t); \
  template void MoeUnpermuteAddRows<T>(T*, const T*, const int32_t*, int64_t, int64_t, int64_t,  \
                                       void*, cudaStream_t);                                     \
  template void MoeScaleRows<T>(T*, const T*, const float*, const int32_t*, int64_t, int64_t,    \
                                cudaStream_t);                                                   \
  template void MoeRowDots<T>(float*, const T*, const T*, const int32_t*, int64_t, int64_t,      \
                              cudaStream_t);                                                     \
  template void MoeGateSigmoid<T>(float*, const T*, int64_t, cudaStream_t);                      \
  template void MoeGateSigmoidBackward<T>(T*, const float*, const float*, int64_t, cudaStream_t);
PTDP_MOE_INSTANTIATE(float)
PTDP_MOE_INSTANTIATE(bf16)
#undef PTDP_MOE_INSTANTIATE

}  // namespace ptdp::cuda_kernels
