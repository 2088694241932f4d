// The work partition of the multi-tensor optimizer kernels (ops.h AdamWMultiUpdate,
// SumSquaresMulti): one launch covers many tensors ("segments"), each cut into chunks of a fixed
// number of elements; a work item is one (segment, chunk) and a block takes work items in turn.
// Plain host C++17 (the kernels' sources are C++17; the device reads the same structs and calls
// ItemRangeOf), so the partition is tested without a GPU (tests/kernels/cuda_multi_tensor_test.cc).
//
// 16-byte accesses: a segment whose fp32 arrays all start on a 16-byte boundary (and whose 16-bit
// copy, if any, on an 8-byte one) is read and written 4 elements at a time. Chunks start at
// multiples of the chunk size (itself a multiple of 4) from the segment's start, so every vector
// of such a segment is aligned; its last count % 4 elements are the scalar tail of its last
// chunk. A segment that is not aligned runs scalar throughout.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/status.h"

#if defined(__CUDACC__)
#define PTDP_HOST_DEVICE __host__ __device__
#else
#define PTDP_HOST_DEVICE
#endif

namespace ptdp::cuda_kernels {

inline constexpr int64_t kVectorFloats = 4;  // 16 bytes of fp32
// Elements per work item: 64 vectors per thread of a 256-thread block, so a block's fixed cost
// (reading its item and segment) is spread over 1 MiB of fp32 traffic per array; gpt-1.3b's
// 1.31e9 parameters make about 20 000 items, several per SM.
inline constexpr int64_t kChunkElements = 65536;

struct WorkItem {
  int32_t segment = 0;  // index into the segment table
  int32_t chunk = 0;    // elements [chunk * chunk_size, min(count, (chunk + 1) * chunk_size))
};

// One work item's elements: [begin, vector_end) in whole 4-element vectors (empty when the
// segment is not vector aligned), then [vector_end, end) one element at a time.
struct ItemRange {
  int64_t begin = 0, vector_end = 0, end = 0;
};

PTDP_HOST_DEVICE inline ItemRange ItemRangeOf(WorkItem w, int64_t count, int64_t chunk_size,
                                              bool vector) {
  ItemRange r;
  r.begin = static_cast<int64_t>(w.chunk) * chunk_size;
  r.end = r.begin + chunk_size < count ? r.begin + chunk_size : count;
  r.vector_end = vector ? r.begin + (r.end - r.begin) / kVectorFloats * kVectorFloats : r.begin;
  return r;
}

// Work items of segments with these element counts, segment by segment, chunk by chunk (an
// empty segment has none). REQUIRES: chunk_size a positive multiple of kVectorFloats; fewer than
// 2^31 segments and chunks per segment.
inline std::vector<WorkItem> PlanWorkItems(const std::vector<int64_t>& counts, int64_t chunk_size) {
  PTDP_CHECK_MSG(
      chunk_size > 0 && chunk_size % kVectorFloats == 0,
      "multi-tensor chunk size " + std::to_string(chunk_size) + " is not a positive multiple of 4");
  PTDP_CHECK_MSG(counts.size() < (1u << 31), "multi-tensor: too many segments");
  std::vector<WorkItem> items;
  for (size_t s = 0; s < counts.size(); ++s) {
    PTDP_CHECK_MSG(counts[s] >= 0, "multi-tensor: a negative element count");
    const int64_t chunks = (counts[s] + chunk_size - 1) / chunk_size;
    PTDP_CHECK_MSG(chunks < (int64_t{1} << 31), "multi-tensor: too many chunks in one segment");
    for (int64_t c = 0; c < chunks; ++c) {
      items.push_back({static_cast<int32_t>(s), static_cast<int32_t>(c)});
    }
  }
  return items;
}

// Whether a segment takes 16-byte accesses: every fp32 array (nullptr entries ignored) 16-byte
// aligned and the 16-bit copy (nullptr: none) 8-byte aligned.
inline bool VectorAligned(std::initializer_list<const void*> fp32_arrays, const void* copy16) {
  for (const void* p : fp32_arrays) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return copy16 == nullptr || reinterpret_cast<uintptr_t>(copy16) % 8 == 0;
}

}  // namespace ptdp::cuda_kernels
