// NcclCommunicator: the Communicator over NCCL for device buffers, one GPU per process.
//
// Bootstrap: the group's members are given as world ranks; an MPI sub-communicator is created over
// them (MpiGroup), group rank 0 makes the ncclUniqueId and broadcasts it with MPI, then every
// member calls ncclCommInitRank on the CUDA device that is current when Create is called.
//
// Streams and ordering. NCCL work runs on the communicator's own stream, so that communication can
// overlap the compute stream. Every call is stream-ordered with respect to the compute stream
// (set_compute_stream; default the legacy default stream): the comm stream first waits for the
// work already queued on the compute stream (the inputs are ready), then the compute stream waits
// for the collective's end (its outputs are ready). The host does not block, except in Barrier()
// and Synchronize(). For overlap, the *Async collectives return a request and do not make the
// compute stream wait until the request's Wait(); the caller keeps the buffer untouched until then.
//
// Point-to-point. NCCL has no tags and a lone ncclSend blocks its stream until the peer posts the
// matching receive, so two ranks that each send to the other and then receive would deadlock if
// both directions shared one stream (1F1B: stage i sends activations up while stage i+1 sends
// gradients down). Each direction therefore has its own NCCL communicator and stream: messages
// to a higher group rank travel on `comm_` (comm_stream_, shared with the collectives), messages to
// a lower group rank on `down_comm_` (down_stream_). A send is issued when ISend is called (the
// Program's send instruction), never deferred to a later receive: the review (cuda-runtime-
// review.md 5 (i)) measured deferral costing GPipe 54 vs 33 time units. Within one direction the
// operations of a pair of ranks are matched in issue order, which the Program's validator proves
// equal on both sides; `tag` is checked only for being >= 0.
//
// Thread-safety: one thread uses a communicator at a time. Requests must not outlive it.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/cuda/group.h"

namespace ptdp::runtime::cuda {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over the processes in `world_ranks` (each passes the same list). Errors name the
  // file, line, rank and NCCL's message; NCCL refuses two ranks on one GPU ("Duplicate GPU"): use
  // StagedMpiCommunicator for that.
  static Result<std::unique_ptr<NcclCommunicator>> Create(const std::vector<int>& world_ranks);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  const std::vector<int>& members() const override { return group_->members(); }

  Status AllReduceSum(void* data, int64_t count, DType dtype) override;
  Status AllReduceMax(void* data, int64_t count, DType dtype) override;
  Status AllGather(const void* send, void* recv, int64_t count, DType dtype) override;
  Status ReduceScatterSum(const void* send, void* recv, int64_t count, DType dtype) override;
  Status Broadcast(void* data, int64_t count, DType dtype, int root) override;
  // Issues queued sends, waits on the host for the comm stream, then MPI_Barrier over the group.
  Status Barrier() override;
  Result<std::unique_ptr<CommRequest>> ISend(const void* data, int64_t count, DType dtype, int peer,
                                             int tag) override;
  Status Recv(void* data, int64_t count, DType dtype, int peer, int tag) override;

  // Overlappable collectives: the compute stream waits only at the request's Wait().
  Result<std::unique_ptr<CommRequest>> AllReduceSumAsync(void* data, int64_t count,
                                                         DType dtype) override;
  Result<std::unique_ptr<CommRequest>> ReduceSumAsync(void* data, int64_t count, DType dtype,
                                                      int root) override;
  Result<std::unique_ptr<CommRequest>> BroadcastAsync(void* data, int64_t count, DType dtype,
                                                      int root) override;
  Result<std::unique_ptr<CommRequest>> ReduceScatterSumAsync(const void* send, void* recv,
                                                             int64_t count, DType dtype);

  // Host waits until every operation issued so far has finished.
  Status Synchronize();

  void set_compute_stream(cudaStream_t s) { compute_stream_ = s; }
  cudaStream_t compute_stream() const { return compute_stream_; }
  cudaStream_t comm_stream() const { return comm_stream_; }

 private:
  class Request;
  NcclCommunicator() = default;

  // The comm stream waits for the compute stream's queued work.
  Status WaitForCompute();
  // The compute stream waits for everything queued so far on the comm stream.
  Status ComputeWaitsForComm();
  // `stream` waits for the compute stream's queued work.
  Status StreamWaitsForCompute(cudaStream_t stream);
  Status CheckPeer(int peer, int tag, const char* what) const;
  Status CheckCount(int64_t count, const char* what) const;

  std::unique_ptr<MpiGroup> group_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  cudaStream_t compute_stream_ = nullptr;  // nullptr: the legacy default stream
  cudaEvent_t compute_ready_ = nullptr;
  cudaEvent_t comm_done_ = nullptr;
  ncclComm_t down_comm_ = nullptr;  // messages to lower group ranks
  cudaStream_t down_stream_ = nullptr;
};

}  // namespace ptdp::runtime::cuda
