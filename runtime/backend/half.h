// 16-bit floating-point formats on the host: bf16 and IEEE fp16 stored as their bit patterns
// (uint16_t), converted with round-to-nearest-even as the GPU's __float2bfloat16_rn and
// __float2half_rn do, so the CPU backend rounds exactly where and how a GPU does.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/units.h"

namespace ptdp::runtime::half {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t FloatToBf16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) {
    return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN stays a (quiet) NaN
  }
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);  // to nearest, ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}
inline float Bf16ToFloat(uint16_t b) {
  return BitsFloat(static_cast<uint32_t>(b) << 16);
}

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; overflow goes to infinity.
inline uint16_t FloatToFp16(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return sign | (abs > 0x7F800000u ? 0x7E00u : 0x7C00u);
  if (abs >= 0x477FF000u) return sign | 0x7C00u;  // rounds to beyond 65504: infinity
  if (abs < 0x38800000u) {                        // below 2^-14: subnormal (or zero) in fp16
    if (abs < 0x33000000u) return sign;           // below half the smallest subnormal 2^-25: zero
    const uint32_t mant = (abs & 0x007FFFFFu) | 0x00800000u;
    const int shift = 113 - static_cast<int>(abs >> 23) + 13;  // to units of 2^-24
    const uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    const uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return sign | static_cast<uint16_t>(r);
  }
  const uint32_t rebased = abs - 0x38000000u;  // exponent bias 127 -> 15
  const uint32_t r = rebased + 0xFFFu + ((rebased >> 13) & 1u);
  return sign | static_cast<uint16_t>(r >> 13);
}
inline float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return BitsFloat(sign | 0x7F800000u | (mant << 13));
  return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Round a float to the format (the value a store in `t` and a load back give).
inline float RoundTo(float f, DType t) {
  if (t == DType::kBf16) return Bf16ToFloat(FloatToBf16(f));
  if (t == DType::kFp16) return Fp16ToFloat(FloatToFp16(f));
  return f;
}

inline void Widen(float* out, const void* in, int64_t n, DType t) {
  const auto* p = static_cast<const uint16_t*>(in);
  if (t == DType::kBf16) {
    for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(p[i]);
  } else if (t == DType::kFp16) {
    for (int64_t i = 0; i < n; ++i) out[i] = Fp16ToFloat(p[i]);
  } else {
    std::memcpy(out, in, static_cast<size_t>(n) * sizeof(float));
  }
}
inline void Narrow(void* out, const float* in, int64_t n, DType t) {
  auto* p = static_cast<uint16_t*>(out);
  if (t == DType::kBf16) {
    for (int64_t i = 0; i < n; ++i) p[i] = FloatToBf16(in[i]);
  } else if (t == DType::kFp16) {
    for (int64_t i = 0; i < n; ++i) p[i] = FloatToFp16(in[i]);
  } else {
    std::memcpy(out, in, static_cast<size_t>(n) * sizeof(float));
  }
}

}  // namespace ptdp::runtime::half
