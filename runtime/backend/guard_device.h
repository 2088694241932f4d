// GuardDevice: a CPU device whose memory faults on any host access outside an Ops or Communicator
// call. Every allocation gets its own pages (mmap), kept PROT_NONE; the device's Ops (a decorator
// around CpuOps), its Copy and Fill, and the communicators wrapped by GuardCommunicator open every
// page for the duration of the call and close them after. A training step that runs on it has no
// host element access left: any stray read or write of a tensor is a SIGSEGV at the culprit.
// Tests only (backend "cpu-guard"); slow (an mprotect per page run per call).
// Thread-safety: one thread, like every device.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "runtime/backend/device.h"
#include "runtime/comm/communicator.h"

namespace ptdp::runtime {

// The pages of one device and how many calls have them open.
class GuardState {
 public:
  void Add(void* p, size_t bytes) { pages_[p] = bytes; }
  void Remove(void* p) { pages_.erase(p); }
  void Open();   // first opener: PROT_READ | PROT_WRITE on every allocation
  void Close();  // last closer: PROT_NONE again
  bool open() const { return depth_ > 0; }

 private:
  std::map<void*, size_t> pages_;
  int depth_ = 0;
};

// RAII: the pages are open while a GuardWindow lives.
class GuardWindow {
 public:
  explicit GuardWindow(GuardState* s) : s_(s) { s_->Open(); }
  ~GuardWindow() { s_->Close(); }
  GuardWindow(const GuardWindow&) = delete;
  GuardWindow& operator=(const GuardWindow&) = delete;

 private:
  GuardState* s_;
};

class GuardDevice final : public Device {
 public:
  GuardDevice();
  ~GuardDevice() override;
  std::string name() const override { return "cpu-guard"; }
  Result<void*> Alloc(Bytes bytes, MemTag tag) override;
  void Free(void* p, Bytes bytes, MemTag tag) override;
  void Copy(void* dst, const void* src, Bytes bytes) override;
  void Fill(void* dst, int value, Bytes bytes) override;
  Ops* backend_ops() override { return ops_.get(); }
  Status Synchronize() override { return Status::Ok(); }
  Status StartTimer() override { return cpu_.StartTimer(); }
  Result<double> ElapsedSeconds() override { return cpu_.ElapsedSeconds(); }
  const std::shared_ptr<GuardState>& state() const { return state_; }

 private:
  std::shared_ptr<GuardState> state_;
  CpuDevice cpu_;  // its clock
  std::unique_ptr<Ops> ops_;
};

// Opens the device's pages for each call of `inner` (and of its requests' Test/Wait, during which
// MPI may read a pending send's buffer).
std::unique_ptr<Communicator> GuardCommunicator(std::unique_ptr<Communicator> inner,
                                                std::shared_ptr<GuardState> state);
// The same around a communicator the caller keeps owning.
std::unique_ptr<Communicator> GuardCommunicatorView(Communicator* inner,
                                                    std::shared_ptr<GuardState> state);

}  // namespace ptdp::runtime
