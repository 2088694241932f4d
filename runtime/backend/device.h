// Device: where the runtime's tensors live, with byte accounting per tag (current and peak), so the
// measured peak memory of a rank can be put beside the ledger (core/ledger.h lists what both
// count), the stream its work is ordered on, an event timer, and its compute (Ops).
// Implementations: CpuDevice (host memory, synchronous), CudaDevice (runtime/cuda), GuardDevice
// (tests: pages that fault on host access outside Ops and communicator calls). Thread-safety: one
// thread uses a device at a time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "runtime/backend/ops.h"

namespace ptdp::runtime {

// What an allocation holds; the tags mirror the planner's memory_per_stage fields.
enum class MemTag : uint8_t { kWeights, kGrads, kOptimizer, kActivations, kWorkspace };
inline constexpr int kNumMemTags = 5;
const char* MemTagName(
    MemTag t);  // "weights" | "grads" | "optimizer" | "activations" | "workspace"

struct MemoryStats {
  std::array<Bytes, kNumMemTags> current{};  // bytes live now, per tag
  std::array<Bytes, kNumMemTags> peak{};     // per-tag peak
  Bytes current_total = 0;
  Bytes peak_total = 0;  // peak of the sum over tags (not the sum of the per-tag peaks)
};

class TimedOps;

class Device {
 public:
  virtual ~Device();
  virtual std::string name() const = 0;
  // Allocation of `bytes` with unspecified contents (a GPU pays a full write pass to zero one):
  // whoever needs zeros fills them. The host devices fill new memory with 0xFF bytes (NaN in
  // every float dtype) so that a read before a write shows in the tests. Fails with kDoesNotFit
  // when out of memory.
  virtual Result<void*> Alloc(Bytes bytes, MemTag tag) = 0;
  // REQUIRES: p came from Alloc with the same bytes and tag (nullptr is a no-op).
  virtual void Free(void* p, Bytes bytes, MemTag tag) = 0;
  // Any direction between host and device memory; returns once the data are at dst when either
  // side is host memory (the only way results reach the host).
  virtual void Copy(void* dst, const void* src, Bytes bytes) = 0;
  // Host memory `src` to device memory `dst`, ordered on the stream before the work queued after
  // it, without waiting for the stream: `src` may be freed or reused once this returns (a GPU
  // stages it through page-locked memory). For the per-microbatch token upload, which through Copy
  // would drain the stream mid-step. The host devices copy at once.
  virtual void Upload(void* dst, const void* src, Bytes bytes) { Copy(dst, src, bytes); }
  virtual void Fill(void* dst, int value, Bytes bytes) = 0;
  // The device's compute, ordered on its stream: the backend's Ops, or the timing decorator over
  // them after EnableOpTimes.
  Ops* ops() { return timed_view_ ? timed_view_ : backend_ops(); }
  // From now on every Ops call is timed (runtime/backend/timed_ops.h; it synchronises each call).
  void EnableOpTimes();
  TimedOps* op_times() { return timed_ops_; }
  // Waits until everything queued on the stream has run.
  virtual Status Synchronize() = 0;
  // Event timer on the stream: StartTimer records a start event; ElapsedSeconds records a stop
  // event, waits for it and returns the device time between the two (on a GPU a host clock would
  // time the enqueueing).
  virtual Status StartTimer() = 0;
  virtual Result<double> ElapsedSeconds() = 0;
  // The runtime's measured timeline, one mark between instructions: ClearMarks() starts a new
  // series; Mark() notes the point the stream has reached (the host devices read the host clock,
  // their work being synchronous; CudaDevice records an event on its stream, so that a mark is
  // when the GPU got there, not when the work was queued); MarkSeconds() waits for the last mark
  // and returns every mark's seconds after the first.
  virtual void ClearMarks() { host_marks_ns_.clear(); }
  virtual Status Mark();
  virtual Result<std::vector<double>> MarkSeconds();
  const MemoryStats& stats() const { return stats_; }
  void ResetPeak();  // peak := current (per tag and total)

 protected:
  virtual Ops* backend_ops() = 0;
  void Account(Bytes delta, MemTag tag);
  MemoryStats stats_;

 private:
  std::vector<int64_t> host_marks_ns_;  // steady clock, for the host devices' marks
  TimedOps* timed_ops_ = nullptr;       // owned; deleted in ~Device
  Ops* timed_view_ = nullptr;           // the same object as Ops (TimedOps is incomplete here)
};

class CpuDevice : public Device {
 public:
  CpuDevice();
  ~CpuDevice() override;
  std::string name() const override { return "cpu"; }
  Result<void*> Alloc(Bytes bytes, MemTag tag) override;
  void Free(void* p, Bytes bytes, MemTag tag) override;
  void Copy(void* dst, const void* src, Bytes bytes) override;
  void Fill(void* dst, int value, Bytes bytes) override;
  Status Synchronize() override { return Status::Ok(); }  // synchronous: nothing is queued
  Status StartTimer() override;
  Result<double> ElapsedSeconds() override;

 protected:
  Ops* backend_ops() override { return ops_.get(); }

 private:
  std::unique_ptr<Ops> ops_;
  int64_t timer_start_ns_ = 0;
};

// An owning, move-only device array with a dtype (RAII: frees on destruction).
class Tensor {
 public:
  Tensor() = default;
  static Result<Tensor> Make(Device* dev, int64_t count, DType dtype, MemTag tag);
  Tensor(Tensor&& o) noexcept { *this = std::move(o); }
  Tensor& operator=(Tensor&& o) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() { Reset(); }
  void Reset();
  void* data() { return data_; }
  const void* data() const { return data_; }
  int64_t count() const { return count_; }
  DType dtype() const { return dtype_; }
  bool empty() const { return data_ == nullptr; }
  Bytes bytes() const { return count_ * DTypeBytes(dtype_); }
  TensorRef ref() { return {data_, dtype_, count_}; }
  ConstRef cref() const { return {data_, dtype_, count_}; }
  // Elements [offset, offset + n).
  TensorRef slice(int64_t offset, int64_t n) {
    return {static_cast<char*>(data_) + offset * DTypeBytes(dtype_), dtype_, n};
  }

 private:
  Device* dev_ = nullptr;
  void* data_ = nullptr;
  int64_t count_ = 0;
  DType dtype_ = DType::kFp32;
  MemTag tag_ = MemTag::kWorkspace;
};

}  // namespace ptdp::runtime
