// The device tables of a multi-tensor kernel (kernels/cuda/ops.h AdamWMultiUpdate,
// SumSquaresMulti): its segments, their work items (kernels/cuda/multi_tensor.h) and, for the sum
// of squares, the per-block partial sums, in one device buffer. The trainer's tensors are views
// of fixed arenas, so the tables are uploaded at the first step and reused while every segment
// is unchanged; a change of any pointer, count, weight decay or alignment uploads them again.
// The buffer (a few hundred KiB for gpt-1.3b) is outside the Device's per-tag accounting, like
// CudaOps' scratch. Internal to runtime/cuda. Thread-safety: one thread at a time.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/ops.h"

namespace ptdp::runtime::cuda {

// Segment is kernels/cuda's AdamWSegment or SquaresSegment.
template <typename Segment>
class MultiTensorTable {
 public:
  MultiTensorTable() = default;
  ~MultiTensorTable();
  MultiTensorTable(const MultiTensorTable&) = delete;
  MultiTensorTable& operator=(const MultiTensorTable&) = delete;

  // Makes the device tables describe `segments` cut into chunk_size chunks; uploads only when
  // they differ from the tables' current ones. Work queued on `stream` before a re-upload
  // finishes first (it may still read the old tables).
  Status Update(const std::vector<Segment>& segments, int64_t chunk_size, cudaStream_t stream);

  const Segment* segments() const { return static_cast<const Segment*>(device_); }
  const cuda_kernels::WorkItem* items() const;
  int64_t item_count() const { return item_count_; }
  // SumSquaresMultiBlocks(item_count()) doubles of scratch (SquaresSegment tables only).
  double* partials() const;
  // How many times the tables were uploaded (tests: the cache holds, and it invalidates).
  int64_t uploads() const { return uploads_; }

 private:
  std::vector<Segment> host_;  // what the device tables describe
  int64_t chunk_size_ = 0;
  int64_t item_count_ = 0;
  size_t items_offset_ = 0, partials_offset_ = 0;  // bytes into device_
  void* device_ = nullptr;
  std::vector<unsigned char> staging_;  // the uploaded bytes, kept until the next upload
  int64_t uploads_ = 0;
};

// CudaOps' two tables (cuda_ops_multi.cc).
struct MultiTensorTables {
  MultiTensorTable<cuda_kernels::AdamWSegment> adamw;
  MultiTensorTable<cuda_kernels::SquaresSegment> squares;
};

}  // namespace ptdp::runtime::cuda
