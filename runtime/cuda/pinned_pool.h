// PinnedPool: page-locked host buffers reused by size, for staging device data through the host.
// Thread-safety: none (one communicator, one thread).
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "core/status.h"
#include "core/units.h"

namespace ptdp::runtime::cuda {

class PinnedPool {
 public:
  PinnedPool() = default;
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;
  ~PinnedPool();

  // A buffer of at least `bytes` (rounded up to a power of two, at least 4 KiB). Give it back with
  // Release; buffers not given back are freed with the pool.
  Result<void*> Acquire(Bytes bytes);
  void Release(void* p);
  Bytes reserved_bytes() const { return reserved_; }

 private:
  std::multimap<Bytes, void*> free_;  // capacity -> buffer
  std::map<void*, Bytes> capacity_;   // every buffer the pool owns
  Bytes reserved_ = 0;
};

}  // namespace ptdp::runtime::cuda
