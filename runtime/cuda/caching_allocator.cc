#include "runtime/cuda/caching_allocator.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "runtime/cuda/check.h"

namespace ptdp::runtime::cuda {
namespace {

constexpr Bytes kSmallLimit = 1 << 20;  // 1 MiB
constexpr Bytes kSmallQuantum = 512;
constexpr Bytes kLargeQuantum = 2 << 20;  // 2 MiB

Bytes RoundUp(Bytes x, Bytes q) {
  return (x + q - 1) / q * q;
}

std::string Mib(Bytes b) {
  return std::to_string(b / (1 << 20)) + " MiB";
}

}  // namespace

Bytes CachingAllocator::RoundedSize(Bytes bytes) {
  return bytes < kSmallLimit ? RoundUp(std::max<Bytes>(bytes, 1), kSmallQuantum)
                             : RoundUp(bytes, kLargeQuantum);
}

CachingAllocator::~CachingAllocator() {
  for (const auto& [cap, p] : free_) cudaFree(p);
  for (const auto& [p, b] : in_use_) cudaFree(p);
}

void CachingAllocator::Account(Bytes delta, MemTag tag) {
  MemoryStats& s = stats_.requested;
  const int i = static_cast<int>(tag);
  s.current[i] += delta;
  s.current_total += delta;
  PTDP_CHECK(s.current[i] >= 0);
  s.peak[i] = std::max(s.peak[i], s.current[i]);
  s.peak_total = std::max(s.peak_total, s.current_total);
}

Result<void*> CachingAllocator::Allocate(Bytes bytes, MemTag tag) {
  if (bytes < 0) return Status::Invalid("caching allocator: negative size");
  if (bytes == 0) return static_cast<void*>(nullptr);
  ++stats_.alloc_calls;
  const Bytes want = RoundedSize(bytes);
  // Small classes reuse only their own size; large ones a block up to 25% larger.
  const Bytes max_fit = want < kSmallLimit ? want : want + want / 4;
  auto it = free_.lower_bound(want);
  if (it != free_.end() && it->first <= max_fit) {
    void* p = it->second;
    in_use_[p] = Block{it->first, bytes, tag};
    free_.erase(it);
    ++stats_.cache_hits;
    Account(bytes, tag);
    return p;
  }
  auto over_limit = [&] { return limit_ > 0 && stats_.reserved + want > limit_; };
  void* p = nullptr;
  cudaError_t err =
      over_limit() ? cudaErrorMemoryAllocation : cudaMalloc(&p, static_cast<size_t>(want));
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    PTDP_RETURN_IF_ERROR(ReleaseCached());
    err = over_limit() ? cudaErrorMemoryAllocation : cudaMalloc(&p, static_cast<size_t>(want));
  }
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return Status::DoesNotFit(
        "caching allocator: cannot allocate " + std::to_string(bytes) + " bytes for " +
        MemTagName(tag) + " (in use " + Mib(stats_.requested.current_total) + ", reserved " +
        Mib(stats_.reserved) + (limit_ > 0 ? ", limit " + Mib(limit_) : std::string()) + ")");
  }
  PTDP_CUDA_RETURN(err);
  ++stats_.cuda_malloc_calls;
  stats_.reserved += want;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  in_use_[p] = Block{want, bytes, tag};
  Account(bytes, tag);
  return p;
}

void CachingAllocator::Free(void* p) {
  if (p == nullptr) return;
  auto it = in_use_.find(p);
  PTDP_CHECK_MSG(it != in_use_.end(), "caching allocator: free of a pointer it did not hand out");
  Account(-it->second.requested, it->second.tag);
  free_.emplace(it->second.capacity, p);
  in_use_.erase(it);
}

Status CachingAllocator::ReleaseCached() {
  // Blocks may still be read by queued kernels: wait for the device before giving them back.
  if (!free_.empty()) PTDP_CUDA_RETURN(cudaDeviceSynchronize());
  while (!free_.empty()) {
    auto it = free_.begin();
    PTDP_CUDA_RETURN(cudaFree(it->second));
    stats_.reserved -= it->first;
    free_.erase(it);
  }
  return Status::Ok();
}

void CachingAllocator::ResetPeak() {
  stats_.requested.peak = stats_.requested.current;
  stats_.requested.peak_total = stats_.requested.current_total;
  stats_.peak_reserved = stats_.reserved;
}

}  // namespace ptdp::runtime::cuda
