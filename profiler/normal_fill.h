// The values `ptdp profile --backend cuda` fills GEMM and attention operands with: standard
// normals from the runtime's counter generator, not constants. Why: a tensor-core GEMM's power
// draw depends on its operands' bits, and on an H100/H200 at its power limit a GEMM of constant
// or zero operands holds a higher clock than one of normally distributed values (H. He,
// "Strangely, Matrix Multiplications on GPUs Run Faster When Given 'Predictable' Data",
// thonking.ai, 2024; S. Bekman's mamf-finder.py draws torch.randn operands for the same reason).
// Our H200 tables of 2026-11-26, measured on constants, ran large GEMMs at 790-880 TFLOP/s
// where the same shapes in a training step ran at 500-740 (docs/cuda.md). Header-only and
// usable from device code, so the host test checks the exact function the kernel runs.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/reference/counter_rng.h"

namespace ptdp::profiler {

// Element `index` of a standard-normal tensor drawn under `key`: Box-Muller's cosine branch on
// two single-precision uniforms of the normal stream (indices 2i, 2i+1), each strictly inside
// (0, 1), so the logarithm is finite.
PTDP_HOST_DEVICE inline float StandardNormal(uint64_t key, uint64_t index) {
  namespace rng = ::ptdp::kernels::rng;
  const uint64_t stream = rng::NormalStreamKey(key);
  const float u1 = rng::UniformFloat(stream, 2 * index);
  const float u2 = rng::UniformFloat(stream, 2 * index + 1);
  const float two_pi = 6.2831853071795864769f;
  return sqrtf(-2.0f * logf(u1)) * cosf(two_pi * u2);
}

}  // namespace ptdp::profiler
