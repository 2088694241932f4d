// Communicator: the collectives and point-to-point operations the runtime needs, over one group of
// ranks. Implementations: MPI (runtime/comm/mpi), NCCL (runtime/cuda/nccl_communicator.h). Buffers
// are host pointers for the CPU backend and device pointers for the CUDA backend. Thread-safety:
// one thread uses a communicator at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace ptdp::runtime {

// A pending non-blocking operation.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual Status Wait() = 0;
  // Whether the operation has completed (non-blocking); a completed request still needs no Wait.
  // The default never reports completion, so callers fall back to Wait().
  virtual Result<bool> Test() { return false; }
};

// A request that completed when it was made (the default AllReduceSumAsync's).
class CompletedRequest final : public CommRequest {
 public:
  Status Wait() override { return Status::Ok(); }
  Result<bool> Test() override { return true; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;  // rank within this group
  virtual int size() const = 0;
  // Global (world) ranks of the group's members, in group order.
  virtual const std::vector<int>& members() const = 0;

  virtual Status AllReduceSum(void* data, int64_t count, DType dtype) = 0;
  virtual Status AllReduceMax(void* data, int64_t count, DType dtype) = 0;
  // Starts an in-place sum and returns its request; `data` must stay untouched until the request
  // completes (Wait, or Test true). Every member must start the group's collectives in the same
  // order. The default runs the blocking AllReduceSum and returns a completed request, so every
  // communicator has one (the staged MPI path keeps it); MPI overrides it with MPI_Iallreduce
  // (which progresses only inside MPI calls: the caller Tests it now and then), NCCL with an
  // all-reduce on its own stream.
  virtual Result<std::unique_ptr<CommRequest>> AllReduceSumAsync(void* data, int64_t count,
                                                                 DType dtype) {
    PTDP_RETURN_IF_ERROR(AllReduceSum(data, count, dtype));
    return std::unique_ptr<CommRequest>(std::make_unique<CompletedRequest>());
  }
  // Starts a sum of every member's `data` into root's `data` (in place there; the others' `data`
  // is left as it was) and returns its request, under AllReduceSumAsync's rules. The default runs
  // AllReduceSumAsync, whose result at the root is the same (every member gets it, at twice the
  // traffic); MPI overrides it with MPI_Ireduce, NCCL with a reduce on its own stream.
  virtual Result<std::unique_ptr<CommRequest>> ReduceSumAsync(void* data, int64_t count,
                                                              DType dtype, int /*root*/) {
    return AllReduceSumAsync(data, count, dtype);
  }
  // recv holds size() * count elements, rank i's contribution at i * count; in place when send is
  // recv + rank() * count.
  virtual Status AllGather(const void* send, void* recv, int64_t count, DType dtype) = 0;
  // send holds size() * count elements; recv gets this rank's reduced block of count elements.
  // In place when recv is send + rank() * count (the other blocks are then left undefined).
  virtual Status ReduceScatterSum(const void* send, void* recv, int64_t count, DType dtype) = 0;
  virtual Status Broadcast(void* data, int64_t count, DType dtype, int root) = 0;
  // Starts Broadcast under AllReduceSumAsync's rules. The default runs the blocking Broadcast and
  // returns a completed request; MPI overrides it with MPI_Ibcast, NCCL with a broadcast on its
  // own stream.
  virtual Result<std::unique_ptr<CommRequest>> BroadcastAsync(void* data, int64_t count,
                                                              DType dtype, int root) {
    PTDP_RETURN_IF_ERROR(Broadcast(data, count, dtype, root));
    return std::unique_ptr<CommRequest>(std::make_unique<CompletedRequest>());
  }
  virtual Status Barrier() = 0;
  // Point-to-point with a peer given as its rank within this group; `tag` tells messages apart.
  virtual Result<std::unique_ptr<CommRequest>> ISend(const void* data, int64_t count, DType dtype,
                                                     int peer, int tag) = 0;
  virtual Status Recv(void* data, int64_t count, DType dtype, int peer, int tag) = 0;
  // Blocks until a message from `peer` with `tag` can be received, so that the caller can time its
  // wait for the sender apart from the transfer (the Recv that follows; the trace's wait_ns).
  // Returns false at once where the communicator cannot tell (NCCL, whose receive is one device
  // operation; the staged MPI path): then the Recv's time includes the wait.
  virtual Result<bool> WaitForMessage(int /*peer*/, int /*tag*/) { return false; }
};

}  // namespace ptdp::runtime
