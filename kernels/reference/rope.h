// The rotary embedding's frequencies: inv_freq(e) = base^(-2e/d) for the pair e < d/2, and Llama
// 3.1's scaling of them (Meta's llama3 rope_type; Hugging Face's rope_scaling {"rope_type":
// "llama3"}; Megatron-Core's --use-rope-scaling), which keeps the high frequencies, divides the low
// ones by `factor` and blends the band between:
//   wavelength w = 2 pi / f;  high = original / high_freq_factor;  low = original / low_freq_factor
//   w < high: f;   w > low: f / factor;
//   between: (1 - t) f / factor + t f  with  t = (original / w - low_freq_factor) /
//                                              (high_freq_factor - low_freq_factor).
// Header-only and usable from device code (PTDP_HOST_DEVICE), in double on the host (the reference)
// and in float on the GPU (as Megatron-Core and Hugging Face compute the angles).
#pragma once

#include <math.h>

#include <cstdint>
#include <type_traits>

#include "kernels/reference/counter_rng.h"  // PTDP_HOST_DEVICE

namespace ptdp::kernels {

struct RopeFreqs {
  double base = 10000;
  // Llama 3.1's scaling when factor > 0 (0: none).
  double factor = 0;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  double original_max_positions = 8192;
  // The share of a head's features RoPE turns (model.rotary_percent; Megatron-Core's
  // --rotary-percent, Hugging Face's partial_rotary_factor; Nemotron-4's 0.5): the first
  // RotatedFeatures of each head, paired and with frequencies over that width; the rest pass
  // through unchanged.
  double percent = 1;
};

// Megatron-Core's int(kv_channels * rotary_percent) (RotaryEmbedding's dim) and Hugging Face's
// int(head_dim * partial_rotary_factor): the features turned of a head of d.
PTDP_HOST_DEVICE inline int64_t RotatedFeatures(int64_t d, const RopeFreqs& r) {
  return static_cast<int64_t>(static_cast<double>(d) * r.percent);
}

// The angle per position of pair e of the d rotated features (RotatedFeatures), in F (double or
// float; the float form's exp2f and log2f are what the GPU kernels always computed).
template <typename F>
PTDP_HOST_DEVICE F RopeInvFreq(int64_t e, int64_t d, const RopeFreqs& r) {
  F f;
  if constexpr (std::is_same_v<F, float>) {
    f = exp2f(-2.0f * static_cast<float>(e) / static_cast<float>(d) *
              log2f(static_cast<float>(r.base)));
  } else {
    f = pow(r.base, -2.0 * static_cast<double>(e) / static_cast<double>(d));
  }
  if (!(r.factor > 0)) return f;
  const F two_pi = F(6.283185307179586);
  const F wavelength = two_pi / f, original = F(r.original_max_positions);
  if (wavelength < original / F(r.high_freq_factor)) return f;
  if (wavelength > original / F(r.low_freq_factor)) return f / F(r.factor);
  const F t = (original / wavelength - F(r.low_freq_factor)) /
              (F(r.high_freq_factor) - F(r.low_freq_factor));
  return (F(1) - t) * f / F(r.factor) + t * f;
}

}  // namespace ptdp::kernels
