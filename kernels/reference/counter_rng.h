// Stateless counter-based random numbers shared by the reference and CUDA kernels: a value depends
// only on (key, index), so every parallel layout and every backend draws the same number for the
// same global element. Header-only and usable from device code (PTDP_HOST_DEVICE).
//
// Generator: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2,
// 3", SC'11): a 128-bit counter and a 64-bit key, ten rounds of two 32x32->64 multiplies
// (0xD2511F53, 0xCD9E8D57) with the key bumped by the Weyl constants (0x9E3779B9, 0xBB67AE85)
// between rounds. The key is the tensor's (site, step) key; the counter is the GLOBAL element
// index:
//   dropout (32 bits per element): counter (index / 4, 0), word index % 4 of the output, so one
//     Philox call serves four neighbouring elements (what a GPU thread draws at once);
//   uniform doubles (53 bits; initialisation): counter (index, 1), words 0 and 1.
// Uniforms sit at the centre of their bin, so they lie strictly inside (0, 1). Normals use
// Box-Muller on two uniforms from a stream derived from the key (indices 2i and 2i+1), keeping only
// the cosine branch.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PTDP_HOST_DEVICE __host__ __device__
#else
#define PTDP_HOST_DEVICE
#endif

namespace ptdp::kernels::rng {

struct Philox4x32 {
  uint32_t v[4];
};

PTDP_HOST_DEVICE inline void MulHiLo32(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

// Philox4x32 with 10 rounds of counter c under key (k0, k1).
PTDP_HOST_DEVICE inline Philox4x32 Philox4x32_10(Philox4x32 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo32(kM0, c.v[0], &hi0, &lo0);
    MulHiLo32(kM1, c.v[2], &hi1, &lo1);
    c = Philox4x32{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
  }
  return c;
}

PTDP_HOST_DEVICE inline Philox4x32 Draw(uint64_t key, uint64_t c01, uint32_t c2) {
  return Philox4x32_10(
      Philox4x32{{static_cast<uint32_t>(c01), static_cast<uint32_t>(c01 >> 32), c2, 0u}},
      static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32));
}

// 64 random bits for (key, index) (the double stream, counter word 2 = 1).
PTDP_HOST_DEVICE inline uint64_t Bits(uint64_t key, uint64_t index) {
  const Philox4x32 r = Draw(key, index, 1u);
  return (static_cast<uint64_t>(r.v[1]) << 32) | r.v[0];
}

// 32 random bits for (key, index) (the dropout stream: word index % 4 of counter index / 4).
PTDP_HOST_DEVICE inline uint32_t Bits32(uint64_t key, uint64_t index) {
  return Draw(key, index >> 2, 0u).v[index & 3u];
}

// Uniform in (0, 1): the top 53 bits, offset by half a bin.
PTDP_HOST_DEVICE inline double Uniform(uint64_t key, uint64_t index) {
  return (static_cast<double>(Bits(key, index) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Uniform in (0, 1) in single precision from 32 random bits (the top 24, offset by half a bin).
PTDP_HOST_DEVICE inline float UniformFloatOfBits(uint32_t bits) {
  return (static_cast<float>(bits >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

// Same, in single precision (24 bits), for device kernels that avoid doubles. NOT equal to
// Uniform(); the dropout decision uses UniformFloat everywhere so references and kernels agree.
PTDP_HOST_DEVICE inline float UniformFloat(uint64_t key, uint64_t index) {
  return UniformFloatOfBits(Bits32(key, index));
}

// The key of the normal stream derived from a tensor key (kept apart from its uniform stream):
// a bijective 64-bit mix (splitmix64's finalizer) of the key with a constant.
PTDP_HOST_DEVICE inline uint64_t NormalStreamKey(uint64_t key) {
  uint64_t z = key ^ 0x6E6F726D616C2121ull;
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Dropout: element `index` is dropped iff its uniform draw is below p.
PTDP_HOST_DEVICE inline bool DropoutKeeps(uint64_t key, uint64_t index, float p) {
  return UniformFloat(key, index) >= p;
}

// DropoutKeeps for `count` consecutive indices from `first`, calling keep(i, kept) for i = 0 ..
// count - 1 (the index first + i). The same decisions as DropoutKeeps index by index, with one
// Philox call per four indices (the four words Bits32 takes from one counter) instead of one per
// index: the CPU backend's masks spent most of their time drawing words they threw away.
template <typename Keep>
PTDP_HOST_DEVICE inline void ForEachDropoutKeep(uint64_t key, uint64_t first, int64_t count,
                                                float p, Keep&& keep) {
  int64_t i = 0;
  while (i < count) {
    const uint64_t index = first + static_cast<uint64_t>(i);
    const Philox4x32 r = Draw(key, index >> 2, 0u);
    for (uint32_t word = static_cast<uint32_t>(index & 3u); word < 4u && i < count; ++word, ++i) {
      keep(i, UniformFloatOfBits(r.v[word]) >= p);
    }
  }
}

}  // namespace ptdp::kernels::rng
