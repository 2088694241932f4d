#include "tools/train_placement.h"

#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <vector>

#include "core/placement.h"
#include "core/rank_grid.h"
#include "runtime/comm/agree.h"

namespace ptdp::tools {
namespace {

// An integer environment variable, or -1 when unset or not a number.
int EnvInt(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return *end == '\0' && x >= 0 && x < (1L << 30) ? int(x) : -1;
}

Result<std::string> ThisHost(int rank, const std::string& fake_hosts) {
  if (!fake_hosts.empty()) {
    std::vector<std::string> names;
    std::stringstream in(fake_hosts);
    for (std::string h; std::getline(in, h, ',');) names.push_back(h);
    if (size_t(rank) >= names.size()) {
      return Status::Invalid("--fake-hosts: " + std::to_string(names.size()) +
                             " names, none for rank " + std::to_string(rank));
    }
    return names[size_t(rank)];
  }
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return Status::IoError("gethostname failed");
  return std::string(name);
}

// This rank's index among the ranks on its host: the local rank that picks its GPU (the CUDA
// backend's MPI shared-memory split gives the same). The launcher's own figure (SLURM_LOCALID under
// srun, OMPI_COMM_WORLD_LOCAL_RANK under mpirun) must agree, or GPUs would be bound twice.
Status CheckLocalRank(int rank, const std::vector<std::string>& hosts) {
  int local = 0;
  for (int r = 0; r < rank; ++r) local += hosts[size_t(r)] == hosts[size_t(rank)] ? 1 : 0;
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK") != nullptr;
  const char* name = under_mpirun ? "OMPI_COMM_WORLD_LOCAL_RANK" : "SLURM_LOCALID";
  if (!under_mpirun && std::getenv("SLURM_STEP_ID") == nullptr) return Status::Ok();
  const int launcher = EnvInt(name);
  if (launcher < 0 || launcher == local) return Status::Ok();
  return Status::Invalid("launch: rank " + std::to_string(rank) + " is local rank " +
                         std::to_string(local) + " on " + hosts[size_t(rank)] + " but " + name +
                         " says " + std::to_string(launcher));
}

}  // namespace

Status CheckSlurmNumbering(int mpi_rank, int mpi_size) {
  // Under mpirun (even inside a Slurm allocation) the SLURM_* variables describe mpirun's own
  // daemons, not the ranks: MPI alone numbers them.
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
      std::getenv("SLURM_STEP_ID") == nullptr) {
    return Status::Ok();
  }
  const int procid = EnvInt("SLURM_PROCID");
  int ntasks = EnvInt("SLURM_STEP_NUM_TASKS");
  if (ntasks < 0) ntasks = EnvInt("SLURM_NTASKS");
  if (procid < 0 || ntasks < 0) return Status::Ok();
  if (mpi_size == 1 && ntasks > 1) {
    return Status::Invalid("launch: srun started " + std::to_string(ntasks) +
                           " tasks but MPI sees a world of 1 (task " + std::to_string(procid) +
                           "): MPI did not reach srun's process manager; run srun --mpi=pmix");
  }
  if (procid != mpi_rank || ntasks != mpi_size) {
    return Status::Invalid("launch: SLURM_PROCID " + std::to_string(procid) + " of " +
                           std::to_string(ntasks) + " tasks differs from MPI's rank " +
                           std::to_string(mpi_rank) + " of " + std::to_string(mpi_size));
  }
  return Status::Ok();
}

Status CheckRankPlacement(runtime::Communicator& world, const PlanFile& plan,
                          const std::string& fake_hosts, std::string* summary) {
  Result<std::string> host = ThisHost(world.rank(), fake_hosts);
  PTDP_RETURN_IF_ERROR(runtime::AgreeStatus(world, host.status()));
  PTDP_ASSIGN_OR_RETURN(std::vector<std::string> hosts, runtime::AllGatherStrings(world, *host));
  *summary = DescribeHosts(hosts);
  // Fake hosts describe another machine than the one the launcher numbered.
  if (fake_hosts.empty()) {
    PTDP_RETURN_IF_ERROR(runtime::AgreeStatus(world, CheckLocalRank(world.rank(), hosts)));
  }
  const ParallelConfig& c = plan.layout;
  Status st = Status::Ok();
  // A world of another size is the trainer's to refuse (it names the plan's rank count).
  if (c.WorldSize() == world.size()) {
    auto grid = RankGrid::Create(c.tp, c.WeightReplicas(), c.pp);  // the runtime's (tp-cp-dp-pp)
    st = grid.ok() ? CheckTensorGroupsOnOneHost(*grid, plan.cluster.gpus_per_node, hosts)
                   : grid.status();
  }
  return runtime::AgreeStatus(world, st);  // every rank computed the same verdict
}

}  // namespace ptdp::tools
