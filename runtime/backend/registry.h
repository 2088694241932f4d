// The backend registry: the one place a backend is chosen by name (`ptdp train --backend`).
//   "cpu"        CpuDevice + CpuOps (kernels/reference, Eigen)
//   "cpu-guard"  the CPU backend on pages that fault on host access outside Ops and communicator
//                calls (tests: proves the step touches no tensor on the host)
//   "cuda"  not available yet: the CUDA Ops are the next piece of work (runtime/cuda has the
//           device, kernels and communicators; nothing dispatches to them yet)
#pragma once

#include <memory>
#include <string>

#include "core/precision.h"
#include "core/status.h"
#include "runtime/backend/device.h"

namespace ptdp::runtime {

// kInvalidArgument naming --backend for an unknown or unavailable backend.
Result<std::unique_ptr<Device>> CreateDevice(const std::string& backend);
// The dtype of activations, messages and the weights' compute copy under a precision.
DType ComputeDType(Precision p);

}  // namespace ptdp::runtime
