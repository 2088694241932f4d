#include "runtime/backend/device.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "runtime/backend/cpu_ops.h"
#include "runtime/backend/timed_ops.h"

namespace ptdp::runtime {

const char* MemTagName(MemTag t) {
  switch (t) {
    case MemTag::kWeights:
      return "weights";
    case MemTag::kGrads:
      return "grads";
    case MemTag::kOptimizer:
      return "optimizer";
    case MemTag::kActivations:
      return "activations";
    case MemTag::kWorkspace:
      return "workspace";
  }
  return "?";
}

void Device::Account(Bytes delta, MemTag tag) {
  const int i = static_cast<int>(tag);
  stats_.current[i] += delta;
  stats_.current_total += delta;
  PTDP_CHECK(stats_.current[i] >= 0);
  stats_.peak[i] = std::max(stats_.peak[i], stats_.current[i]);
  stats_.peak_total = std::max(stats_.peak_total, stats_.current_total);
}

Device::~Device() {
  delete timed_ops_;
}

void Device::EnableOpTimes() {
  if (timed_ops_ != nullptr) return;
  timed_ops_ = new TimedOps(backend_ops(), this);
  timed_view_ = timed_ops_;
}

Status Device::Mark() {
  host_marks_ns_.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count());
  return Status::Ok();
}

Result<std::vector<double>> Device::MarkSeconds() {
  std::vector<double> s;
  for (int64_t t : host_marks_ns_) s.push_back(double(t - host_marks_ns_.front()) * 1e-9);
  return s;
}

void Device::ResetPeak() {
  stats_.peak = stats_.current;
  stats_.peak_total = stats_.current_total;
}

CpuDevice::CpuDevice() : ops_(std::make_unique<CpuOps>()) {}
CpuDevice::~CpuDevice() = default;

namespace {
int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

// Synchronous device: the host clock after the work returned is the device's time.
Status CpuDevice::StartTimer() {
  timer_start_ns_ = NowNs();
  return Status::Ok();
}
Result<double> CpuDevice::ElapsedSeconds() {
  return double(NowNs() - timer_start_ns_) * 1e-9;
}

Result<Tensor> Tensor::Make(Device* dev, int64_t count, DType dtype, MemTag tag) {
  Tensor t;
  if (count > 0) {
    PTDP_ASSIGN_OR_RETURN(t.data_, dev->Alloc(count * DTypeBytes(dtype), tag));
  }
  t.dev_ = dev;
  t.count_ = count;
  t.dtype_ = dtype;
  t.tag_ = tag;
  return t;
}

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    Reset();
    dev_ = o.dev_;
    data_ = o.data_;
    count_ = o.count_;
    dtype_ = o.dtype_;
    tag_ = o.tag_;
    o.data_ = nullptr;
    o.count_ = 0;
  }
  return *this;
}

void Tensor::Reset() {
  if (data_ != nullptr) dev_->Free(data_, count_ * DTypeBytes(dtype_), tag_);
  data_ = nullptr;
  count_ = 0;
}

Result<void*> CpuDevice::Alloc(Bytes bytes, MemTag tag) {
  PTDP_CHECK(bytes >= 0);
  if (bytes == 0) return static_cast<void*>(nullptr);
  // 64-byte alignment for vectorised kernels; aligned_alloc needs a multiple of the alignment.
  const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) {
    return Status::DoesNotFit("cpu device: cannot allocate " + std::to_string(bytes) +
                              " bytes for " + MemTagName(tag));
  }
  std::memset(p, 0xFF, rounded);  // poison: NaN in every float dtype (Device::Alloc)
  Account(bytes, tag);
  return p;
}

void CpuDevice::Free(void* p, Bytes bytes, MemTag tag) {
  if (p == nullptr) return;
  std::free(p);
  Account(-bytes, tag);
}

void CpuDevice::Copy(void* dst, const void* src, Bytes bytes) {
  if (bytes > 0) std::memmove(dst, src, static_cast<size_t>(bytes));
}

void CpuDevice::Fill(void* dst, int value, Bytes bytes) {
  if (bytes > 0) std::memset(dst, value, static_cast<size_t>(bytes));
}

}  // namespace ptdp::runtime
