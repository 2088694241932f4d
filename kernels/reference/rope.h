// The rotary embedding's frequencies: inv_freq(e) = base^(-2e/d) for the pair e < d/2, and Llama
// 3.1's scaling of them (Meta's llama3 rope_type; Hugging Face's rope_scaling {"rope_type":
// "llama3"}; Megatron-Core's --use-rope-scaling), which keeps the high frequencies, divides the low
// ones by `factor` and blends the band between:
//   wavelength w = 2 pi / f;  high = original / high_freq_factor;  low = original / low_freq_factor
//   w < high: f;   w > low: f / factor;
//   between: (1 - t) f / factor + t f  with  t = (original / w - low_freq_factor) /
//                                              (high_freq_factor - low_freq_factor).
// YaRN (Peng et al. 2023; Hugging Face's rope_type "yarn"; Megatron-Core's YarnRotaryEmbedding;
// DeepSeek-V3's and Kimi K2's) blends per pair instead: pair e keeps f below the ramp and takes
// f / factor above it, the ramp running linearly over the pairs [low, high] whose wavelengths make
// beta_fast and beta_slow turns within the original length:
//   dim(turns) = d ln(original / (2 pi turns)) / (2 ln base);  low = max(floor(dim(beta_fast)), 0),
//   high = min(ceil(dim(beta_slow)), d - 1);  ramp = clamp((e - low) / (high - low), 0, 1)
//   f_e = (1 - ramp) f + ramp f / factor,
// and cos and sin are multiplied by attention_factor (YaRN's concentration; 1 leaves the
// rotation pure, as the other forms do).
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
  // YaRN in place of Llama 3.1's scaling (factor and original_max_positions shared; the low and
  // high frequency factors unused), and its ramp's numbers of turns.
  bool yarn = false;
  double beta_fast = 32;
  double beta_slow = 1;
  // cos and sin are scaled by it (YaRN's concentration, "mscale"); 1 for the other forms.
  double attention_factor = 1;
};

// Megatron-Core's int(kv_channels * rotary_percent) (RotaryEmbedding's dim) and Hugging Face's
// int(head_dim * partial_rotary_factor): the features turned of a head of d.
PTDP_HOST_DEVICE inline int64_t RotatedFeatures(int64_t d, const RopeFreqs& r) {
  return static_cast<int64_t>(static_cast<double>(d) * r.percent);
}

// YaRN's ramp over the pairs of d rotated features, [low, high] with high > low: computed in double
// on the host and in float on the GPU (once per thread there: it depends on no position or pair).
template <typename F>
struct YarnRamp {
  F low = 0, high = 1;
};
template <typename F>
PTDP_HOST_DEVICE YarnRamp<F> YarnRampOf(int64_t d, const RopeFreqs& r) {
  const F two_pi = F(6.283185307179586), dims = F(d), original = F(r.original_max_positions);
  const F log_base = F(2) * log(F(r.base));
  F low = floor(dims * log(original / (two_pi * F(r.beta_fast))) / log_base);
  F high = ceil(dims * log(original / (two_pi * F(r.beta_slow))) / log_base);
  low = low > F(0) ? low : F(0);
  high = high < dims - F(1) ? high : dims - F(1);
  if (low == high) high += F(0.001);  // Hugging Face's and Megatron-Core's guard
  return {low, high};
}

// YaRN's frequency of pair e whose unscaled frequency is f.
template <typename F>
PTDP_HOST_DEVICE F YarnBlend(F f, int64_t e, const YarnRamp<F>& ramp, const RopeFreqs& r) {
  F t = (F(e) - ramp.low) / (ramp.high - ramp.low);
  t = t < F(0) ? F(0) : (t > F(1) ? F(1) : t);
  return (F(1) - t) * f + t * f / F(r.factor);
}

// The angle per position of pair e of the d rotated features (RotatedFeatures), in F (double or
// float; the float form's exp2f and log2f are what the GPU kernels always computed).
// `ramp` is YarnRampOf(d, r) (read only under YaRN).
template <typename F>
PTDP_HOST_DEVICE F RopeInvFreq(int64_t e, int64_t d, const RopeFreqs& r, const YarnRamp<F>& ramp) {
  F f;
  if constexpr (std::is_same_v<F, float>) {
    f = exp2f(-2.0f * static_cast<float>(e) / static_cast<float>(d) *
              log2f(static_cast<float>(r.base)));
  } else {
    f = pow(r.base, -2.0 * static_cast<double>(e) / static_cast<double>(d));
  }
  if (!(r.factor > 0)) return f;
  if (r.yarn) return YarnBlend<F>(f, e, ramp, r);
  const F two_pi = F(6.283185307179586);
  const F wavelength = two_pi / f, original = F(r.original_max_positions);
  if (wavelength < original / F(r.high_freq_factor)) return f;
  if (wavelength > original / F(r.low_freq_factor)) return f / F(r.factor);
  const F t = (original / wavelength - F(r.low_freq_factor)) /
              (F(r.high_freq_factor) - F(r.low_freq_factor));
  return (F(1) - t) * f / F(r.factor) + t * f;
}

// The same, the ramp computed here (the reference and the tests).
template <typename F>
PTDP_HOST_DEVICE F RopeInvFreq(int64_t e, int64_t d, const RopeFreqs& r) {
  return RopeInvFreq<F>(e, d, r, r.yarn ? YarnRampOf<F>(d, r) : YarnRamp<F>{});
}

}  // namespace ptdp::kernels
