// The process-wide communication runtime: start/stop (MPI_Init/Finalize when built with MPI), the
// world communicator, and splitting it into the groups RankGrid derives (tensor, data, pipeline,
// embedding). Without MPI (PTDP_WITH_MPI=OFF) the world is this one process.
// No MPI type appears here, so tools/ may include it.
#pragma once

#include <memory>
#include <vector>

#include "core/status.h"
#include "runtime/comm/communicator.h"

namespace ptdp::runtime {

// Starts the communication runtime (idempotent). Errors are returned, never fatal.
Status InitComm(int* argc, char*** argv);
// Stops it (idempotent; a no-op if never started).
void FinalizeComm();
// Whether this build has a multi-process backend (MPI).
bool HaveMultiProcessComm();
// The communicator over every process, in world rank order. REQUIRES: InitComm succeeded.
Result<std::unique_ptr<Communicator>> WorldComm();
// Collective over `world`: every process passes the same partition `groups` (lists of world ranks,
// each member's group index = its position). Returns the communicator of the group holding the
// calling rank, or nullptr when no group holds it.
Result<std::unique_ptr<Communicator>> SplitComm(Communicator& world,
                                                const std::vector<std::vector<int>>& groups);
// A communicator over just this process (size 1); collectives are copies.
std::unique_ptr<Communicator> SelfComm(int world_rank);

}  // namespace ptdp::runtime
