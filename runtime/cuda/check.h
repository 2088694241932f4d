// Checked calls into CUDA, cuBLAS, NCCL and MPI: every failure becomes a Status whose message names
// the file, the line, the calling rank and the library's own error string, e.g.
//   "runtime/cuda/nccl_communicator.cc:88: rank 3: ncclAllReduce(...) failed: unhandled cuda error
//    (NCCL: Cuda failure 'out of memory')".
// Only runtime/cuda sources include this header (it pulls in CUDA, NCCL and MPI headers).
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <string>

#include "core/status.h"

namespace ptdp::runtime::cuda {

// World rank of this process for error messages, or -1 when MPI is not initialised.
int WorldRankForMessages();

Status CudaError(cudaError_t err, const char* expr, const char* file, int line);
Status NcclError(ncclResult_t res, const char* expr, const char* file, int line);
Status MpiError(int rc, const char* expr, const char* file, int line);

}  // namespace ptdp::runtime::cuda

// Each macro returns the Status from the enclosing function when the call fails. cudaErrorMemory-
// Allocation becomes kDoesNotFit; every other failure kInternal.
#define PTDP_CUDA_RETURN(expr)                                                       \
  do {                                                                               \
    const cudaError_t _ptdp_err = (expr);                                            \
    if (_ptdp_err != cudaSuccess)                                                    \
      return ::ptdp::runtime::cuda::CudaError(_ptdp_err, #expr, __FILE__, __LINE__); \
  } while (0)
#define PTDP_NCCL_RETURN(expr)                                                       \
  do {                                                                               \
    const ncclResult_t _ptdp_res = (expr);                                           \
    if (_ptdp_res != ncclSuccess)                                                    \
      return ::ptdp::runtime::cuda::NcclError(_ptdp_res, #expr, __FILE__, __LINE__); \
  } while (0)
#define PTDP_MPI_RETURN(expr)                                                      \
  do {                                                                             \
    const int _ptdp_rc = (expr);                                                   \
    if (_ptdp_rc != MPI_SUCCESS)                                                   \
      return ::ptdp::runtime::cuda::MpiError(_ptdp_rc, #expr, __FILE__, __LINE__); \
  } while (0)
