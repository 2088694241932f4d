// CachingAllocator: device memory with free lists by size class, so that the steady state of a
// training step makes no cudaMalloc/cudaFree calls, and with accounting of every byte:
//   current / peak      bytes handed out to callers (the requested sizes), in total and per MemTag:
//                       what the planner's memory model predicts (core/shapes.h);
//   reserved / peak     bytes obtained from cudaMalloc (handed out + cached + rounding), which is
//                       what nvidia-smi sees beside the CUDA context and library workspaces.
//
// Size classes: requests below 1 MiB round up to a multiple of 512 B and are reused only by the
// same class; larger ones round up to a multiple of 2 MiB and may reuse a cached block up to 25%
// larger. When cudaMalloc fails, every cached block is released and the call retried once; a
// second failure is kDoesNotFit with the request and the accounting in the message.
//
// Streams are ignored: a block is reused by the next request in host order, which is safe when all
// kernels that touch it run on one compute stream, or when other streams' work on it has been
// ordered before that stream (NcclCommunicator does this for its synchronous calls; async requests
// must be waited on before their buffers are freed).
//
// Thread-safety: none; one thread allocates.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>

#include "core/status.h"
#include "core/units.h"
#include "runtime/backend/device.h"

namespace ptdp::runtime::cuda {

struct AllocatorStats {
  MemoryStats requested;  // handed-out bytes per tag (current, peak) and in total
  Bytes reserved = 0;     // bytes held from cudaMalloc now
  Bytes peak_reserved = 0;
  int64_t alloc_calls = 0;  // Allocate calls
  int64_t cuda_malloc_calls = 0;
  int64_t cache_hits = 0;
};

class CachingAllocator {
 public:
  // `limit_bytes` > 0 caps `reserved` (a budget below the card's capacity, for tests); 0: none.
  explicit CachingAllocator(Bytes limit_bytes = 0) : limit_(limit_bytes) {}
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  // Frees every block; blocks still handed out are a caller bug and are freed too.
  ~CachingAllocator();

  // `bytes` >= 0; 0 gives nullptr. The memory is NOT cleared.
  Result<void*> Allocate(Bytes bytes, MemTag tag);
  // REQUIRES: p came from Allocate on this allocator and was not freed (nullptr is a no-op).
  void Free(void* p);
  // Returns every cached (free) block to CUDA.
  Status ReleaseCached();

  const AllocatorStats& stats() const { return stats_; }
  void ResetPeak();
  // Size class of a request (exposed for tests).
  static Bytes RoundedSize(Bytes bytes);

 private:
  struct Block {
    Bytes capacity = 0;   // bytes obtained from cudaMalloc
    Bytes requested = 0;  // bytes the caller asked for
    MemTag tag = MemTag::kWorkspace;
  };
  void Account(Bytes delta, MemTag tag);

  Bytes limit_;
  std::multimap<Bytes, void*> free_;  // capacity -> cached block
  std::unordered_map<void*, Block> in_use_;
  AllocatorStats stats_;
};

}  // namespace ptdp::runtime::cuda
