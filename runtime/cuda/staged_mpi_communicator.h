// StagedMpiCommunicator: a Communicator for DEVICE buffers that copies them through pinned host
// memory and runs the operation on a host Communicator (the runtime's MPI communicator). It exists
// so that several ranks can share one GPU, which NCCL refuses: a t = 2, p = 2 layout runs as four
// processes on one card and can be checked against one process.
//
// Semantics: every call is synchronous with respect to the host and to the compute stream
// (set_compute_stream): it waits for the work queued on the compute stream, copies the inputs to
// the host, runs the host operation and copies the outputs back before returning. ISend copies its
// data out before returning, so the device buffer may be reused at once; its request's Wait()
// waits for the host send. 16-bit reductions are done in fp32 on the host (each rank's values are
// widened, summed or maxed in fp32 and rounded once), so they are at least as accurate as NCCL's.
//
// Thread-safety: one thread uses a communicator at a time. Requests must not outlive it.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/cuda/pinned_pool.h"

namespace ptdp::runtime::cuda {

class StagedMpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `host`, a communicator over host buffers (MPI) for the same group.
  explicit StagedMpiCommunicator(std::unique_ptr<Communicator> host);
  ~StagedMpiCommunicator() override;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::vector<int>& members() const override { return host_->members(); }

  Status AllReduceSum(void* data, int64_t count, DType dtype) override;
  Status AllReduceMax(void* data, int64_t count, DType dtype) override;
  Status AllGather(const void* send, void* recv, int64_t count, DType dtype) override;
  Status ReduceScatterSum(const void* send, void* recv, int64_t count, DType dtype) override;
  Status Broadcast(void* data, int64_t count, DType dtype, int root) override;
  Status Barrier() override;
  Result<std::unique_ptr<CommRequest>> ISend(const void* data, int64_t count, DType dtype, int peer,
                                             int tag) override;
  Status Recv(void* data, int64_t count, DType dtype, int peer, int tag) override;

  void set_compute_stream(cudaStream_t s) { compute_stream_ = s; }
  Bytes pinned_bytes() const { return pool_.reserved_bytes(); }

 private:
  class Request;
  enum class ReduceOp { kSum, kMax };
  Status AllReduce(void* data, int64_t count, DType dtype, ReduceOp op);
  // Device -> host (pinned) and back, ordered after the compute stream's work; both block.
  Status ToHost(void* host, const void* device, Bytes bytes);
  Status ToDevice(void* device, const void* host, Bytes bytes);

  std::unique_ptr<Communicator> host_;
  cudaStream_t compute_stream_ = nullptr;
  PinnedPool pool_;
};

// Widening and narrowing of 16-bit values on the host (round to nearest even), exposed for tests.
void WidenToFp32(float* out, const void* in, int64_t count, DType dtype);
void NarrowFromFp32(void* out, const float* in, int64_t count, DType dtype);

}  // namespace ptdp::runtime::cuda
