// Device: where the runtime's tensors live, with byte accounting per tag (current and peak), so the
// measured peak memory of a rank can be put beside the planner's prediction (core/shapes.h lists
// what both count). Implementations: CpuDevice (host memory) now; a CUDA device next.
// Thread-safety: one thread uses a device at a time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/units.h"

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

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  // Zero-filled allocation of `bytes`; fails with kDoesNotFit when out of memory.
  virtual Result<void*> Alloc(Bytes bytes, MemTag tag) = 0;
  // REQUIRES: p came from Alloc with the same bytes and tag (nullptr is a no-op).
  virtual void Free(void* p, Bytes bytes, MemTag tag) = 0;
  virtual void Copy(void* dst, const void* src, Bytes bytes) = 0;
  virtual void Fill(void* dst, int value, Bytes bytes) = 0;
  const MemoryStats& stats() const { return stats_; }
  void ResetPeak();  // peak := current (per tag and total)

 protected:
  void Account(Bytes delta, MemTag tag);
  MemoryStats stats_;
};

class CpuDevice final : public Device {
 public:
  std::string name() const override { return "cpu"; }
  Result<void*> Alloc(Bytes bytes, MemTag tag) override;
  void Free(void* p, Bytes bytes, MemTag tag) override;
  void Copy(void* dst, const void* src, Bytes bytes) override;
  void Fill(void* dst, int value, Bytes bytes) override;
};

// An owning, move-only array of T on a device (RAII: frees on destruction).
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  static Result<Buffer> Make(Device* dev, int64_t count, MemTag tag) {
    Buffer b;
    if (count > 0) {
      PTDP_ASSIGN_OR_RETURN(void* p, dev->Alloc(count * Bytes(sizeof(T)), tag));
      b.data_ = static_cast<T*>(p);
    }
    b.dev_ = dev;
    b.count_ = count;
    b.tag_ = tag;
    return b;
  }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      Reset();
      dev_ = o.dev_;
      data_ = o.data_;
      count_ = o.count_;
      tag_ = o.tag_;
      o.data_ = nullptr;
      o.count_ = 0;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Reset(); }
  void Reset() {
    if (data_ != nullptr) dev_->Free(data_, count_ * Bytes(sizeof(T)), tag_);
    data_ = nullptr;
    count_ = 0;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  T& operator[](int64_t i) { return data_[i]; }
  const T& operator[](int64_t i) const { return data_[i]; }

 private:
  Device* dev_ = nullptr;
  T* data_ = nullptr;
  int64_t count_ = 0;
  MemTag tag_ = MemTag::kWorkspace;
};

}  // namespace ptdp::runtime
