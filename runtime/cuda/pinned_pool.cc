#include "runtime/cuda/pinned_pool.h"

#include <cuda_runtime.h>

#include "runtime/cuda/check.h"

namespace ptdp::runtime::cuda {

PinnedPool::~PinnedPool() {
  for (const auto& [p, cap] : capacity_) cudaFreeHost(p);
}

Result<void*> PinnedPool::Acquire(Bytes bytes) {
  Bytes cap = 4096;
  while (cap < bytes) cap *= 2;
  auto it = free_.lower_bound(cap);
  if (it != free_.end() && it->first == cap) {
    void* p = it->second;
    free_.erase(it);
    return p;
  }
  void* p = nullptr;
  PTDP_CUDA_RETURN(cudaHostAlloc(&p, static_cast<size_t>(cap), cudaHostAllocDefault));
  capacity_[p] = cap;
  reserved_ += cap;
  return p;
}

void PinnedPool::Release(void* p) {
  auto it = capacity_.find(p);
  PTDP_CHECK_MSG(it != capacity_.end(), "PinnedPool::Release of a buffer it does not own");
  free_.emplace(it->second, p);
}

}  // namespace ptdp::runtime::cuda
