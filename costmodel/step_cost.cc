#include "costmodel/step_cost.h"

#include <cmath>
#include <vector>

#include "core/ledger.h"
#include "core/shapes.h"
#include "costmodel/collectives.h"
#include "costmodel/layer_cost.h"

namespace ptdp::costmodel {

// Optimizer step, memory-bound over the stage's parameters. Megatron-LM's mixed-precision
// optimizer per parameter, with e = ComputeBytes(c.precision): copy the 16-bit gradient into the
// fp32 main gradient (read e, write 4), unscale and check for inf/nan (read 4, write 4), gradient
// norm (read 4), fused Adam (read weight, gradient, m, v: 16; write weight, m, v: 12), copy the
// fp32 weight to the 16-bit model weight (read 4, write e): 52 bytes in 16 bits. fp32 training:
// gradient norm 4 + Adam 28 = 32 bytes. A fused step (SoftwareProfile::fused_optimizer_step, ptdp's
// runtime) reads the fp32 main gradient for the norm (4) and in Adam, which also writes the 16-bit
// copy (28 + e): 34 bytes in 16 bits, the same 32 in fp32. Main gradients taken in place
// (optimizer_main_grads_in_place, Megatron-Core): no gradient copy, and no unscale pass but in
// fp16, whose loss scaler stays: 4 + 28 + (4 + e), 38 bytes in bf16 and fp8, 46 in fp16. A
// 16-bit gradient buffer (grad_reduce_bf16, or fp16 without fusion) is not the fp32 main gradient:
// Megatron-Core's distributed optimizer casts its shard first (_copy_model_grads_to_main_grads,
// `shard_model_grad.float()`, a copy unless the buffer is fp32): read e, write 4 more.
// 16-bit optimizer state (ParallelConfig::optimizer_state_bf16): Adam and the copy to the model
// weight become one kernel (Transformer Engine's FusedAdam) that reads the bf16 weight, the
// master's 16-bit remainder, the fp32 gradient and the bf16 m and v (2 + 2 + 4 + 2 + 2) and writes
// all but the gradient (8): 20 bytes in place of Adam's 28 and the copy's 4 + e. (Apex's bf16
// state moves the same 20: Adam over a bf16 master, then the copy to the weight.)
double OptimizerBytesPerParam(const ParallelConfig& c, const SoftwareProfile& sw) {
  const Precision p = c.precision;
  const double e = ComputeBytes(p);
  if (!IsHalf(p)) return 4 + 28;
  const double adam_and_copy = c.optimizer_state_bf16 ? 20 : 28 + (4 + e);
  if (sw.fused_optimizer_step.value) return 4 + (c.optimizer_state_bf16 ? 20 : 28 + e);
  if (sw.optimizer_main_grads_in_place.value) {
    const double cast = Fp32MainGrads(c) ? 0.0 : e + 4;
    return cast + 4 + adam_and_copy + (p == Precision::kFp16 ? 8 : 0);
  }
  return (e + 4) + 8 + 4 + adam_and_copy;
}
Seconds OptimizerTime(const HardwareProfile& hw, const ParallelConfig& c, int64_t params,
                      const SoftwareProfile& sw) {
  return hw.DeviceCopies() * double(params) * OptimizerBytesPerParam(c, sw) /
         GBpsToBytesPerSecond(hw.memory_bound_GBps.value);
}
// The step as priced: by its parameters at the profile's measured rate of the whole step where it
// has one (optimizer_Gparams_per_s: a CPU, whose AdamW its square root and division bound, not its
// bytes), else by its bytes (OptimizerTime).
Seconds OptimizerStepTime(const HardwareProfile& hw, const ParallelConfig& c, int64_t params,
                          const SoftwareProfile& sw) {
  const double rate = hw.optimizer_Gparams_per_s.value;
  return rate > 0 ? hw.DeviceCopies() * double(params) / (rate * 1e9)
                  : OptimizerTime(hw, c, params, sw);
}

// The data-parallel wrapper's gradient copies around the reduction (the software profile's
// ddp_grad_copy_bytes_per_param; 2021 local DDP: flatten, divide, copy back), on the compute
// stream after the flush, one launch per parameter tensor. None with gradient-accumulation
// fusion, whose contiguous main-gradient buffer is reduced in place.
Seconds DataParallelCopyTime(const ClusterSpec& cluster, const ModelSpec& m,
                             const ParallelConfig& c, int rank, int64_t params) {
  const double bytes = cluster.software.ddp_grad_copy_bytes_per_param.value;
  if (c.grad_accumulation_fusion || bytes <= 0) return 0;
  const int layers = RankLayerCount(m, c, rank), dense = RankDenseLayers(m, c, rank);
  // One launch per tensor: the layers' plus the embedding's or the head's.
  const int dense_tensors = dense > 0 ? LayerParameterCounts(DenseLayerModel(m), c).tensors : 0;
  const int kernels =
      int(layers - dense) * LayerParameterCounts(m, c).tensors + dense * dense_tensors + 2;
  return MemoryBoundTime(cluster.profile, double(params) * bytes, kernels);
}

// The data-parallel wrapper's own passes over the rank's whole gradient buffer, once per iteration
// (the software profile's grad_buffer_passes: Megatron-Core zeroes the buffer and takes its norm
// to check for NaN; grad_scale_passes where d > 1: it scales the buffer by 1/d, read and write,
// before the reduction), each over `params` elements of the gradient's type. The norm and the
// scaling run bucket by bucket in the backward, on the compute stream; charged with the step, as
// the iteration's total is the same. One launch per pass (per bucket in fact; launches are small
// against these bytes).
Seconds GradBufferPassTime(const SoftwareProfile& sw, const HardwareProfile& hw,
                           const ParallelConfig& c, int64_t params) {
  const double passes =
      sw.grad_buffer_passes.value + (c.WeightReplicas() > 1 ? sw.grad_scale_passes.value : 0.0);
  if (passes <= 0) return 0;
  const double bytes = double(params) * BytesPerParameter(c).grad * passes;
  return MemoryBoundTime(hw, bytes, int(std::ceil(passes)));
}

// The optimizer step's one-float all-reduces over the model-parallel group (every tensor and
// pipeline rank of one data-parallel replica), each read back by the host (the software profile's
// optimizer_small_allreduces): the collective's time plus a launch gap after the host sync.
Seconds OptimizerSmallAllReducesTime(const SoftwareProfile& sw, const HardwareProfile& hw,
                                     const RankGrid& grid, const ParallelConfig& c, int G) {
  const double count = sw.optimizer_small_allreduces.value;
  if (count <= 0 || c.tp * c.pp == 1) return count * hw.kernel_launch_us.value * kUs;
  std::vector<int> group;
  for (int r = 0; r < c.pp; ++r) {
    const std::vector<int> tensor = grid.TensorGroup(grid.Rank({0, 0, r}));
    group.insert(group.end(), tensor.begin(), tensor.end());
  }
  const Seconds one = CollectiveTime(hw, Collective::kAllReduce, 4, SpanOf(group, G), G);
  return count * (one + hw.kernel_launch_us.value * kUs);
}

}  // namespace ptdp::costmodel
