#include "runtime/cuda/group.h"

#include <memory>
#include <set>
#include <string>

#include "runtime/cuda/check.h"

namespace ptdp::runtime::cuda {

MpiGroup::~MpiGroup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

Result<std::unique_ptr<MpiGroup>> MpiGroup::Create(const std::vector<int>& world_ranks) {
  int initialized = 0;
  PTDP_MPI_RETURN(MPI_Initialized(&initialized));
  if (!initialized)
    return Status::Internal("MPI group: MPI is not initialised (call InitComm first)");
  int world_rank = 0;
  int world_size = 0;
  PTDP_MPI_RETURN(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  PTDP_MPI_RETURN(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  if (world_ranks.empty()) return Status::Invalid("MPI group: the list of world ranks is empty");
  std::set<int> seen;
  int my_index = -1;
  for (size_t i = 0; i < world_ranks.size(); ++i) {
    const int r = world_ranks[i];
    if (r < 0 || r >= world_size) {
      return Status::Invalid("MPI group: world rank " + std::to_string(r) + " is outside [0, " +
                             std::to_string(world_size) + ")");
    }
    if (!seen.insert(r).second) {
      return Status::Invalid("MPI group: world rank " + std::to_string(r) + " is listed twice");
    }
    if (r == world_rank) my_index = static_cast<int>(i);
  }
  if (my_index < 0) {
    return Status::Invalid("MPI group: world rank " + std::to_string(world_rank) +
                           " is not in the group it tries to create");
  }
  auto group = std::make_unique<MpiGroup>();
  MPI_Group world_group;
  MPI_Group sub_group;
  PTDP_MPI_RETURN(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
  PTDP_MPI_RETURN(MPI_Group_incl(world_group, static_cast<int>(world_ranks.size()),
                                 world_ranks.data(), &sub_group));
  const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, sub_group, /*tag=*/0, &group->comm_);
  MPI_Group_free(&sub_group);
  MPI_Group_free(&world_group);
  PTDP_MPI_RETURN(rc);
  PTDP_MPI_RETURN(MPI_Comm_rank(group->comm_, &group->rank_));
  if (group->rank_ != my_index) {
    return Status::Internal("MPI group: rank order differs from the list of world ranks");
  }
  group->members_ = world_ranks;
  return group;
}

Result<int> LocalRankOnNode() {
  int initialized = 0;
  PTDP_MPI_RETURN(MPI_Initialized(&initialized));
  if (!initialized) return 0;
  MPI_Comm local;
  PTDP_MPI_RETURN(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
  int rank = 0;
  const int rc = MPI_Comm_rank(local, &rank);
  MPI_Comm_free(&local);
  PTDP_MPI_RETURN(rc);
  return rank;
}

}  // namespace ptdp::runtime::cuda
