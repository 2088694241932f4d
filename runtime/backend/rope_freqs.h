// The seam's RopeSpec (runtime/backend/ops.h) as the kernels' RopeFreqs (kernels/reference/rope.h),
// field for field: the one conversion both backends pass on.
#pragma once

#include "kernels/reference/rope.h"
#include "runtime/backend/ops.h"

namespace ptdp::runtime {

inline kernels::RopeFreqs RopeFreqsOf(const RopeSpec& rope) {
  kernels::RopeFreqs r;
  r.base = rope.base;
  r.factor = rope.factor;
  r.low_freq_factor = rope.low_freq_factor;
  r.high_freq_factor = rope.high_freq_factor;
  r.original_max_positions = rope.original_max_positions;
  r.percent = rope.percent;
  r.yarn = rope.yarn;
  r.beta_fast = rope.beta_fast;
  r.beta_slow = rope.beta_slow;
  r.attention_factor = rope.attention_factor;
  return r;
}

}  // namespace ptdp::runtime
