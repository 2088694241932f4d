// The step after an iteration's flush, on one GPU: the optimizer's passes over its parameters and
// the data-parallel wrapper's own passes around the gradient reduction (the reduction itself is
// costmodel/estimate.cc's). Split from estimate.cc, which prices them per pipeline rank.
#pragma once

#include <cstdint>

#include "core/hardware.h"
#include "core/model.h"
#include "core/parallel.h"
#include "core/rank_grid.h"
#include "core/software.h"
#include "core/units.h"

namespace ptdp::costmodel {

// Bytes the optimizer step moves per parameter it updates (the sources are in step_cost.cc): by
// the layout's precision, gradient buffer (Fp32MainGrads) and optimizer_state_bf16.
double OptimizerBytesPerParam(const ParallelConfig& c, const SoftwareProfile& sw);
// The step over `params` at memory_bound_GBps.
Seconds OptimizerTime(const HardwareProfile& hw, const ParallelConfig& c, int64_t params,
                      const SoftwareProfile& sw);
// The step as priced: at the profile's measured optimizer rate where it has one, else by bytes.
Seconds OptimizerStepTime(const HardwareProfile& hw, const ParallelConfig& c, int64_t params,
                          const SoftwareProfile& sw);
// The data-parallel wrapper's gradient copies around the reduction (ddp_grad_copy_bytes_per_param).
Seconds DataParallelCopyTime(const ClusterSpec& cluster, const ModelSpec& m,
                             const ParallelConfig& c, int rank, int64_t params);
// The wrapper's passes over the rank's whole gradient buffer (grad_buffer_passes,
// grad_scale_passes).
Seconds GradBufferPassTime(const SoftwareProfile& sw, const HardwareProfile& hw,
                           const ParallelConfig& c, int64_t params);
// The step's one-float all-reduces over the model-parallel group (optimizer_small_allreduces).
Seconds OptimizerSmallAllReducesTime(const SoftwareProfile& sw, const HardwareProfile& hw,
                                     const RankGrid& grid, const ParallelConfig& c, int G);

}  // namespace ptdp::costmodel
