// Fused AdamW over a flat fp32 parameter buffer (with the 16-bit compute copy written in the same
// pass), the sum of squares for the global gradient norm, and the non-finite check for dynamic
// loss scaling.
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

template <typename CopyT>
__global__ void AdamWFlat(float* param, CopyT* param_copy, const float* grad, float* m, float* v,
                          int64_t count, AdamWParams a) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = grad[i] * a.grad_scale;
    const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * g;
    const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi * a.inv_c1) / (sqrtf(vi * a.inv_c2) + a.eps);
    const float p = param[i] - a.lr * (update + a.weight_decay * param[i]);
    param[i] = p;
    if (param_copy != nullptr) param_copy[i] = FromFloat<CopyT>(p);
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
  PTDP_CHECK_MSG(step >= 1, "AdamW step counts from 1");
  if (count == 0) return;
  AdamWParams a;
  a.lr = static_cast<float>(lr);
  a.beta1 = static_cast<float>(beta1);
  a.beta2 = static_cast<float>(beta2);
  a.eps = static_cast<float>(eps);
  a.weight_decay = static_cast<float>(weight_decay);
  a.inv_c1 = static_cast<float>(1.0 / (1.0 - std::pow(beta1, static_cast<double>(step))));
  a.inv_c2 = static_cast<float>(1.0 / (1.0 - std::pow(beta2, static_cast<double>(step))));
  a.grad_scale = grad_scale;
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
#define PTDP_INSTANTIATE(T)                                                        \
  template void SumSquaresAccumulate<T>(double*, const T*, int64_t, cudaStream_t); \
  template void FlagNonFinite<T>(int*, const T*, int64_t, cudaStream_t);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(bf16)
PTDP_INSTANTIATE(fp16)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda_kernels
