#include "runtime/cuda/nccl_communicator.h"

#include <string>

#include "runtime/cuda/check.h"

namespace ptdp::runtime::cuda {
namespace {

ncclDataType_t ToNccl(DType t) {
  switch (t) {
    case DType::kFp32:
      return ncclFloat32;
    case DType::kFp16:
      return ncclFloat16;
    case DType::kBf16:
      return ncclBfloat16;
    case DType::kU8:
      return ncclUint8;
    case DType::kI32:
      return ncclInt32;
    case DType::kFp64:
      return ncclFloat64;
  }
  return ncclFloat32;
}

// An event destroyed with its last owner (a request and the communicator may both hold it).
struct Event {
  cudaEvent_t ev = nullptr;
  ~Event() {
    if (ev != nullptr) cudaEventDestroy(ev);
  }
};

Result<std::shared_ptr<Event>> NewEvent() {
  auto e = std::make_shared<Event>();
  PTDP_CUDA_RETURN(cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming));
  return e;
}

}  // namespace

// A request for an issued send or an async collective: Wait() makes the compute stream wait for
// the operation's end (the buffer may then be reused).
class NcclCommunicator::Request final : public CommRequest {
 public:
  Request(NcclCommunicator* comm, std::shared_ptr<Event> done)
      : comm_(comm), done_(std::move(done)) {}
  Status Wait() override {
    if (done_ == nullptr) return Status::Internal("NCCL request: waited on twice");
    PTDP_CUDA_RETURN(cudaStreamWaitEvent(comm_->compute_stream_, done_->ev, 0));
    done_.reset();
    return Status::Ok();
  }

 private:
  NcclCommunicator* comm_;
  std::shared_ptr<Event> done_;
};

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const std::vector<int>& world_ranks) {
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  PTDP_ASSIGN_OR_RETURN(c->group_, MpiGroup::Create(world_ranks));
  // Touch the device first: a broken device fails here with CUDA's message, not inside NCCL.
  int device = -1;
  PTDP_CUDA_RETURN(cudaGetDevice(&device));
  PTDP_CUDA_RETURN(cudaFree(nullptr));
  // Two NCCL communicators over the group: collectives and upward messages, downward messages.
  ncclUniqueId ids[2];
  if (c->group_->rank() == 0) {
    PTDP_NCCL_RETURN(ncclGetUniqueId(&ids[0]));
    PTDP_NCCL_RETURN(ncclGetUniqueId(&ids[1]));
  }
  PTDP_MPI_RETURN(MPI_Bcast(ids, sizeof(ids), MPI_BYTE, 0, c->group_->comm()));
  PTDP_NCCL_RETURN(ncclCommInitRank(&c->comm_, c->group_->size(), ids[0], c->group_->rank()));
  PTDP_NCCL_RETURN(ncclCommInitRank(&c->down_comm_, c->group_->size(), ids[1], c->group_->rank()));
  PTDP_CUDA_RETURN(cudaStreamCreateWithFlags(&c->comm_stream_, cudaStreamNonBlocking));
  PTDP_CUDA_RETURN(cudaStreamCreateWithFlags(&c->down_stream_, cudaStreamNonBlocking));
  PTDP_CUDA_RETURN(cudaEventCreateWithFlags(&c->compute_ready_, cudaEventDisableTiming));
  PTDP_CUDA_RETURN(cudaEventCreateWithFlags(&c->comm_done_, cudaEventDisableTiming));
  return c;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_stream_ != nullptr) cudaStreamSynchronize(comm_stream_);
  if (down_stream_ != nullptr) cudaStreamSynchronize(down_stream_);
  if (comm_ != nullptr) ncclCommDestroy(comm_);
  if (down_comm_ != nullptr) ncclCommDestroy(down_comm_);
  if (down_stream_ != nullptr) cudaStreamDestroy(down_stream_);
  if (compute_ready_ != nullptr) cudaEventDestroy(compute_ready_);
  if (comm_done_ != nullptr) cudaEventDestroy(comm_done_);
  if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
}

Status NcclCommunicator::WaitForCompute() {
  return StreamWaitsForCompute(comm_stream_);
}

Status NcclCommunicator::StreamWaitsForCompute(cudaStream_t stream) {
  PTDP_CUDA_RETURN(cudaEventRecord(compute_ready_, compute_stream_));
  PTDP_CUDA_RETURN(cudaStreamWaitEvent(stream, compute_ready_, 0));
  return Status::Ok();
}

Status NcclCommunicator::ComputeWaitsForComm() {
  PTDP_CUDA_RETURN(cudaEventRecord(comm_done_, comm_stream_));
  PTDP_CUDA_RETURN(cudaStreamWaitEvent(compute_stream_, comm_done_, 0));
  return Status::Ok();
}

Status NcclCommunicator::CheckPeer(int peer, int tag, const char* what) const {
  if (peer < 0 || peer >= size() || peer == rank()) {
    return Status::Invalid(std::string("NCCL ") + what + ": peer " + std::to_string(peer) +
                           " is not another rank of this group of " + std::to_string(size()));
  }
  if (tag < 0) return Status::Invalid(std::string("NCCL ") + what + ": tag must be >= 0");
  return Status::Ok();
}

Status NcclCommunicator::CheckCount(int64_t count, const char* what) const {
  if (count < 0) return Status::Invalid(std::string("NCCL ") + what + ": negative count");
  return Status::Ok();
}

#define PTDP_NCCL_COLLECTIVE(what, call)         \
  do {                                           \
    PTDP_RETURN_IF_ERROR(WaitForCompute());      \
    PTDP_NCCL_RETURN(call);                      \
    PTDP_RETURN_IF_ERROR(ComputeWaitsForComm()); \
    return Status::Ok();                         \
  } while (0)

Status NcclCommunicator::AllReduceSum(void* data, int64_t count, DType dtype) {
  PTDP_RETURN_IF_ERROR(CheckCount(count, "AllReduceSum"));
  PTDP_NCCL_COLLECTIVE("AllReduceSum", ncclAllReduce(data, data, static_cast<size_t>(count),
                                                     ToNccl(dtype), ncclSum, comm_, comm_stream_));
}

Status NcclCommunicator::AllReduceMax(void* data, int64_t count, DType dtype) {
  PTDP_RETURN_IF_ERROR(CheckCount(count, "AllReduceMax"));
  PTDP_NCCL_COLLECTIVE("AllReduceMax", ncclAllReduce(data, data, static_cast<size_t>(count),
                                                     ToNccl(dtype), ncclMax, comm_, comm_stream_));
}

Status NcclCommunicator::AllGather(const void* send, void* recv, int64_t count, DType dtype) {
  PTDP_RETURN_IF_ERROR(CheckCount(count, "AllGather"));
  PTDP_NCCL_COLLECTIVE("AllGather", ncclAllGather(send, recv, static_cast<size_t>(count),
                                                  ToNccl(dtype), comm_, comm_stream_));
}

Status NcclCommunicator::ReduceScatterSum(const void* send, void* recv, int64_t count,
                                          DType dtype) {
  PTDP_RETURN_IF_ERROR(CheckCount(count, "ReduceScatterSum"));
  PTDP_NCCL_COLLECTIVE("ReduceScatterSum",
                       ncclReduceScatter(send, recv, static_cast<size_t>(count), ToNccl(dtype),
                                         ncclSum, comm_, comm_stream_));
}

Status NcclCommunicator::Broadcast(void* data, int64_t count, DType dtype, int root) {
  PTDP_RETURN_IF_ERROR(CheckCount(count, "Broadcast"));
  if (root < 0 || root >= size()) {
    return Status::Invalid("NCCL Broadcast: root " + std::to_string(root) +
                           " is outside the group");
  }
  PTDP_NCCL_COLLECTIVE("Broadcast", ncclBroadcast(data, data, static_cast<size_t>(count),
                                                  ToNccl(dtype), root, comm_, comm_stream_));
}
#undef PTDP_NCCL_COLLECTIVE

Result<std::unique_ptr<CommRequest>> NcclCommunicator::AllReduceSumAsync(void* data, int64_t count,
                                                                         DType dtype) {
  PTDP_RETURN_IF_ERROR(CheckCount(count, "AllReduceSumAsync"));
  PTDP_RETURN_IF_ERROR(WaitForCompute());
  PTDP_NCCL_RETURN(ncclAllReduce(data, data, static_cast<size_t>(count), ToNccl(dtype), ncclSum,
                                 comm_, comm_stream_));
  PTDP_ASSIGN_OR_RETURN(auto done, NewEvent());
  PTDP_CUDA_RETURN(cudaEventRecord(done->ev, comm_stream_));
  return std::unique_ptr<CommRequest>(new Request(this, std::move(done)));
}

Result<std::unique_ptr<CommRequest>> NcclCommunicator::ReduceSumAsync(void* data, int64_t count,
                                                                      DType dtype, int root) {
  PTDP_RETURN_IF_ERROR(CheckCount(count, "ReduceSumAsync"));
  PTDP_RETURN_IF_ERROR(WaitForCompute());
  PTDP_NCCL_RETURN(ncclReduce(data, data, static_cast<size_t>(count), ToNccl(dtype), ncclSum, root,
                              comm_, comm_stream_));
  PTDP_ASSIGN_OR_RETURN(auto done, NewEvent());
  PTDP_CUDA_RETURN(cudaEventRecord(done->ev, comm_stream_));
  return std::unique_ptr<CommRequest>(new Request(this, std::move(done)));
}

Result<std::unique_ptr<CommRequest>> NcclCommunicator::BroadcastAsync(void* data, int64_t count,
                                                                      DType dtype, int root) {
  PTDP_RETURN_IF_ERROR(CheckCount(count, "BroadcastAsync"));
  PTDP_RETURN_IF_ERROR(WaitForCompute());
  PTDP_NCCL_RETURN(ncclBroadcast(data, data, static_cast<size_t>(count), ToNccl(dtype), root, comm_,
                                 comm_stream_));
  PTDP_ASSIGN_OR_RETURN(auto done, NewEvent());
  PTDP_CUDA_RETURN(cudaEventRecord(done->ev, comm_stream_));
  return std::unique_ptr<CommRequest>(new Request(this, std::move(done)));
}

Result<std::unique_ptr<CommRequest>> NcclCommunicator::ReduceScatterSumAsync(const void* send,
                                                                             void* recv,
                                                                             int64_t count,
                                                                             DType dtype) {
  PTDP_RETURN_IF_ERROR(CheckCount(count, "ReduceScatterSumAsync"));
  PTDP_RETURN_IF_ERROR(WaitForCompute());
  PTDP_NCCL_RETURN(ncclReduceScatter(send, recv, static_cast<size_t>(count), ToNccl(dtype), ncclSum,
                                     comm_, comm_stream_));
  PTDP_ASSIGN_OR_RETURN(auto done, NewEvent());
  PTDP_CUDA_RETURN(cudaEventRecord(done->ev, comm_stream_));
  return std::unique_ptr<CommRequest>(new Request(this, std::move(done)));
}

Status NcclCommunicator::Barrier() {
  PTDP_RETURN_IF_ERROR(Synchronize());
  PTDP_MPI_RETURN(MPI_Barrier(group_->comm()));
  return Status::Ok();
}

Status NcclCommunicator::Synchronize() {
  PTDP_CUDA_RETURN(cudaStreamSynchronize(comm_stream_));
  PTDP_CUDA_RETURN(cudaStreamSynchronize(down_stream_));
  return Status::Ok();
}

Result<std::unique_ptr<CommRequest>> NcclCommunicator::ISend(const void* data, int64_t count,
                                                             DType dtype, int peer, int tag) {
  PTDP_RETURN_IF_ERROR(CheckPeer(peer, tag, "ISend"));
  PTDP_RETURN_IF_ERROR(CheckCount(count, "ISend"));
  // Issued now, on the stream of its direction (see the header): the peer's receive may come late
  // without holding up this rank's other direction or its collectives.
  const bool up = peer > rank();
  cudaStream_t stream = up ? comm_stream_ : down_stream_;
  PTDP_RETURN_IF_ERROR(StreamWaitsForCompute(stream));
  PTDP_NCCL_RETURN(ncclSend(data, static_cast<size_t>(count), ToNccl(dtype), peer,
                            up ? comm_ : down_comm_, stream));
  PTDP_ASSIGN_OR_RETURN(auto done, NewEvent());
  PTDP_CUDA_RETURN(cudaEventRecord(done->ev, stream));
  return std::unique_ptr<CommRequest>(new Request(this, std::move(done)));
}

Status NcclCommunicator::Recv(void* data, int64_t count, DType dtype, int peer, int tag) {
  PTDP_RETURN_IF_ERROR(CheckPeer(peer, tag, "Recv"));
  PTDP_RETURN_IF_ERROR(CheckCount(count, "Recv"));
  // A message from a lower rank travelled up (comm_), from a higher rank down (down_comm_).
  const bool up = peer < rank();
  cudaStream_t stream = up ? comm_stream_ : down_stream_;
  PTDP_RETURN_IF_ERROR(StreamWaitsForCompute(stream));
  PTDP_NCCL_RETURN(ncclRecv(data, static_cast<size_t>(count), ToNccl(dtype), peer,
                            up ? comm_ : down_comm_, stream));
  PTDP_CUDA_RETURN(cudaEventRecord(comm_done_, stream));
  PTDP_CUDA_RETURN(cudaStreamWaitEvent(compute_stream_, comm_done_, 0));
  return Status::Ok();
}

}  // namespace ptdp::runtime::cuda
