// DynamicLossScaler: the fp16 option of mixed precision (Micikevicius et al. 2018, as Megatron-LM's
// DynamicGradScaler). The loss is multiplied by scale() before the backward; after it, the caller
// checks every gradient for inf/nan (kernels/cuda FlagNonFinite, then AllReduceMax of the flag over
// the model-parallel group so every rank decides alike) and calls Update(found):
//   found:     the step is skipped, the scale is multiplied by backoff (0.5), not below min_scale;
//              after `hysteresis` overflows in a row, not before;
//   not found: the step runs with gradients multiplied by 1/scale(); after growth_interval clean
//              steps in a row the scale is multiplied by growth (2).
// bf16 training needs none of this (bf16 has fp32's exponent range): scale() stays 1 there.
// Host logic only; thread-safety: none.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace ptdp::runtime::cuda {

struct LossScalerOptions {
  double initial_scale = 65536.0;  // 2^16, Megatron-LM's --initial-loss-scale default is 2^32
  double min_scale = 1.0;
  double growth = 2.0;
  double backoff = 0.5;
  int growth_interval = 1000;  // clean steps before growing
  int hysteresis = 2;          // overflows in a row before backing off (Megatron-LM's default)
};

class DynamicLossScaler {
 public:
  // kInvalidArgument naming the field for a scale <= 0, growth <= 1, backoff outside (0, 1),
  // intervals < 1.
  static Result<DynamicLossScaler> Create(const LossScalerOptions& o);

  double scale() const { return scale_; }
  // Returns whether the optimizer step should run (no inf/nan found).
  bool Update(bool found_non_finite);
  int64_t skipped_steps() const { return skipped_; }

 private:
  explicit DynamicLossScaler(const LossScalerOptions& o) : o_(o), scale_(o.initial_scale) {}
  LossScalerOptions o_;
  double scale_;
  int clean_in_a_row_ = 0;
  int overflows_in_a_row_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace ptdp::runtime::cuda
