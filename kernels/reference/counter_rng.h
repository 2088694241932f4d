// Stateless counter-based random numbers shared by the reference and CUDA kernels: a value depends
// only on (key, index), so every parallel layout draws the same number for the same global
// element. Header-only and usable from device code (PTDP_HOST_DEVICE).
//
// Mixing: a splitmix64-style finalizer (xor-shift / multiply rounds) applied to the index, xored
// with the key and mixed again. Uniforms take the top 53 bits and sit at the centre of their bin,
// so they lie strictly inside (0, 1). Normals use Box-Muller on two uniforms from a stream derived
// from the key (indices 2i and 2i+1), keeping only the cosine branch.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PTDP_HOST_DEVICE __host__ __device__
#else
#define PTDP_HOST_DEVICE
#endif

namespace ptdp::kernels::rng {

// A bijective 64-bit mixer (avalanche: every input bit flips about half the output bits).
PTDP_HOST_DEVICE inline uint64_t Mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// 64 random bits for (key, index).
PTDP_HOST_DEVICE inline uint64_t Bits(uint64_t key, uint64_t index) {
  return Mix64(key ^ Mix64(index));
}

// Uniform in (0, 1): the top 53 bits, offset by half a bin.
PTDP_HOST_DEVICE inline double Uniform(uint64_t key, uint64_t index) {
  return (static_cast<double>(Bits(key, index) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Same, in single precision (24 bits), for device kernels that avoid doubles. NOT bit-equal to
// Uniform(); the dropout decision uses UniformFloat everywhere so references and kernels agree.
PTDP_HOST_DEVICE inline float UniformFloat(uint64_t key, uint64_t index) {
  return (static_cast<float>(Bits(key, index) >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

// The key of the normal stream derived from a tensor key (kept apart from its uniform stream).
PTDP_HOST_DEVICE inline uint64_t NormalStreamKey(uint64_t key) {
  return Mix64(key ^ 0x6E6F726D616C2121ull);
}

// Dropout: element `index` is dropped iff its uniform draw is below p.
PTDP_HOST_DEVICE inline bool DropoutKeeps(uint64_t key, uint64_t index, float p) {
  return UniformFloat(key, index) >= p;
}

}  // namespace ptdp::kernels::rng
