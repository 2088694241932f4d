#include "runtime/cuda/staged_mpi_communicator.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <string>

#include "runtime/cuda/check.h"

namespace ptdp::runtime::cuda {

void WidenToFp32(float* out, const void* in, int64_t count, DType dtype) {
  if (dtype == DType::kFp32) {
    std::memcpy(out, in, static_cast<size_t>(count) * sizeof(float));
  } else if (dtype == DType::kBf16) {
    const auto* p = static_cast<const __nv_bfloat16*>(in);
    for (int64_t i = 0; i < count; ++i) out[i] = __bfloat162float(p[i]);
  } else {
    const auto* p = static_cast<const __half*>(in);
    for (int64_t i = 0; i < count; ++i) out[i] = __half2float(p[i]);
  }
}

void NarrowFromFp32(void* out, const float* in, int64_t count, DType dtype) {
  if (dtype == DType::kFp32) {
    std::memcpy(out, in, static_cast<size_t>(count) * sizeof(float));
  } else if (dtype == DType::kBf16) {
    auto* p = static_cast<__nv_bfloat16*>(out);
    for (int64_t i = 0; i < count; ++i) p[i] = __float2bfloat16_rn(in[i]);
  } else {
    auto* p = static_cast<__half*>(out);
    for (int64_t i = 0; i < count; ++i) p[i] = __float2half_rn(in[i]);
  }
}

namespace {

// A pinned buffer from the pool, given back on destruction.
class Staging {
 public:
  Staging(PinnedPool* pool, void* p) : pool_(pool), p_(p) {}
  Staging(Staging&& o) noexcept : pool_(o.pool_), p_(o.p_) { o.p_ = nullptr; }
  Staging(const Staging&) = delete;
  ~Staging() {
    if (p_ != nullptr) pool_->Release(p_);
  }
  void* get() const { return p_; }
  float* f32() const { return static_cast<float*>(p_); }

 private:
  PinnedPool* pool_;
  void* p_;
};

Result<Staging> Stage(PinnedPool* pool, Bytes bytes) {
  PTDP_ASSIGN_OR_RETURN(void* p, pool->Acquire(bytes));
  return Staging(pool, p);
}

}  // namespace

class StagedMpiCommunicator::Request final : public CommRequest {
 public:
  Request(std::unique_ptr<CommRequest> host, Staging staging)
      : host_(std::move(host)), staging_(std::move(staging)) {}
  Status Wait() override { return host_->Wait(); }

 private:
  std::unique_ptr<CommRequest> host_;
  Staging staging_;  // must outlive the host send
};

StagedMpiCommunicator::StagedMpiCommunicator(std::unique_ptr<Communicator> host)
    : host_(std::move(host)) {
  PTDP_CHECK(host_ != nullptr);
}

StagedMpiCommunicator::~StagedMpiCommunicator() = default;

Status StagedMpiCommunicator::ToHost(void* host, const void* device, Bytes bytes) {
  if (bytes == 0) return Status::Ok();
  PTDP_CUDA_RETURN(cudaMemcpyAsync(host, device, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost,
                                   compute_stream_));
  PTDP_CUDA_RETURN(cudaStreamSynchronize(compute_stream_));
  return Status::Ok();
}

Status StagedMpiCommunicator::ToDevice(void* device, const void* host, Bytes bytes) {
  if (bytes == 0) return Status::Ok();
  PTDP_CUDA_RETURN(cudaMemcpyAsync(device, host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                                   compute_stream_));
  // The pinned staging buffer is reused by the next call: wait for the copy to finish.
  PTDP_CUDA_RETURN(cudaStreamSynchronize(compute_stream_));
  return Status::Ok();
}

Status StagedMpiCommunicator::AllReduce(void* data, int64_t count, DType dtype, ReduceOp op) {
  if (count < 0) return Status::Invalid("staged MPI all-reduce: negative count");
  const Bytes bytes = count * DTypeBytes(dtype);
  PTDP_ASSIGN_OR_RETURN(Staging raw, Stage(&pool_, bytes));
  PTDP_RETURN_IF_ERROR(ToHost(raw.get(), data, bytes));
  if (dtype == DType::kFp32) {
    PTDP_RETURN_IF_ERROR(op == ReduceOp::kSum ? host_->AllReduceSum(raw.get(), count, dtype)
                                              : host_->AllReduceMax(raw.get(), count, dtype));
  } else {
    PTDP_ASSIGN_OR_RETURN(Staging wide, Stage(&pool_, count * Bytes(sizeof(float))));
    WidenToFp32(wide.f32(), raw.get(), count, dtype);
    PTDP_RETURN_IF_ERROR(op == ReduceOp::kSum
                             ? host_->AllReduceSum(wide.get(), count, DType::kFp32)
                             : host_->AllReduceMax(wide.get(), count, DType::kFp32));
    NarrowFromFp32(raw.get(), wide.f32(), count, dtype);
  }
  return ToDevice(data, raw.get(), bytes);
}

Status StagedMpiCommunicator::AllReduceSum(void* data, int64_t count, DType dtype) {
  return AllReduce(data, count, dtype, ReduceOp::kSum);
}

Status StagedMpiCommunicator::AllReduceMax(void* data, int64_t count, DType dtype) {
  return AllReduce(data, count, dtype, ReduceOp::kMax);
}

Status StagedMpiCommunicator::AllGather(const void* send, void* recv, int64_t count, DType dtype) {
  if (count < 0) return Status::Invalid("staged MPI all-gather: negative count");
  const Bytes bytes = count * DTypeBytes(dtype);
  PTDP_ASSIGN_OR_RETURN(Staging in, Stage(&pool_, bytes));
  PTDP_ASSIGN_OR_RETURN(Staging out, Stage(&pool_, bytes * size()));
  PTDP_RETURN_IF_ERROR(ToHost(in.get(), send, bytes));
  PTDP_RETURN_IF_ERROR(host_->AllGather(in.get(), out.get(), count, dtype));
  return ToDevice(recv, out.get(), bytes * size());
}

Status StagedMpiCommunicator::ReduceScatterSum(const void* send, void* recv, int64_t count,
                                               DType dtype) {
  if (count < 0) return Status::Invalid("staged MPI reduce-scatter: negative count");
  const int64_t total = count * size();
  const Bytes bytes = total * DTypeBytes(dtype);
  PTDP_ASSIGN_OR_RETURN(Staging raw, Stage(&pool_, bytes));
  PTDP_RETURN_IF_ERROR(ToHost(raw.get(), send, bytes));
  PTDP_ASSIGN_OR_RETURN(Staging wide, Stage(&pool_, total * Bytes(sizeof(float))));
  WidenToFp32(wide.f32(), raw.get(), total, dtype);
  PTDP_ASSIGN_OR_RETURN(Staging mine, Stage(&pool_, count * Bytes(sizeof(float))));
  PTDP_RETURN_IF_ERROR(host_->ReduceScatterSum(wide.get(), mine.get(), count, DType::kFp32));
  NarrowFromFp32(raw.get(), mine.f32(), count, dtype);
  return ToDevice(recv, raw.get(), count * DTypeBytes(dtype));
}

Status StagedMpiCommunicator::Broadcast(void* data, int64_t count, DType dtype, int root) {
  if (count < 0) return Status::Invalid("staged MPI broadcast: negative count");
  const Bytes bytes = count * DTypeBytes(dtype);
  PTDP_ASSIGN_OR_RETURN(Staging raw, Stage(&pool_, bytes));
  if (rank() == root) PTDP_RETURN_IF_ERROR(ToHost(raw.get(), data, bytes));
  PTDP_RETURN_IF_ERROR(host_->Broadcast(raw.get(), count, dtype, root));
  if (rank() != root) PTDP_RETURN_IF_ERROR(ToDevice(data, raw.get(), bytes));
  return Status::Ok();
}

Status StagedMpiCommunicator::Barrier() {
  PTDP_CUDA_RETURN(cudaStreamSynchronize(compute_stream_));
  return host_->Barrier();
}

Result<std::unique_ptr<CommRequest>> StagedMpiCommunicator::ISend(const void* data, int64_t count,
                                                                  DType dtype, int peer, int tag) {
  if (count < 0) return Status::Invalid("staged MPI send: negative count");
  const Bytes bytes = count * DTypeBytes(dtype);
  PTDP_ASSIGN_OR_RETURN(Staging raw, Stage(&pool_, bytes));
  PTDP_RETURN_IF_ERROR(ToHost(raw.get(), data, bytes));
  PTDP_ASSIGN_OR_RETURN(auto host_req, host_->ISend(raw.get(), count, dtype, peer, tag));
  return std::unique_ptr<CommRequest>(new Request(std::move(host_req), std::move(raw)));
}

Status StagedMpiCommunicator::Recv(void* data, int64_t count, DType dtype, int peer, int tag) {
  if (count < 0) return Status::Invalid("staged MPI recv: negative count");
  const Bytes bytes = count * DTypeBytes(dtype);
  PTDP_ASSIGN_OR_RETURN(Staging raw, Stage(&pool_, bytes));
  PTDP_RETURN_IF_ERROR(host_->Recv(raw.get(), count, dtype, peer, tag));
  return ToDevice(data, raw.get(), bytes);
}

}  // namespace ptdp::runtime::cuda
