// The bodies of CudaOps' LayerNorm kernels, one 16-byte pack of V neighbouring elements of a row
// at a time (layernorm_kernels.cu launches them; the H200 op table showed the scalar warp-per-row
// kernels of kernels/cuda at 29 ms of a 678 ms gpt-1.3b step, reading 2 bytes per lane per load).
// The bodies are __host__ __device__ so that tests/cuda/layernorm_packs_test.cc runs them on the
// host against CpuOps, lane by lane as a warp would.
//
// A row of c elements is c / V packs; lane L of the row's warp takes packs L, L + 32, ... . The
// statistics are two-pass (mean, then the sum of squared deviations), as kernels/cuda's kernel
// and the CPU reference compute them, so rows with a large mean keep an exact variance. Every
// value is computed in fp32 and rounded once to T.
#pragma once

#include <cstdint>

#include "kernels/reference/ops.h"
#include "runtime/cuda/elementwise_packs.h"

namespace ptdp::runtime::cuda::lnpacks {

using packs::Load;
using packs::Narrow;
using packs::Pack;
using packs::Store;
using packs::Wide;

inline constexpr float kEps = static_cast<float>(kernels::kLayerNormEps);

// Sum of the pack's V elements starting at row element i.
template <typename T, int V>
PTDP_HOST_DEVICE inline float PackSum(const T* row, int64_t i) {
  const Pack<T, V> x = Load<T, V>(row, i);
  float s = 0.0f;
  for (int j = 0; j < V; ++j) s += Wide(x.e[j]);
  return s;
}

// Sum of (x - mean)^2 over the pack.
template <typename T, int V>
PTDP_HOST_DEVICE inline float PackSquaredDeviation(const T* row, int64_t i, float mean) {
  const Pack<T, V> x = Load<T, V>(row, i);
  float s = 0.0f;
  for (int j = 0; j < V; ++j) {
    const float d = Wide(x.e[j]) - mean;
    s += d * d;
  }
  return s;
}

// out = (x - mean) rstd (weight + weight_offset) + bias over the pack (weight, bias indexed by
// column i; weight_offset 1 for LayerNorm1P, kernels/reference/ops.h).
template <typename T, int V>
PTDP_HOST_DEVICE inline void NormalizePack(T* out_row, const T* row, const T* weight, const T* bias,
                                           int64_t i, float mean, float rstd,
                                           float weight_offset = 0.0f) {
  const Pack<T, V> x = Load<T, V>(row, i), w = Load<T, V>(weight, i), b = Load<T, V>(bias, i);
  Pack<T, V> o;
  for (int j = 0; j < V; ++j) {
    const float xhat = (Wide(x.e[j]) - mean) * rstd;
    o.e[j] = Narrow<T>(xhat * (Wide(w.e[j]) + weight_offset) + Wide(b.e[j]));
  }
  Store<T, V>(out_row, i, o);
}

// With g = dout (weight + weight_offset) and xhat = (x - mean) rstd: adds sum g to *g_sum and
// sum g xhat to *gx_sum.
template <typename T, int V>
PTDP_HOST_DEVICE inline void PackGradSums(float* g_sum, float* gx_sum, const T* dout_row,
                                          const T* row, const T* weight, int64_t i, float mean,
                                          float rstd, float weight_offset = 0.0f) {
  const Pack<T, V> d = Load<T, V>(dout_row, i), x = Load<T, V>(row, i), w = Load<T, V>(weight, i);
  for (int j = 0; j < V; ++j) {
    const float g = Wide(d.e[j]) * (Wide(w.e[j]) + weight_offset);
    *g_sum += g;
    *gx_sum += g * (Wide(x.e[j]) - mean) * rstd;
  }
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)) over the pack.
template <typename T, int V>
PTDP_HOST_DEVICE inline void DxPack(T* dx_row, const T* dout_row, const T* row, const T* weight,
                                    int64_t i, float mean, float rstd, float g_mean, float gx_mean,
                                    float weight_offset = 0.0f) {
  const Pack<T, V> d = Load<T, V>(dout_row, i), x = Load<T, V>(row, i), w = Load<T, V>(weight, i);
  Pack<T, V> o;
  for (int j = 0; j < V; ++j) {
    const float g = Wide(d.e[j]) * (Wide(w.e[j]) + weight_offset);
    const float xhat = (Wide(x.e[j]) - mean) * rstd;
    o.e[j] = Narrow<T>(rstd * (g - g_mean - xhat * gx_mean));
  }
  Store<T, V>(dx_row, i, o);
}

// The weight and bias gradients' partial sums of one row over the pack's V columns:
// dweight[j] += dout xhat, dbias[j] += dout.
template <typename T, int V>
PTDP_HOST_DEVICE inline void ParamGradPack(float (&dweight)[V], float (&dbias)[V],
                                           const T* dout_row, const T* row, int64_t i, float mean,
                                           float rstd) {
  const Pack<T, V> d = Load<T, V>(dout_row, i), x = Load<T, V>(row, i);
  for (int j = 0; j < V; ++j) {
    const float dv = Wide(d.e[j]);
    dweight[j] += dv * (Wide(x.e[j]) - mean) * rstd;
    dbias[j] += dv;
  }
}

}  // namespace ptdp::runtime::cuda::lnpacks
