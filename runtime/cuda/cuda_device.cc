#include "runtime/cuda/cuda_device.h"

#include <cstring>

#include "runtime/cuda/check.h"

namespace ptdp::runtime::cuda {
namespace {

// Turns a failed CUDA call in a void method into an InternalError with the library's message.
void CheckOrThrow(const Status& s) {
  PTDP_CHECK_MSG(s.ok(), s.message());
}

Status CopyImpl(cudaStream_t stream, void* dst, const void* src, Bytes bytes) {
  if (bytes <= 0) return Status::Ok();
  PTDP_CUDA_RETURN(
      cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, stream));
  cudaPointerAttributes a{};
  cudaPointerAttributes b{};
  PTDP_CUDA_RETURN(cudaPointerGetAttributes(&a, dst));
  PTDP_CUDA_RETURN(cudaPointerGetAttributes(&b, src));
  if (a.type != cudaMemoryTypeDevice || b.type != cudaMemoryTypeDevice) {
    PTDP_CUDA_RETURN(cudaStreamSynchronize(stream));
  }
  return Status::Ok();
}

Status FillImpl(cudaStream_t stream, void* dst, int value, Bytes bytes) {
  if (bytes <= 0) return Status::Ok();
  PTDP_CUDA_RETURN(cudaMemsetAsync(dst, value, static_cast<size_t>(bytes), stream));
  return Status::Ok();
}

}  // namespace

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

Result<std::unique_ptr<CudaDevice>> CudaDevice::Create(int ordinal, Bytes memory_limit_bytes) {
  const int n = CudaDeviceCount();
  if (ordinal < 0 || ordinal >= n) {
    return Status::NotFound("cuda device " + std::to_string(ordinal) + " does not exist (" +
                            std::to_string(n) + " visible)");
  }
  std::unique_ptr<CudaDevice> d(new CudaDevice(ordinal, memory_limit_bytes));
  PTDP_CUDA_RETURN(cudaSetDevice(ordinal));
  cudaDeviceProp prop{};
  PTDP_CUDA_RETURN(cudaGetDeviceProperties(&prop, ordinal));
  d->name_ = std::string("cuda:") + std::to_string(ordinal) + " (" + prop.name + ")";
  PTDP_CUDA_RETURN(cudaStreamCreateWithFlags(&d->stream_, cudaStreamNonBlocking));
  PTDP_CUDA_RETURN(cudaEventCreate(&d->timer_start_));
  PTDP_CUDA_RETURN(cudaEventCreate(&d->timer_stop_));
  PTDP_ASSIGN_OR_RETURN(d->ops_, CudaOps::Create(d->stream_));
  return d;
}

CudaDevice::~CudaDevice() {
  ReclaimUploads(/*wait=*/true);  // the staging buffers outlive their copies
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  ops_.reset();  // its scratch is freed on the stream
  if (timer_start_ != nullptr) cudaEventDestroy(timer_start_);
  if (timer_stop_ != nullptr) cudaEventDestroy(timer_stop_);
  for (cudaEvent_t e : marks_) cudaEventDestroy(e);
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

Result<void*> CudaDevice::Alloc(Bytes bytes, MemTag tag) {
  PTDP_ASSIGN_OR_RETURN(void* p, allocator_.Allocate(bytes, tag));
  Account(bytes, tag);
  return p;
}

void CudaDevice::Free(void* p, Bytes bytes, MemTag tag) {
  if (p == nullptr) return;
  allocator_.Free(p);
  Account(-bytes, tag);
}

void CudaDevice::Copy(void* dst, const void* src, Bytes bytes) {
  CheckOrThrow(CopyImpl(stream_, dst, src, bytes));
}

void CudaDevice::Upload(void* dst, const void* src, Bytes bytes) {
  CheckOrThrow(UploadImpl(dst, src, bytes));
}

Status CudaDevice::UploadImpl(void* dst, const void* src, Bytes bytes) {
  if (bytes <= 0) return Status::Ok();
  ReclaimUploads(/*wait=*/false);
  PTDP_ASSIGN_OR_RETURN(void* staging, pinned_.Acquire(bytes));
  std::memcpy(staging, src, static_cast<size_t>(bytes));
  cudaEvent_t done = nullptr;
  if (!spare_events_.empty()) {
    done = spare_events_.back();
    spare_events_.pop_back();
  } else {
    PTDP_CUDA_RETURN(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  }
  // Listed before the calls that can fail, so the buffer and event are reclaimed either way.
  uploads_.push_back({staging, done});
  PTDP_CUDA_RETURN(
      cudaMemcpyAsync(dst, staging, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
  PTDP_CUDA_RETURN(cudaEventRecord(done, stream_));
  return Status::Ok();
}

// Gives back the staging buffers whose copies have completed (all of them with `wait`). Uploads
// complete in stream order, so the scan stops at the first one still running.
void CudaDevice::ReclaimUploads(bool wait) {
  size_t done = 0;
  for (; done < uploads_.size(); ++done) {
    cudaEvent_t e = uploads_[done].done;
    if (wait) {
      cudaEventSynchronize(e);
    } else if (cudaEventQuery(e) != cudaSuccess) {
      (void)cudaGetLastError();  // cudaErrorNotReady is not an error to keep
      break;
    }
    pinned_.Release(uploads_[done].staging);
    spare_events_.push_back(e);
  }
  uploads_.erase(uploads_.begin(), uploads_.begin() + static_cast<std::ptrdiff_t>(done));
}

void CudaDevice::Fill(void* dst, int value, Bytes bytes) {
  CheckOrThrow(FillImpl(stream_, dst, value, bytes));
}

Status CudaDevice::Synchronize() {
  PTDP_CUDA_RETURN(cudaStreamSynchronize(stream_));
  return Status::Ok();
}

Status CudaDevice::StartTimer() {
  PTDP_CUDA_RETURN(cudaEventRecord(timer_start_, stream_));
  return Status::Ok();
}

Status CudaDevice::Mark() {
  if (marks_used_ == marks_.size()) {
    cudaEvent_t e = nullptr;
    PTDP_CUDA_RETURN(cudaEventCreate(&e));
    marks_.push_back(e);
  }
  PTDP_CUDA_RETURN(cudaEventRecord(marks_[marks_used_++], stream_));
  return Status::Ok();
}

Result<std::vector<double>> CudaDevice::MarkSeconds() {
  std::vector<double> s;
  if (marks_used_ == 0) return s;
  PTDP_CUDA_RETURN(cudaEventSynchronize(marks_[marks_used_ - 1]));
  for (size_t i = 0; i < marks_used_; ++i) {
    float ms = 0;
    PTDP_CUDA_RETURN(cudaEventElapsedTime(&ms, marks_[0], marks_[i]));
    s.push_back(double(ms) * 1e-3);
  }
  return s;
}

Result<double> CudaDevice::ElapsedSeconds() {
  PTDP_CUDA_RETURN(cudaEventRecord(timer_stop_, stream_));
  PTDP_CUDA_RETURN(cudaEventSynchronize(timer_stop_));
  float ms = 0;
  PTDP_CUDA_RETURN(cudaEventElapsedTime(&ms, timer_start_, timer_stop_));
  return double(ms) * 1e-3;
}

}  // namespace ptdp::runtime::cuda
