#include "runtime/cuda/check.h"

namespace ptdp::runtime::cuda {
namespace {

std::string Where(const char* expr, const char* file, int line) {
  return std::string(file) + ":" + std::to_string(line) + ": rank " +
         std::to_string(WorldRankForMessages()) + ": " + expr + " failed: ";
}

}  // namespace

int WorldRankForMessages() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return -1;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

Status CudaError(cudaError_t err, const char* expr, const char* file, int line) {
  const std::string msg =
      Where(expr, file, line) + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  // Clear a non-sticky error so that the next call does not report it again.
  (void)cudaGetLastError();
  if (err == cudaErrorMemoryAllocation) return Status::DoesNotFit(msg);
  return Status::Internal(msg);
}

Status NcclError(ncclResult_t res, const char* expr, const char* file, int line) {
  std::string msg = Where(expr, file, line) + ncclGetErrorString(res);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') msg += std::string(" (NCCL: ") + last + ")";
  if (res == ncclInvalidArgument || res == ncclInvalidUsage) return Status::Invalid(msg);
  return Status::Internal(msg);
}

Status MpiError(int rc, const char* expr, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  return Status::Internal(Where(expr, file, line) + std::string(text, static_cast<size_t>(len)));
}

}  // namespace ptdp::runtime::cuda
