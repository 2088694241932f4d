// AdamW with fp32 state, global-norm gradient clipping and the learning-rate schedule (linear
// warm-up, then cosine decay to min_lr), as Megatron-LM's defaults.
#pragma once

#include <cstdint>

namespace ptdp::runtime {

struct OptimizerConfig {
  double lr = 1e-3;          // peak learning rate
  double min_lr = 1e-4;      // floor of the cosine decay
  int64_t warmup_steps = 0;  // linear warm-up from lr/warmup to lr
  int64_t decay_steps = 0;   // cosine decay over (warmup, decay_steps]; lr = min_lr after
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // on weight matrices (2-D tensors) only, not biases or LayerNorm
  double clip_grad = 1.0;     // global norm; 0 disables clipping
};

// Learning rate of iteration `step` (1-based).
double LearningRate(const OptimizerConfig& c, int64_t step);
// The factor clipping multiplies the gradients by (1 when the norm is within clip_grad).
double ClipCoefficient(const OptimizerConfig& c, double grad_norm);

}  // namespace ptdp::runtime
