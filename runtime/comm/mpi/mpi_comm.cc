// The MPI Communicator. Every MPI call is checked; a failure becomes a Status naming the call's
// file and line, the world rank and MPI's own error string. MPI_ERRORS_RETURN is set on every
// communicator so errors come back instead of aborting the job.
#include <mpi.h>

#include <cstring>
#include <string>

#include "runtime/backend/half.h"
#include "runtime/comm/world.h"

namespace ptdp::runtime {
namespace {

int WorldRankOrMinus1() {
  int init = 0;
  MPI_Initialized(&init);
  if (!init) return -1;
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

Status MpiStatus(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return Status::Internal(std::string(file) + ":" + std::to_string(line) + ": rank " +
                          std::to_string(WorldRankOrMinus1()) + ": " + call +
                          " failed: " + std::string(msg, static_cast<size_t>(len)));
}

#define PTDP_MPI(call) PTDP_RETURN_IF_ERROR(MpiStatus((call), #call, __FILE__, __LINE__))

MPI_Datatype ToMpi(DType t) {
  switch (t) {
    case DType::kFp32:
      return MPI_FLOAT;
    case DType::kFp16:
    case DType::kBf16:
      return MPI_UINT16_T;  // raw 16-bit words; reduced by the user ops below
    case DType::kU8:
      return MPI_UINT8_T;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kFp64:
      return MPI_DOUBLE;
  }
  return MPI_BYTE;
}

Status CheckReducible(DType t) {
  if (t != DType::kFp32 && t != DType::kBf16 && t != DType::kFp16 && t != DType::kFp64) {
    return Status::Internal(std::string("mpi: reductions of ") + DTypeName(t) + " are unsupported");
  }
  return Status::Ok();
}

// 16-bit reductions: each pair of elements is widened to fp32, combined, and rounded back to the
// format (round to nearest even), as NCCL reduces bf16/fp16. Commutative bit for bit, so every
// rank gets the same result.
template <DType kT, bool kMax>
void HalfReduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x, y;
    half::Widen(&x, &a[i], 1, kT);
    half::Widen(&y, &b[i], 1, kT);
    const float r = kMax ? (x > y ? x : y) : x + y;
    half::Narrow(&b[i], &r, 1, kT);
  }
}

MPI_Op HalfOp(DType t, bool max) {
  static MPI_Op ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  const int i = (t == DType::kBf16 ? 0 : 2) + (max ? 1 : 0);
  if (ops[i] == MPI_OP_NULL) {
    MPI_User_function* f =
        t == DType::kBf16
            ? (max ? &HalfReduce<DType::kBf16, true> : &HalfReduce<DType::kBf16, false>)
            : (max ? &HalfReduce<DType::kFp16, true> : &HalfReduce<DType::kFp16, false>);
    MPI_Op_create(f, /*commute=*/1, &ops[i]);
  }
  return ops[i];
}

MPI_Op SumOp(DType t) {
  return t == DType::kBf16 || t == DType::kFp16 ? HalfOp(t, false) : MPI_SUM;
}
MPI_Op MaxOp(DType t) {
  return t == DType::kBf16 || t == DType::kFp16 ? HalfOp(t, true) : MPI_MAX;
}

class MpiRequest final : public CommRequest {
 public:
  MpiRequest() = default;
  ~MpiRequest() override {
    if (req_ != MPI_REQUEST_NULL) MPI_Wait(&req_, MPI_STATUS_IGNORE);
  }
  Status Wait() override {
    PTDP_MPI(MPI_Wait(&req_, MPI_STATUS_IGNORE));
    return Status::Ok();
  }
  Result<bool> Test() override {
    int done = 0;
    PTDP_MPI(MPI_Test(&req_, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }
  MPI_Request req_ = MPI_REQUEST_NULL;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::vector<int> members, bool owned)
      : comm_(comm), members_(std::move(members)), owned_(owned) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int fin = 0;
    MPI_Finalized(&fin);
    if (owned_ && !fin) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& members() const override { return members_; }
  MPI_Comm comm() const { return comm_; }

  Status AllReduceSum(void* data, int64_t count, DType dtype) override {
    PTDP_RETURN_IF_ERROR(CheckReducible(dtype));
    if (size_ == 1) return Status::Ok();
    PTDP_MPI(MPI_Allreduce(MPI_IN_PLACE, data, Count(count), ToMpi(dtype), SumOp(dtype), comm_));
    return Status::Ok();
  }
  // MPI_Iallreduce: a non-blocking collective progresses only inside MPI calls (Open MPI has no
  // progress thread by default), so the caller Tests the request at points it passes anyway.
  Result<std::unique_ptr<CommRequest>> AllReduceSumAsync(void* data, int64_t count,
                                                         DType dtype) override {
    PTDP_RETURN_IF_ERROR(CheckReducible(dtype));
    auto r = std::make_unique<MpiRequest>();  // MPI_REQUEST_NULL: complete (one member)
    if (size_ > 1) {
      PTDP_MPI(MPI_Iallreduce(MPI_IN_PLACE, data, Count(count), ToMpi(dtype), SumOp(dtype), comm_,
                              &r->req_));
    }
    return std::unique_ptr<CommRequest>(std::move(r));
  }
  Result<std::unique_ptr<CommRequest>> ReduceSumAsync(void* data, int64_t count, DType dtype,
                                                      int root) override {
    PTDP_RETURN_IF_ERROR(CheckReducible(dtype));
    auto r = std::make_unique<MpiRequest>();  // MPI_REQUEST_NULL: complete (one member)
    if (size_ > 1) {
      const void* send = rank_ == root ? MPI_IN_PLACE : data;
      PTDP_MPI(
          MPI_Ireduce(send, data, Count(count), ToMpi(dtype), SumOp(dtype), root, comm_, &r->req_));
    }
    return std::unique_ptr<CommRequest>(std::move(r));
  }
  Status AllReduceMax(void* data, int64_t count, DType dtype) override {
    PTDP_RETURN_IF_ERROR(CheckReducible(dtype));
    if (size_ == 1) return Status::Ok();
    PTDP_MPI(MPI_Allreduce(MPI_IN_PLACE, data, Count(count), ToMpi(dtype), MaxOp(dtype), comm_));
    return Status::Ok();
  }
  Status AllGather(const void* send, void* recv, int64_t count, DType dtype) override {
    const char* own = static_cast<const char*>(recv) + int64_t(rank_) * count * DTypeBytes(dtype);
    const void* sbuf = send == own ? MPI_IN_PLACE : send;
    PTDP_MPI(
        MPI_Allgather(sbuf, Count(count), ToMpi(dtype), recv, Count(count), ToMpi(dtype), comm_));
    return Status::Ok();
  }
  Status ReduceScatterSum(const void* send, void* recv, int64_t count, DType dtype) override {
    PTDP_RETURN_IF_ERROR(CheckReducible(dtype));
    const Bytes block = count * DTypeBytes(dtype);
    char* own = static_cast<char*>(const_cast<void*>(send)) + int64_t(rank_) * block;
    if (recv != own) {
      PTDP_MPI(
          MPI_Reduce_scatter_block(send, recv, Count(count), ToMpi(dtype), SumOp(dtype), comm_));
      return Status::Ok();
    }
    // In place (recv is this rank's block of send, as NCCL allows): MPI's in-place form leaves the
    // result at the start of the buffer; it moves to the rank's block. The other blocks are left
    // undefined.
    void* base = const_cast<void*>(send);
    PTDP_MPI(MPI_Reduce_scatter_block(MPI_IN_PLACE, base, Count(count), ToMpi(dtype), SumOp(dtype),
                                      comm_));
    if (own != base) std::memmove(own, base, static_cast<size_t>(block));
    return Status::Ok();
  }
  Result<std::unique_ptr<CommRequest>> BroadcastAsync(void* data, int64_t count, DType dtype,
                                                      int root) override {
    auto r = std::make_unique<MpiRequest>();  // MPI_REQUEST_NULL: complete (one member)
    if (size_ > 1) PTDP_MPI(MPI_Ibcast(data, Count(count), ToMpi(dtype), root, comm_, &r->req_));
    return std::unique_ptr<CommRequest>(std::move(r));
  }
  Status Broadcast(void* data, int64_t count, DType dtype, int root) override {
    PTDP_MPI(MPI_Bcast(data, Count(count), ToMpi(dtype), root, comm_));
    return Status::Ok();
  }
  Status Barrier() override {
    PTDP_MPI(MPI_Barrier(comm_));
    return Status::Ok();
  }
  Result<std::unique_ptr<CommRequest>> ISend(const void* data, int64_t count, DType dtype, int peer,
                                             int tag) override {
    auto r = std::make_unique<MpiRequest>();
    PTDP_MPI(MPI_Isend(data, Count(count), ToMpi(dtype), peer, tag, comm_, &r->req_));
    return std::unique_ptr<CommRequest>(std::move(r));
  }
  Status Recv(void* data, int64_t count, DType dtype, int peer, int tag) override {
    PTDP_MPI(MPI_Recv(data, Count(count), ToMpi(dtype), peer, tag, comm_, MPI_STATUS_IGNORE));
    return Status::Ok();
  }
  // MPI_Probe returns once the message's envelope has arrived: for a rendezvous message (above the
  // eager limit) the data moves in the MPI_Recv after it, for an eager one it is copied there.
  Result<bool> WaitForMessage(int peer, int tag) override {
    PTDP_MPI(MPI_Probe(peer, tag, comm_, MPI_STATUS_IGNORE));
    return true;
  }

 private:
  static int Count(int64_t n) {
    PTDP_CHECK_MSG(n >= 0 && n <= 0x7fffffff, "message over 2^31 elements");
    return static_cast<int>(n);
  }
  MPI_Comm comm_;
  std::vector<int> members_;
  bool owned_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

Status InitComm(int* argc, char*** argv) {
  int init = 0;
  PTDP_MPI(MPI_Initialized(&init));
  if (init) return Status::Ok();
  PTDP_MPI(MPI_Init(argc, argv));
  PTDP_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  return Status::Ok();
}

void FinalizeComm() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Finalize();
}

bool HaveMultiProcessComm() {
  return true;
}

Result<std::unique_ptr<Communicator>> WorldComm() {
  int size = 0;
  PTDP_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  std::vector<int> members(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) members[static_cast<size_t>(i)] = i;
  return std::unique_ptr<Communicator>(
      std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, std::move(members), false));
}

Result<std::unique_ptr<Communicator>> SplitComm(Communicator& world,
                                                const std::vector<std::vector<int>>& groups) {
  auto* mw = dynamic_cast<MpiCommunicator*>(&world);
  if (mw == nullptr) return Status::Internal("SplitComm: world is not an MPI communicator");
  const int me = world.members()[static_cast<size_t>(world.rank())];
  int color = MPI_UNDEFINED, key = 0;
  std::vector<int> mine;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i) {
      if (groups[g][i] == me) {
        color = static_cast<int>(g);
        key = static_cast<int>(i);
        mine = groups[g];
      }
    }
  }
  MPI_Comm out = MPI_COMM_NULL;
  PTDP_MPI(MPI_Comm_split(mw->comm(), color, key, &out));
  if (out == MPI_COMM_NULL) return std::unique_ptr<Communicator>();
  PTDP_MPI(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
  return std::unique_ptr<Communicator>(std::make_unique<MpiCommunicator>(out, mine, true));
}

}  // namespace ptdp::runtime
