// Fused AdamW over a flat fp32 parameter buffer (with the 16-bit compute copy written in the same
// pass), the sum of squares for the global gradient norm, their multi-tensor forms (one launch
// over many tensors, multi_tensor.h), and the non-finite check for dynamic loss scaling.
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace ptdp::cuda_kernels {
namespace {

struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay;
  float inv_c1, inv_c2;  // 1 / (1 - beta^step)
  float grad_scale;
};

AdamWParams MakeAdamWParams(double lr, double beta1, double beta2, double eps, double weight_decay,
                            int64_t step, float grad_scale) {
  PTDP_CHECK_MSG(step >= 1, "AdamW step counts from 1");
  AdamWParams a;
  a.lr = static_cast<float>(lr);
  a.beta1 = static_cast<float>(beta1);
  a.beta2 = static_cast<float>(beta2);
  a.eps = static_cast<float>(eps);
  a.weight_decay = static_cast<float>(weight_decay);
  a.inv_c1 = static_cast<float>(1.0 / (1.0 - std::pow(beta1, static_cast<double>(step))));
  a.inv_c2 = static_cast<float>(1.0 / (1.0 - std::pow(beta2, static_cast<double>(step))));
  a.grad_scale = grad_scale;
  return a;
}

// One element of AdamW, the single source of its arithmetic: the per-tensor and the multi-tensor
// kernels both call it, so their results are bit-identical.
__device__ __forceinline__ void AdamWElement(float& param, float& m, float& v, float grad,
                                             const AdamWParams& a, float weight_decay) {
  const float g = grad * a.grad_scale;
  const float mi = a.beta1 * m + (1.0f - a.beta1) * g;
  const float vi = a.beta2 * v + (1.0f - a.beta2) * g * g;
  m = mi;
  v = vi;
  const float update = (mi * a.inv_c1) / (sqrtf(vi * a.inv_c2) + a.eps);
  param = param - a.lr * (update + weight_decay * param);
}

template <typename CopyT>
__global__ void AdamWFlat(float* param, CopyT* param_copy, const float* grad, float* m, float* v,
                          int64_t count, AdamWParams a) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float p = param[i], mi = m[i], vi = v[i];
    AdamWElement(p, mi, vi, grad[i], a, a.weight_decay);
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
    if (param_copy != nullptr) param_copy[i] = FromFloat<CopyT>(p);
  }
}

// Four 16-bit copy elements, stored as one 8-byte access.
template <typename CopyT>
struct alignas(8) CopyQuad {
  CopyT e[4];
};

// AdamW over the work items of the segment table (multi_tensor.h), one item per block in turn:
// 16-byte loads and stores over the item's vector part, one element at a time over its tail.
template <typename CopyT>
__global__ void AdamWMulti(const AdamWSegment* segments, const WorkItem* items, int64_t item_count,
                           int64_t chunk_size, AdamWParams a) {
  for (int64_t it = blockIdx.x; it < item_count; it += gridDim.x) {
    const WorkItem w = items[it];
    const AdamWSegment s = segments[w.segment];
    const ItemRange r = ItemRangeOf(w, s.count, chunk_size, s.vector != 0);
    CopyT* copy = static_cast<CopyT*>(s.copy);
    for (int64_t i = r.begin + threadIdx.x * kVectorFloats; i < r.vector_end;
         i += static_cast<int64_t>(blockDim.x) * kVectorFloats) {
      float4 p = *reinterpret_cast<const float4*>(s.param + i);
      float4 mi = *reinterpret_cast<const float4*>(s.m + i);
      float4 vi = *reinterpret_cast<const float4*>(s.v + i);
      const float4 g = *reinterpret_cast<const float4*>(s.grad + i);
      AdamWElement(p.x, mi.x, vi.x, g.x, a, s.weight_decay);
      AdamWElement(p.y, mi.y, vi.y, g.y, a, s.weight_decay);
      AdamWElement(p.z, mi.z, vi.z, g.z, a, s.weight_decay);
      AdamWElement(p.w, mi.w, vi.w, g.w, a, s.weight_decay);
      *reinterpret_cast<float4*>(s.m + i) = mi;
      *reinterpret_cast<float4*>(s.v + i) = vi;
      *reinterpret_cast<float4*>(s.param + i) = p;
      if (copy != nullptr) {
        CopyQuad<CopyT> q;
        q.e[0] = FromFloat<CopyT>(p.x);
        q.e[1] = FromFloat<CopyT>(p.y);
        q.e[2] = FromFloat<CopyT>(p.z);
        q.e[3] = FromFloat<CopyT>(p.w);
        *reinterpret_cast<CopyQuad<CopyT>*>(copy + i) = q;
      }
    }
    for (int64_t i = r.vector_end + threadIdx.x; i < r.end; i += blockDim.x) {
      float p = s.param[i], mi = s.m[i], vi = s.v[i];
      AdamWElement(p, mi, vi, s.grad[i], a, s.weight_decay);
      s.m[i] = mi;
      s.v[i] = vi;
      s.param[i] = p;
      if (copy != nullptr) copy[i] = FromFloat<CopyT>(p);
    }
  }
}

template <typename T>
__global__ void SumSquaresBlocks(double* sum, const T* x, int64_t count) {
  __shared__ float scratch[32];
  float acc = 0.0f;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float xi = ToFloat(x[i]);
    acc += xi * xi;
  }
  acc = BlockSum(acc, scratch);
  if (threadIdx.x == 0) atomicAdd(sum, static_cast<double>(acc));
}

constexpr int kSquaresThreads = 256;
constexpr int kSquaresMaxBlocks = 1024;

// Sum of a block's kSquaresThreads doubles in a fixed tree (no shuffles: the same order on every
// run); thread 0 gets the total. Contains __syncthreads().
__device__ __forceinline__ double BlockSumDouble(double v, double* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int half = kSquaresThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) scratch[threadIdx.x] += scratch[threadIdx.x + half];
    __syncthreads();
  }
  return scratch[0];
}

// partials[block] = the sum of the squares of the block's work items (fp64 squares of fp32
// values are exact; the sums are fp64).
__global__ void SumSquaresMultiPartials(double* partials, const SquaresSegment* segments,
                                        const WorkItem* items, int64_t item_count,
                                        int64_t chunk_size) {
  __shared__ double scratch[kSquaresThreads];
  double acc = 0.0;
  for (int64_t it = blockIdx.x; it < item_count; it += gridDim.x) {
    const WorkItem w = items[it];
    const SquaresSegment s = segments[w.segment];
    const ItemRange r = ItemRangeOf(w, s.count, chunk_size, s.vector != 0);
    for (int64_t i = r.begin + threadIdx.x * kVectorFloats; i < r.vector_end;
         i += static_cast<int64_t>(blockDim.x) * kVectorFloats) {
      const float4 x = *reinterpret_cast<const float4*>(s.x + i);
      const double x0 = x.x, x1 = x.y, x2 = x.z, x3 = x.w;
      acc += x0 * x0 + x1 * x1 + x2 * x2 + x3 * x3;
    }
    for (int64_t i = r.vector_end + threadIdx.x; i < r.end; i += blockDim.x) {
      const double xi = s.x[i];
      acc += xi * xi;
    }
  }
  acc = BlockSumDouble(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// *sum += partials[0] + ... + partials[count - 1], in a fixed order (one block).
__global__ void SumPartials(double* sum, const double* partials, int count) {
  __shared__ double scratch[kSquaresThreads];
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = BlockSumDouble(acc, scratch);
  if (threadIdx.x == 0) *sum += acc;
}

template <typename T>
__global__ void NonFiniteFlag(int* found, const T* x, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (!isfinite(ToFloat(x[i]))) *found = 1;  // every writer writes the same value
  }
}

}  // namespace

template <typename CopyT>
void AdamWUpdate(float* param, CopyT* param_copy, const float* grad, float* m, float* v,
                 int64_t count, double lr, double beta1, double beta2, double eps,
                 double weight_decay, int64_t step, float grad_scale, cudaStream_t stream) {
  const AdamWParams a = MakeAdamWParams(lr, beta1, beta2, eps, weight_decay, step, grad_scale);
  if (count == 0) return;
  AdamWFlat<CopyT>
      <<<GridFor(count, 256, 8192), 256, 0, stream>>>(param, param_copy, grad, m, v, count, a);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void SumSquaresAccumulate(double* sum, const T* x, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  SumSquaresBlocks<T><<<GridFor(count, 256, 1024), 256, 0, stream>>>(sum, x, count);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename CopyT>
void AdamWMultiUpdate(const AdamWSegment* segments, const WorkItem* items, int64_t item_count,
                      int64_t chunk_size, double lr, double beta1, double beta2, double eps,
                      int64_t step, float grad_scale, cudaStream_t stream) {
  // weight_decay is each segment's own.
  const AdamWParams a = MakeAdamWParams(lr, beta1, beta2, eps, 0.0, step, grad_scale);
  if (item_count == 0) return;
  const unsigned blocks = static_cast<unsigned>(item_count < 65535 ? item_count : 65535);
  AdamWMulti<CopyT><<<blocks, 256, 0, stream>>>(segments, items, item_count, chunk_size, a);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

int SumSquaresMultiBlocks(int64_t item_count) {
  if (item_count < 1) return 1;
  return static_cast<int>(item_count < kSquaresMaxBlocks ? item_count : kSquaresMaxBlocks);
}

void SumSquaresMulti(double* sum, double* partials, const SquaresSegment* segments,
                     const WorkItem* items, int64_t item_count, int64_t chunk_size,
                     cudaStream_t stream) {
  if (item_count == 0) return;
  const int blocks = SumSquaresMultiBlocks(item_count);
  SumSquaresMultiPartials<<<blocks, kSquaresThreads, 0, stream>>>(partials, segments, items,
                                                                  item_count, chunk_size);
  PTDP_CUDA_CHECK(cudaGetLastError());
  SumPartials<<<1, kSquaresThreads, 0, stream>>>(sum, partials, blocks);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void FlagNonFinite(int* found, const T* x, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  NonFiniteFlag<T><<<GridFor(count, 256, 4096), 256, 0, stream>>>(found, x, count);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template void AdamWUpdate<bf16>(float*, bf16*, const float*, float*, float*, int64_t, double,
                                double, double, double, double, int64_t, float, cudaStream_t);
template void AdamWUpdate<fp16>(float*, fp16*, const float*, float*, float*, int64_t, double,
                                double, double, double, double, int64_t, float, cudaStream_t);
template void AdamWMultiUpdate<bf16>(const AdamWSegment*, const WorkItem*, int64_t, int64_t, double,
                                     double, double, double, int64_t, float, cudaStream_t);
template void AdamWMultiUpdate<fp16>(const AdamWSegment*, const WorkItem*, int64_t, int64_t, double,
                                     double, double, double, int64_t, float, cudaStream_t);
#define PTDP_INSTANTIATE(T)                                                        \
  template void SumSquaresAccumulate<T>(double*, const T*, int64_t, cudaStream_t); \
  template void FlagNonFinite<T>(int*, const T*, int64_t, cudaStream_t);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(bf16)
PTDP_INSTANTIATE(fp16)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda_kernels
