// runtime/backend/cuda_backend.h: --backend cuda's device.
#include "runtime/backend/cuda_backend.h"

#include <mpi.h>

#include <algorithm>

#include "runtime/comm/world.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/group.h"
#include "runtime/cuda/nccl_communicator.h"
#include "runtime/cuda/staged_mpi_communicator.h"

namespace ptdp::runtime {

Result<std::unique_ptr<Device>> CreateCudaBackendDevice() {
  const int gpus = cuda::CudaDeviceCount();
  if (gpus == 0) return Status::NotFound("--backend cuda: no CUDA device is visible");
  int initialised = 0;
  MPI_Initialized(&initialised);
  int local = 0;
  if (initialised) {
    PTDP_ASSIGN_OR_RETURN(local, cuda::LocalRankOnNode());
  }
  PTDP_ASSIGN_OR_RETURN(auto dev, cuda::CudaDevice::Create(local % gpus));
  return std::unique_ptr<Device>(std::move(dev));
}

namespace {

// Whether any node runs more ranks than it has GPUs (the same answer on every rank).
Result<bool> RanksShareGpus() {
  MPI_Comm local;
  PTDP_MPI_RETURN(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
  int on_node = 0;
  const int rc = MPI_Comm_size(local, &on_node);
  MPI_Comm_free(&local);
  PTDP_MPI_RETURN(rc);
  int mine = on_node > cuda::CudaDeviceCount() ? 1 : 0, any = 0;
  PTDP_MPI_RETURN(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  return any != 0;
}

}  // namespace

Result<std::unique_ptr<Communicator>> CudaSplitComm(Communicator& world,
                                                    const std::vector<std::vector<int>>& groups,
                                                    Device* dev) {
  auto* gpu = dynamic_cast<cuda::CudaDevice*>(dev);
  if (gpu == nullptr) return Status::Internal("CudaSplitComm: the device is not a CudaDevice");
  // A group of one needs no transfers: the self communicator (never MPI's, whose 16-bit
  // reductions run on the host and would read device memory there).
  const int me = world.members()[static_cast<size_t>(world.rank())];
  const std::vector<int>* mine = nullptr;
  for (const auto& g : groups) {
    if (std::find(g.begin(), g.end(), me) != g.end()) mine = &g;
  }
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised || world.size() == 1) {
    if (mine == nullptr) return std::unique_ptr<Communicator>();
    return SelfComm(me);
  }
  PTDP_ASSIGN_OR_RETURN(const bool shared, RanksShareGpus());
  if (shared) {
    PTDP_ASSIGN_OR_RETURN(auto host, SplitComm(world, groups));  // collective: every rank calls
    if (host == nullptr) return std::unique_ptr<Communicator>();
    if (host->size() == 1) return SelfComm(me);
    auto staged = std::make_unique<cuda::StagedMpiCommunicator>(std::move(host));
    staged->set_compute_stream(gpu->stream());
    return std::unique_ptr<Communicator>(std::move(staged));
  }
  if (mine == nullptr) return std::unique_ptr<Communicator>();
  if (mine->size() == 1) return SelfComm(me);
  // NCCL's bootstrap is collective over the group's members only.
  PTDP_ASSIGN_OR_RETURN(auto nccl, cuda::NcclCommunicator::Create(*mine));
  nccl->set_compute_stream(gpu->stream());
  return std::unique_ptr<Communicator>(std::move(nccl));
}

}  // namespace ptdp::runtime
