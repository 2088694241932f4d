#include "runtime/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace ptdp::runtime {

double LearningRate(const OptimizerConfig& c, int64_t step) {
  if (c.warmup_steps > 0 && step <= c.warmup_steps) {
    return c.lr * static_cast<double>(step) / static_cast<double>(c.warmup_steps);
  }
  if (c.decay_steps <= c.warmup_steps) return c.lr;
  if (step >= c.decay_steps) return c.min_lr;
  const double ratio = static_cast<double>(step - c.warmup_steps) /
                       static_cast<double>(c.decay_steps - c.warmup_steps);
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(std::numbers::pi * ratio));
}

double ClipCoefficient(const OptimizerConfig& c, double grad_norm) {
  if (c.clip_grad <= 0 || grad_norm <= c.clip_grad) return 1.0;
  return c.clip_grad / (grad_norm + 1e-6);
}

}  // namespace ptdp::runtime
