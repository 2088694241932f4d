// The size-1 communicator, and the world functions when the build has no MPI.
#include <cstring>

#include "runtime/comm/world.h"

namespace ptdp::runtime {
namespace {

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(int world_rank) : members_{world_rank} {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::vector<int>& members() const override { return members_; }
  Status AllReduceSum(void*, int64_t, DType) override { return Status::Ok(); }
  Status AllReduceMax(void*, int64_t, DType) override { return Status::Ok(); }
  Status AllGather(const void* send, void* recv, int64_t count, DType dtype) override {
    if (send != recv) std::memmove(recv, send, count * DTypeBytes(dtype));
    return Status::Ok();
  }
  Status ReduceScatterSum(const void* send, void* recv, int64_t count, DType dtype) override {
    if (send != recv) std::memmove(recv, send, count * DTypeBytes(dtype));
    return Status::Ok();
  }
  Status Broadcast(void*, int64_t, DType, int) override { return Status::Ok(); }
  Status Barrier() override { return Status::Ok(); }
  Result<std::unique_ptr<CommRequest>> ISend(const void*, int64_t, DType, int, int) override {
    return Status::Internal("self communicator: no peer to send to");
  }
  Status Recv(void*, int64_t, DType, int, int) override {
    return Status::Internal("self communicator: no peer to receive from");
  }

 private:
  std::vector<int> members_;
};

}  // namespace

std::unique_ptr<Communicator> SelfComm(int world_rank) {
  return std::make_unique<SelfCommunicator>(world_rank);
}

#ifndef PTDP_HAVE_MPI
Status InitComm(int*, char***) {
  return Status::Ok();
}
void FinalizeComm() {}
bool HaveMultiProcessComm() {
  return false;
}
Result<std::unique_ptr<Communicator>> WorldComm() {
  return SelfComm(0);
}
Result<std::unique_ptr<Communicator>> SplitComm(Communicator& world,
                                                const std::vector<std::vector<int>>& groups) {
  for (const auto& g : groups) {
    if (g.size() == 1 && g[0] == world.members()[0]) return SelfComm(g[0]);
  }
  return std::unique_ptr<Communicator>();
}
#endif

}  // namespace ptdp::runtime
