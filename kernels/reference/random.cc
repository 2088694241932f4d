// Counter-based random numbers: hashing names to keys, uniforms, normals, dropout masks.
#include <cmath>

#include "kernels/reference/counter_rng.h"
#include "kernels/reference/ops.h"

namespace ptdp::kernels {

// FNV-1a, 64 bit.
uint64_t HashKey(const char* name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const char* p = name; *p != '\0'; ++p) {
    h ^= static_cast<uint8_t>(*p);
    h *= 0x100000001B3ull;
  }
  return h;
}

double UniformFromCounter(uint64_t key, uint64_t index) {
  return rng::Uniform(key, index);
}

double NormalFromCounter(uint64_t key, uint64_t index) {
  const uint64_t k = rng::NormalStreamKey(key);
  const double u1 = rng::Uniform(k, 2 * index);
  const double u2 = rng::Uniform(k, 2 * index + 1);
  constexpr double kTwoPi = 6.28318530717958647692;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

template <typename T>
T DropoutMaskValue(uint64_t key, uint64_t index, double p) {
  if (p <= 0.0) return T(1);
  if (!rng::DropoutKeeps(key, index, static_cast<float>(p))) return T(0);
  return static_cast<T>(1.0 / (1.0 - p));
}

template <typename T>
void FillDropoutMask(T* mask, uint64_t key, uint64_t first_index, int64_t count, double p) {
  if (p <= 0.0) {
    for (int64_t i = 0; i < count; ++i) mask[i] = T(1);
    return;
  }
  const T kept_value = static_cast<T>(1.0 / (1.0 - p));
  rng::ForEachDropoutKeep(key, first_index, count, static_cast<float>(p),
                          [&](int64_t i, bool kept) { mask[i] = kept ? kept_value : T(0); });
}

template <typename T>
void FillAttentionDropoutMask(T* mask, uint64_t key, int64_t b, int64_t s, int64_t h_local,
                              int64_t head_begin, int64_t h_total, double p, int64_t batch_begin) {
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hh = 0; hh < h_local; ++hh) {
      const uint64_t base =
          static_cast<uint64_t>(((batch_begin + bi) * h_total + head_begin + hh) * s * s);
      FillDropoutMask(mask + (bi * h_local + hh) * s * s, key, base, s * s, p);
    }
  }
}

template <typename T>
void FillNormal(T* out, uint64_t key, uint64_t first_index, int64_t count, double mean,
                double stddev) {
  for (int64_t i = 0; i < count; ++i) {
    out[i] = static_cast<T>(mean + stddev * NormalFromCounter(key, first_index + i));
  }
}

#define PTDP_INSTANTIATE(T)                                                                   \
  template T DropoutMaskValue<T>(uint64_t, uint64_t, double);                                 \
  template void FillDropoutMask<T>(T*, uint64_t, uint64_t, int64_t, double);                  \
  template void FillAttentionDropoutMask<T>(T*, uint64_t, int64_t, int64_t, int64_t, int64_t, \
                                            int64_t, double, int64_t);                        \
  template void FillNormal<T>(T*, uint64_t, uint64_t, int64_t, double, double);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::kernels
