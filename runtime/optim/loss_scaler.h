// LossScaler: dynamic loss scaling for fp16 training (Micikevicius et al. 2018), backend-neutral.
// The loss gradient is multiplied by scale() before the backward; after the gradient reduction the
// trainer checks every gradient for inf/NaN (Ops::FlagNonFinite, agreed over all ranks) and calls
// Update(found):
//   found:     the step is skipped and the scale halves (not below 1);
//   not found: the step runs on gradients multiplied by 1/scale(); after `window` clean steps in a
//              row the scale doubles.
// bf16 and fp32 use a fixed scale of 1 (bf16 has fp32's exponent range). Host logic only.
#pragma once

#include <cstdint>

namespace ptdp::runtime {

class LossScaler {
 public:
  LossScaler(double initial_scale, int window, bool dynamic)
      : scale_(dynamic ? initial_scale : 1.0),
        window_(window < 1 ? 1 : window),
        dynamic_(dynamic) {}
  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  int64_t skipped_steps() const { return skipped_; }
  int clean_steps() const { return clean_; }
  // A checkpoint's state (runtime/checkpoint): the scale only when dynamic, the counts always
  // (Adam's bias correction counts the steps taken, step - skipped).
  void Restore(double scale, int clean, int64_t skipped) {
    if (dynamic_) {
      scale_ = scale;
      clean_ = clean;
    }
    skipped_ = skipped;
  }
  // Returns whether the optimizer step runs.
  bool Update(bool found_non_finite) {
    if (!dynamic_) return !found_non_finite;
    if (found_non_finite) {
      ++skipped_;
      clean_ = 0;
      scale_ = scale_ * 0.5 < 1.0 ? 1.0 : scale_ * 0.5;
      return false;
    }
    if (++clean_ >= window_) {
      scale_ *= 2.0;
      clean_ = 0;
    }
    return true;
  }

 private:
  double scale_;
  int window_;
  bool dynamic_;
  int clean_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace ptdp::runtime
