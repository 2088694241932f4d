#include "runtime/cuda/loss_scaler.h"

#include <algorithm>

namespace ptdp::runtime::cuda {

Result<DynamicLossScaler> DynamicLossScaler::Create(const LossScalerOptions& o) {
  if (!(o.initial_scale > 0)) return Status::Invalid("loss_scale.initial_scale: must be positive");
  if (!(o.min_scale > 0) || o.min_scale > o.initial_scale) {
    return Status::Invalid("loss_scale.min_scale: must be positive and <= initial_scale");
  }
  if (!(o.growth > 1)) return Status::Invalid("loss_scale.growth: must be > 1");
  if (!(o.backoff > 0 && o.backoff < 1))
    return Status::Invalid("loss_scale.backoff: must be in (0, 1)");
  if (o.growth_interval < 1) return Status::Invalid("loss_scale.growth_interval: must be >= 1");
  if (o.hysteresis < 1) return Status::Invalid("loss_scale.hysteresis: must be >= 1");
  return DynamicLossScaler(o);
}

bool DynamicLossScaler::Update(bool found_non_finite) {
  if (found_non_finite) {
    ++skipped_;
    clean_in_a_row_ = 0;
    if (++overflows_in_a_row_ >= o_.hysteresis) {
      scale_ = std::max(scale_ * o_.backoff, o_.min_scale);
      overflows_in_a_row_ = 0;
    }
    return false;
  }
  overflows_in_a_row_ = 0;
  if (++clean_in_a_row_ >= o_.growth_interval) {
    scale_ *= o_.growth;
    clean_in_a_row_ = 0;
  }
  return true;
}

}  // namespace ptdp::runtime::cuda
