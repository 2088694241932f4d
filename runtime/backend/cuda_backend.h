// The seam between the runtime and its CUDA backend: a factory declared here without CUDA headers
// and defined in runtime/cuda (cuda_backend.cc), linked only when the build has CUDA (and MPI:
// PTDP_HAVE_CUDA_BACKEND). runtime/ includes no runtime/cuda header; the registry calls this.
#pragma once

#include <memory>
#include <vector>

#include "core/status.h"
#include "runtime/backend/device.h"
#include "runtime/comm/communicator.h"

namespace ptdp::runtime {

// A CudaDevice with its CudaOps on the GPU of this rank: local rank on the node (MPI, when
// initialised; 0 otherwise) modulo the visible GPUs, so ranks share GPUs when there are more ranks
// than GPUs. kNotFound when no GPU is visible.
Result<std::unique_ptr<Device>> CreateCudaBackendDevice();

// SplitComm (runtime/comm/world.h) for device buffers of `dev` (made by CreateCudaBackendDevice):
// NCCL when every rank of every node has a GPU of its own, the staged MPI communicator when ranks
// share GPUs (more ranks on a node than GPUs; every rank learns the same answer from an
// all-reduce). The communicator is ordered against the device's compute stream. Collective over
// `world`, every rank passing the same groups in the same order; nullptr when no group holds this
// rank.
Result<std::unique_ptr<Communicator>> CudaSplitComm(Communicator& world,
                                                    const std::vector<std::vector<int>>& groups,
                                                    Device* dev);

}  // namespace ptdp::runtime
