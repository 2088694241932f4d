// CudaDevice: the runtime's Device (runtime/backend/device.h) on one NVIDIA GPU. Memory comes from
// a CachingAllocator; the Device's per-tag accounting counts the requested bytes (what the planner
// predicts) and allocator_stats() adds what is reserved from CUDA. All work is queued on one
// compute stream, which the communicators order themselves against (set_compute_stream).
//
// The Device interface returns no Status from Copy and Fill; a CUDA failure there is reported
// through PTDP_CHECK (an InternalError naming the call, file, line and rank), see docs/cuda.md.
//
// Alloc does not clear memory: the runtime fills what it needs through Ops::Fill.
//
// Thread-safety: one thread uses a device at a time.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "runtime/backend/device.h"
#include "runtime/cuda/caching_allocator.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/pinned_pool.h"

namespace ptdp::runtime::cuda {

class CudaDevice final : public Device {
 public:
  // Selects CUDA device `ordinal` for this thread and creates the compute stream. Fails with
  // kNotFound when there is no such device. `memory_limit_bytes` > 0 caps the allocator.
  static Result<std::unique_ptr<CudaDevice>> Create(int ordinal, Bytes memory_limit_bytes = 0);
  ~CudaDevice() override;

  std::string name() const override { return name_; }
  Result<void*> Alloc(Bytes bytes, MemTag tag) override;
  void Free(void* p, Bytes bytes, MemTag tag) override;
  // Any direction (unified addressing). Returns once the data are at `dst` when either side is host
  // memory; device-to-device copies are stream-ordered.
  void Copy(void* dst, const void* src, Bytes bytes) override;
  void Fill(void* dst, int value, Bytes bytes) override;
  // Through a page-locked staging buffer (from the pinned pool) and cudaMemcpyAsync on the
  // compute stream, without a stream synchronisation; the buffer is reused once its copy's event
  // has completed.
  void Upload(void* dst, const void* src, Bytes bytes) override;
  // Staging buffers still held by uploads the stream has not finished (tests).
  size_t uploads_in_flight() const { return uploads_.size(); }

  // CudaOps on the compute stream.
  Ops* backend_ops() override { return ops_.get(); }
  Status Synchronize() override;
  // cudaEvent timing on the compute stream.
  Status StartTimer() override;
  Result<double> ElapsedSeconds() override;
  // Instruction marks: events on the compute stream, pooled across steps.
  void ClearMarks() override { marks_used_ = 0; }
  Status Mark() override;
  Result<std::vector<double>> MarkSeconds() override;
  cudaStream_t stream() const { return stream_; }
  int ordinal() const { return ordinal_; }
  const AllocatorStats& allocator_stats() const { return allocator_.stats(); }

 private:
  CudaDevice(int ordinal, Bytes limit) : ordinal_(ordinal), allocator_(limit) {}
  int ordinal_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t timer_start_ = nullptr, timer_stop_ = nullptr;
  std::vector<cudaEvent_t> marks_;  // created on first use, destroyed with the device
  size_t marks_used_ = 0;
  struct InFlightUpload {
    void* staging;
    cudaEvent_t done;
  };
  Status UploadImpl(void* dst, const void* src, Bytes bytes);
  void ReclaimUploads(bool wait);
  PinnedPool pinned_;
  std::vector<InFlightUpload> uploads_;  // oldest first
  std::vector<cudaEvent_t> spare_events_;
  CachingAllocator allocator_;
  std::unique_ptr<CudaOps> ops_;  // destroyed before the stream (declared after it)
};

// Number of CUDA devices visible, 0 when there is none or no driver (never an error): what the
// GPU tests use to decide to skip.
int CudaDeviceCount();

}  // namespace ptdp::runtime::cuda
