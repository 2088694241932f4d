// `ptdp train`'s checks of how it was launched (docs/launch.md): the rank and world size come from
// MPI (under srun through PMIx), and Slurm's own numbering must agree with them; the hosts the
// ranks run on must keep each tensor group inside one node where the plan does.
#pragma once

#include <string>

#include "core/plan_file.h"
#include "core/status.h"
#include "runtime/comm/communicator.h"

namespace ptdp::tools {

// This rank alone: when srun started the process directly (SLURM_STEP_ID set, no mpirun
// variables), SLURM_PROCID and SLURM_STEP_NUM_TASKS must equal MPI's rank and size; a world of one
// under a step of many tasks means MPI never reached srun's process manager (srun --mpi=pmix).
Status CheckSlurmNumbering(int mpi_rank, int mpi_size);

// Collective over `world`, agreed: gathers each rank's host (gethostname, or entry `rank` of the
// comma-separated `fake_hosts`, a test-only override), checks each rank's local rank on its host
// against the launcher's (SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK), and refuses a tensor group
// split over hosts that the plan keeps inside one node (core/placement.h). `summary` receives "vm:
// 4" etc.
Status CheckRankPlacement(runtime::Communicator& world, const PlanFile& plan,
                          const std::string& fake_hosts, std::string* summary);

}  // namespace ptdp::tools
