// The small kernels CudaOps needs beyond kernels/cuda: dropout with a stored u8 mask (the runtime
// keeps masks, kernels/cuda regenerates them), fills, the counter-generator normal fill, and the
// reductions into fp64 device scalars of the Ops interface. Every function enqueues on `stream`
// and returns cudaGetLastError() (no synchronisation). T is float, __nv_bfloat16 or __half.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ptdp::runtime::cuda::opk {

// out[n][c] = residual + dropout(x + bias) (bias, residual nullable); with p > 0 also
// mask[i] = 1 when global element first + i is kept (rng::DropoutKeeps). out may alias x.
template <typename T>
cudaError_t BiasDropoutResidualMask(T* out, uint8_t* mask, const T* x, const T* bias,
                                    const T* residual, int64_t n, int64_t c, uint64_t key,
                                    uint64_t first, double p, cudaStream_t stream);
// dx = dy * mask / (1 - p) (dy when p == 0). dx may alias dy.
template <typename T>
cudaError_t MaskedDropoutBackward(T* dx, const T* dy, const uint8_t* mask, int64_t count, double p,
                                  cudaStream_t stream);
// out = a + b, 16-byte packs (elementwise_packs.h); out may alias a or b.
template <typename T>
cudaError_t Add(T* out, const T* a, const T* b, int64_t count, cudaStream_t stream);
// out = GeLU(pre) (the tanh approximation), 16-byte packs.
template <typename T>
cudaError_t GeluForward(T* out, const T* pre, int64_t count, cudaStream_t stream);
// dpre = GeLU'(pre) * dgelu (the tanh approximation), 16-byte packs (elementwise_packs.h).
template <typename T>
cudaError_t GeluBackward(T* dpre, const T* pre, const T* dgelu, int64_t count, cudaStream_t stream);
// Every element := value. T also int32_t and double.
template <typename T>
cudaError_t FillValue(T* dst, int64_t count, double value, cudaStream_t stream);
// out[i] = mean + stddev * NormalFromCounter(key, (row0 + i / cols) * global_cols + col0 + i %
// cols) in double, rounded once to T (T also double).
template <typename T>
cudaError_t FillNormal(T* out, int64_t count, uint64_t key, int64_t cols, int64_t global_cols,
                       int64_t col0, int64_t row0, double mean, double stddev, cudaStream_t stream);
// *flag = 1.0 when x holds an inf or NaN.
template <typename T>
cudaError_t FlagNonFinite(double* flag, const T* x, int64_t count, cudaStream_t stream);
// row_sum[r] = sums[r]; *loss_sum += sum_r log(sums[r]) + row_max[r] - sums[rows + r] (fp64)
// over the rows whose target is not negative.
cudaError_t CrossEntropyLossSum(float* row_sum, double* loss_sum, const float* sums,
                                const float* row_max, const int32_t* targets, int64_t rows,
                                cudaStream_t stream);
// dbias[j] += sum_r dout[r][j] for n rows of c columns, fp32 (bias_grad.cu: 16-byte packs, or
// kernels/cuda's ColumnSums where a pack does not fit). T is float or __nv_bfloat16.
template <typename T>
cudaError_t BiasGradAccumulate(float* dbias, const T* dout, int64_t n, int64_t c,
                               cudaStream_t stream);
// out[r][c] = bias[c] (the fp32 GEMM's bias, added with beta = 1).
cudaError_t BroadcastRows(float* out, const float* bias, int64_t n, int64_t c, cudaStream_t stream);

}  // namespace ptdp::runtime::cuda::opk
