// Vocabulary-parallel embedding lookup and its gradient (atomics, since tokens repeat).
#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace ptdp::cuda_kernels {
namespace {

template <typename T>
__global__ void EmbeddingFwd(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                             int64_t rows, int64_t s, int64_t c, int64_t vb, int64_t ve) {
  const int64_t total = rows * c;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / c, col = idx % c;
    const int64_t tok = tokens[r];
    float v = (tok >= vb && tok < ve) ? ToFloat(wte[(tok - vb) * c + col]) : 0.0f;
    if (wpe != nullptr) v += ToFloat(wpe[(r % s) * c + col]);
    out[idx] = FromFloat<T>(v);
  }
}

template <typename T>
__global__ void EmbeddingBwd(float* dwte, float* dwpe, const T* dout, const int32_t* tokens,
                             int64_t rows, int64_t s, int64_t c, int64_t vb, int64_t ve) {
  const int64_t total = rows * c;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / c, col = idx % c;
    const int64_t tok = tokens[r];
    const float g = ToFloat(dout[idx]);
    if (dwte != nullptr && tok >= vb && tok < ve) atomicAdd(dwte + (tok - vb) * c + col, g);
    if (dwpe != nullptr) atomicAdd(dwpe + (r % s) * c + col, g);
  }
}

}  // namespace

template <typename T>
void EmbeddingForward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t b,
                      int64_t s, int64_t c, int64_t vocab_begin, int64_t vocab_end,
                      cudaStream_t stream) {
  if (b * s * c == 0) return;
  EmbeddingFwd<T><<<GridFor(b * s * c, 256), 256, 0, stream>>>(out, tokens, wte, wpe, b * s, s, c,
                                                               vocab_begin, vocab_end);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void EmbeddingBackward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int64_t b,
                       int64_t s, int64_t c, int64_t vocab_begin, int64_t vocab_end,
                       cudaStream_t stream) {
  if (b * s * c == 0) return;
  EmbeddingBwd<T><<<GridFor(b * s * c, 256), 256, 0, stream>>>(dwte, dwpe, dout, tokens, b * s, s,
                                                               c, vocab_begin, vocab_end);
  PTDP_CUDA_CHECK(cudaGetLastError());
}

#define PTDP_INSTANTIATE(T)                                                                      \
  template void EmbeddingForward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t,    \
                                    int64_t, int64_t, int64_t, cudaStream_t);                    \
  template void EmbeddingBackward<T>(float*, float*, const T*, const int32_t*, int64_t, int64_t, \
                                     int64_t, int64_t, int64_t, cudaStream_t);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(bf16)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda_kernels
