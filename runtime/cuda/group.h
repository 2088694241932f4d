// MPI sub-communicators from lists of world ranks, shared by the NCCL and the staged-MPI
// communicators. Only runtime/cuda sources include this header.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "core/status.h"

namespace ptdp::runtime::cuda {

// Owns an MPI communicator (frees it unless MPI is already finalised).
class MpiGroup {
 public:
  MpiGroup() = default;
  MpiGroup(const MpiGroup&) = delete;
  MpiGroup& operator=(const MpiGroup&) = delete;
  ~MpiGroup();

  // Collective over the processes named in `world_ranks` only (MPI_Comm_create_group): each of
  // them calls with the same list; group rank i is world_ranks[i]. Fails with kInvalidArgument
  // when the list is empty, has duplicates or out-of-range ranks, or does not hold the caller;
  // with kInternal when MPI is not initialised.
  static Result<std::unique_ptr<MpiGroup>> Create(const std::vector<int>& world_ranks);

  MPI_Comm comm() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }
  const std::vector<int>& members() const { return members_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = -1;
  std::vector<int> members_;
};

// This process's index among the world ranks on its node (MPI_COMM_TYPE_SHARED), to pick its GPU;
// 0 when MPI is not initialised.
Result<int> LocalRankOnNode();

}  // namespace ptdp::runtime::cuda
