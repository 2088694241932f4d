// The bodies of CudaOps' memory-bound element-wise kernels, one "pack" of V neighbouring elements
// at a time: with V = 16 / sizeof(T) every tensor is read and written in 16-byte accesses (the
// widest a thread issues), which is what lets these kernels run at HBM speed. The bodies are
// __host__ __device__ so that the CPU tests run them element for element against CpuOps
// (tests/cuda/elementwise_packs_test.cc, label unit); runtime/cuda/ops_kernels.cu launches them.
//
// A pack starts at element i (i % V == 0); when V > 1 every pointer is 16-byte aligned (for the u8
// masks: V-byte aligned), which the launcher checks, falling back to V = 1. Each element is
// computed in fp32 and rounded once to T, as CpuOps does.
//
// Dropout draws: rng::Bits32 gives element g the word g % 4 of the Philox block g / 4; a pack
// draws each block it touches once (two or three draws for eight elements, not eight).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernels/reference/counter_rng.h"

namespace ptdp::runtime::cuda::packs {

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T e[V];
};

// Elements per 16-byte access.
template <typename T>
inline constexpr int kWidth = static_cast<int>(16 / sizeof(T));

PTDP_HOST_DEVICE inline float Wide(float v) {
  return v;
}
PTDP_HOST_DEVICE inline float Wide(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
PTDP_HOST_DEVICE inline float Wide(__half v) {
  return __half2float(v);
}
template <typename T>
PTDP_HOST_DEVICE inline T Narrow(float v);
template <>
PTDP_HOST_DEVICE inline float Narrow<float>(float v) {
  return v;
}
template <>
PTDP_HOST_DEVICE inline __nv_bfloat16 Narrow<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
PTDP_HOST_DEVICE inline __half Narrow<__half>(float v) {
  return __float2half_rn(v);
}

template <typename T, int V>
PTDP_HOST_DEVICE inline Pack<T, V> Load(const T* p, int64_t i) {
  return *reinterpret_cast<const Pack<T, V>*>(p + i);
}
template <typename T, int V>
PTDP_HOST_DEVICE inline void Store(T* p, int64_t i, const Pack<T, V>& v) {
  *reinterpret_cast<Pack<T, V>*>(p + i) = v;
}

// GeLU (tanh approximation) and its derivative in fp32 (kernels/reference/gelu.cc has the
// formulas; k = sqrt(2 / pi), a = GPT-2's 0.044715).
inline constexpr float kGeluK = 0.7978845608028654f, kGeluA = 0.044715f;
PTDP_HOST_DEVICE inline float Gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluK * (x + kGeluA * x * x * x)));
}
PTDP_HOST_DEVICE inline float GeluGrad(float x) {
  const float t = tanhf(kGeluK * (x + kGeluA * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluA * x * x);
}

// out = GeLU(pre) (the bias-GeLU epilogue of LinearForward: pre already holds the bias).
template <typename T, int V>
PTDP_HOST_DEVICE inline void GeluForwardPack(T* out, const T* pre, int64_t i) {
  const Pack<T, V> x = Load<T, V>(pre, i);
  Pack<T, V> o;
  for (int j = 0; j < V; ++j) o.e[j] = Narrow<T>(Gelu(Wide(x.e[j])));
  Store<T, V>(out, i, o);
}

// Word k of a Philox block, by selects: an indexed read r.v[k] with k unknown at compile time
// puts r in local memory (ptxas reported a 16-byte stack frame).
PTDP_HOST_DEVICE inline uint32_t Word(const kernels::rng::Philox4x32& r, uint32_t k) {
  return k == 0 ? r.v[0] : k == 1 ? r.v[1] : k == 2 ? r.v[2] : r.v[3];
}

// keep[j] for global elements g0 .. g0 + V - 1: the uniform draw of rng::DropoutKeeps is >= p.
template <int V>
PTDP_HOST_DEVICE inline void Keeps(bool (&keep)[V], uint64_t key, uint64_t g0, float p) {
  uint64_t block = g0 >> 2;
  kernels::rng::Philox4x32 r = kernels::rng::Draw(key, block, 0u);
  for (int j = 0; j < V; ++j) {
    const uint64_t g = g0 + static_cast<uint64_t>(j);
    if ((g >> 2) != block) {
      block = g >> 2;
      r = kernels::rng::Draw(key, block, 0u);
    }
    keep[j] = kernels::rng::UniformFloatOfBits(Word(r, static_cast<uint32_t>(g & 3u))) >= p;
  }
}

// out = a + b (the residual sums of the backward; out may alias a or b: each pack is read whole
// before it is written).
template <typename T, int V>
PTDP_HOST_DEVICE inline void AddPack(T* out, const T* a, const T* b, int64_t i) {
  const Pack<T, V> x = Load<T, V>(a, i), y = Load<T, V>(b, i);
  Pack<T, V> o;
  for (int j = 0; j < V; ++j) o.e[j] = Narrow<T>(Wide(x.e[j]) + Wide(y.e[j]));
  Store<T, V>(out, i, o);
}

// dpre = GeLU'(pre) * dgelu.
template <typename T, int V>
PTDP_HOST_DEVICE inline void GeluBackwardPack(T* dpre, const T* pre, const T* dgelu, int64_t i) {
  const Pack<T, V> x = Load<T, V>(pre, i), g = Load<T, V>(dgelu, i);
  Pack<T, V> out;
  for (int j = 0; j < V; ++j) out.e[j] = Narrow<T>(GeluGrad(Wide(x.e[j])) * Wide(g.e[j]));
  Store<T, V>(dpre, i, out);
}

// dx = dy * mask * keep_scale (dy when p == 0; keep_scale = 1 / (1 - p) in fp32).
template <typename T, int V>
PTDP_HOST_DEVICE inline void DropoutBackwardPack(T* dx, const T* dy, const uint8_t* mask,
                                                 float keep_scale, bool dropout, int64_t i) {
  const Pack<T, V> g = Load<T, V>(dy, i);
  Pack<T, V> out;
  if (dropout) {
    const Pack<uint8_t, V> m = Load<uint8_t, V>(mask, i);
    for (int j = 0; j < V; ++j) out.e[j] = Narrow<T>(m.e[j] ? Wide(g.e[j]) * keep_scale : 0.0f);
  } else {
    for (int j = 0; j < V; ++j) out.e[j] = Narrow<T>(Wide(g.e[j]));
  }
  Store<T, V>(dx, i, out);
}

// out[n][c] = residual + dropout(x + bias): bias (nullable) is read at column i % c (V divides
// c, so a pack never crosses a row), residual nullable; with p > 0 the mask of global element
// first + i is written (1 = kept) and kept values are scaled by keep_scale.
template <typename T, int V>
PTDP_HOST_DEVICE inline void BiasDropoutResidualPack(T* out, uint8_t* mask, const T* x,
                                                     const T* bias, const T* residual, int64_t c,
                                                     uint64_t key, uint64_t first, float p,
                                                     float keep_scale, int64_t i) {
  const Pack<T, V> xv = Load<T, V>(x, i);
  float v[V];
  for (int j = 0; j < V; ++j) v[j] = Wide(xv.e[j]);
  if (bias != nullptr) {
    const Pack<T, V> b = Load<T, V>(bias, i % c);
    for (int j = 0; j < V; ++j) v[j] += Wide(b.e[j]);
  }
  if (p > 0.0f) {
    bool keep[V];
    Keeps<V>(keep, key, first + static_cast<uint64_t>(i), p);
    Pack<uint8_t, V> m;
    for (int j = 0; j < V; ++j) {
      m.e[j] = keep[j] ? 1 : 0;
      v[j] = keep[j] ? v[j] * keep_scale : 0.0f;
    }
    Store<uint8_t, V>(mask, i, m);
  }
  if (residual != nullptr) {
    const Pack<T, V> r = Load<T, V>(residual, i);
    for (int j = 0; j < V; ++j) v[j] += Wide(r.e[j]);
  }
  Pack<T, V> o;
  for (int j = 0; j < V; ++j) o.e[j] = Narrow<T>(v[j]);
  Store<T, V>(out, i, o);
}

}  // namespace ptdp::runtime::cuda::packs
