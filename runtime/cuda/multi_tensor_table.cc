#include "runtime/cuda/multi_tensor_table.h"

#include <cstring>
#include <type_traits>

#include "runtime/cuda/check.h"

namespace ptdp::runtime::cuda {
namespace {
namespace ck = ::ptdp::cuda_kernels;

bool Same(const ck::AdamWSegment& a, const ck::AdamWSegment& b) {
  return a.param == b.param && a.copy == b.copy && a.grad == b.grad && a.m == b.m && a.v == b.v &&
         a.count == b.count && a.weight_decay == b.weight_decay && a.vector == b.vector;
}
bool Same(const ck::SquaresSegment& a, const ck::SquaresSegment& b) {
  return a.x == b.x && a.count == b.count && a.vector == b.vector;
}

size_t AlignUp(size_t bytes) {
  return (bytes + 15) / 16 * 16;
}

}  // namespace

template <typename Segment>
MultiTensorTable<Segment>::~MultiTensorTable() {
  if (device_ != nullptr) cudaFree(device_);
}

template <typename Segment>
const cuda_kernels::WorkItem* MultiTensorTable<Segment>::items() const {
  return reinterpret_cast<const ck::WorkItem*>(static_cast<const unsigned char*>(device_) +
                                               items_offset_);
}

template <typename Segment>
double* MultiTensorTable<Segment>::partials() const {
  return reinterpret_cast<double*>(static_cast<unsigned char*>(device_) + partials_offset_);
}

template <typename Segment>
Status MultiTensorTable<Segment>::Update(const std::vector<Segment>& segments, int64_t chunk_size,
                                         cudaStream_t stream) {
  bool unchanged =
      device_ != nullptr && chunk_size == chunk_size_ && segments.size() == host_.size();
  for (size_t i = 0; unchanged && i < segments.size(); ++i) unchanged = Same(segments[i], host_[i]);
  if (unchanged) return Status::Ok();

  std::vector<int64_t> counts;
  counts.reserve(segments.size());
  for (const Segment& s : segments) counts.push_back(s.count);
  std::vector<ck::WorkItem> items;
  try {
    items = ck::PlanWorkItems(counts, chunk_size);
  } catch (const InternalError& e) {
    return Status::Internal(std::string("cuda ops: ") + e.what());
  }
  int64_t partials = 0;
  if constexpr (std::is_same_v<Segment, ck::SquaresSegment>) {
    partials = ck::SumSquaresMultiBlocks(static_cast<int64_t>(items.size()));
  }
  const size_t seg_bytes = segments.size() * sizeof(Segment);
  const size_t item_bytes = items.size() * sizeof(ck::WorkItem);
  const size_t items_offset = AlignUp(seg_bytes),
               partials_offset = AlignUp(items_offset + item_bytes);
  const size_t total = partials_offset + static_cast<size_t>(partials) * sizeof(double);

  // The old tables may still be read by queued kernels: let them finish before freeing them.
  PTDP_CUDA_RETURN(cudaStreamSynchronize(stream));
  if (device_ != nullptr) PTDP_CUDA_RETURN(cudaFree(device_));
  device_ = nullptr;
  host_.clear();
  PTDP_CUDA_RETURN(cudaMalloc(&device_, total > 0 ? total : 16));
  staging_.assign(partials_offset, 0);
  if (seg_bytes > 0) std::memcpy(staging_.data(), segments.data(), seg_bytes);
  if (item_bytes > 0) std::memcpy(staging_.data() + items_offset, items.data(), item_bytes);
  // On the kernels' stream: the launches after it read the uploaded tables.
  if (partials_offset > 0) {
    PTDP_CUDA_RETURN(
        cudaMemcpyAsync(device_, staging_.data(), partials_offset, cudaMemcpyHostToDevice, stream));
  }
  host_ = segments;
  chunk_size_ = chunk_size;
  item_count_ = static_cast<int64_t>(items.size());
  items_offset_ = items_offset;
  partials_offset_ = partials_offset;
  ++uploads_;
  return Status::Ok();
}

template class MultiTensorTable<cuda_kernels::AdamWSegment>;
template class MultiTensorTable<cuda_kernels::SquaresSegment>;

}  // namespace ptdp::runtime::cuda
