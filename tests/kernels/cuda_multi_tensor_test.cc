// The multi-tensor optimizer kernels (kernels/cuda/multi_tensor.h, AdamWMultiUpdate,
// SumSquaresMulti): the work partition on the host, and the kernels (on a device, or in the CPU
// emulation) against the single-tensor kernels: AdamW bit for bit, the sum of squares within the
// single-tensor kernel's own fp32 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cuda/ops.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/test_util.h"

namespace ptdp::cuda_kernels {
namespace {

using kernels::testing::RandomVector;
using testing::DeviceBuffer;

// ---- The partition (host only) ------------------------------------------------------------------
// Compiled into the emulation binary (label unit) only: a test of the gpu-labelled binary passes
// only on a GPU.
#ifdef PTDP_CUDA_EMULATION

TEST(MultiTensorPlan, EveryElementOnceWithAlignedVectorsAndTailsLast) {
  const std::vector<int64_t> counts = {0, 1, 7, 8, 4099, 64, 65, 0, 200003};
  for (const int64_t chunk : {int64_t{4}, int64_t{64}, int64_t{1024}, kChunkElements}) {
    SCOPED_TRACE(chunk);
    const std::vector<WorkItem> items = PlanWorkItems(counts, chunk);
    std::vector<std::vector<int>> hits(counts.size());
    for (size_t s = 0; s < counts.size(); ++s) hits[s].assign(static_cast<size_t>(counts[s]), 0);
    int32_t prev_segment = -1, prev_chunk = -1;
    for (const WorkItem& w : items) {
      // Segment by segment, chunk by chunk.
      ASSERT_TRUE(w.segment > prev_segment ||
                  (w.segment == prev_segment && w.chunk == prev_chunk + 1));
      if (w.segment != prev_segment) {
        ASSERT_EQ(w.chunk, 0);
      }
      prev_segment = w.segment;
      prev_chunk = w.chunk;
      const int64_t count = counts[w.segment];
      const ItemRange scalar = ItemRangeOf(w, count, chunk, false);
      const ItemRange vec = ItemRangeOf(w, count, chunk, true);
      ASSERT_EQ(scalar.begin, vec.begin);
      ASSERT_EQ(scalar.end, vec.end);
      ASSERT_EQ(scalar.vector_end, scalar.begin);  // unaligned segments: no vectors
      ASSERT_LT(vec.begin, vec.end);               // no empty item
      ASSERT_LE(vec.begin, vec.vector_end);
      ASSERT_LE(vec.vector_end, vec.end);
      ASSERT_EQ(vec.begin % kVectorFloats, 0);  // every vector aligned with the segment's start
      ASSERT_EQ((vec.vector_end - vec.begin) % kVectorFloats, 0);
      ASSERT_LT(vec.end - vec.vector_end, kVectorFloats);
      if (vec.end != count) {
        ASSERT_EQ(vec.vector_end, vec.end);  // a tail only in the last chunk
      }
      for (int64_t i = vec.begin; i < vec.end; ++i) hits[w.segment][i] += 1;
    }
    for (size_t s = 0; s < counts.size(); ++s) {
      for (size_t i = 0; i < hits[s].size(); ++i) {
        ASSERT_EQ(hits[s][i], 1) << "segment " << s << " element " << i;
      }
    }
  }
}

TEST(MultiTensorPlan, RefusesAChunkThatSplitsVectors) {
  EXPECT_THROW(PlanWorkItems({5}, 6), InternalError);
  EXPECT_THROW(PlanWorkItems({5}, 0), InternalError);
}

TEST(MultiTensorPlan, VectorAlignment) {
  alignas(16) float f[8] = {};
  alignas(16) uint16_t h[8] = {};
  EXPECT_TRUE(VectorAligned({f, f + 4, nullptr}, h));
  EXPECT_TRUE(VectorAligned({f}, nullptr));
  EXPECT_FALSE(VectorAligned({f, f + 1}, nullptr));  // one fp32 array 4 bytes off
  EXPECT_TRUE(VectorAligned({f}, h + 4));            // the copy needs 8 bytes (4 elements)
  EXPECT_FALSE(VectorAligned({f}, h + 2));
  EXPECT_FALSE(VectorAligned({f}, h + 1));
}

#endif  // PTDP_CUDA_EMULATION

// ---- The kernels ----------------------------------------------------------------------------

// The index of the first element whose bits differ, or -1.
template <typename T>
int64_t FirstBitDifference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

// One tensor of the test: its count, its view's offset in elements into its buffers (1: the fp32
// views 4 bytes and the copy 2 bytes off a 16-byte boundary), its weight decay, whether it has a
// compute copy.
struct Case {
  int64_t count, shift;
  double weight_decay;
  bool copy;
};
const std::vector<Case> kCases = {
    {1, 0, 0.1, true},
    {7, 0, 0.0, true},
    {8, 0, 0.05, true},
    {4099, 0, 0.1, true},
    {300, 1, 0.02, true},  // a misaligned sub-view: the scalar path
    // Several chunks at the training chunk size (the emulation: at the small chunk only).
    {testing::SizeFor(65541, 8197), 0, 0.1, true},
    {64, 0, 0.1, false},  // no compute copy
};

// A tensor's optimizer state on the device: one copy for each path, from the same values.
template <typename CopyT>
struct TensorState {
  TensorState(const Case& c, uint64_t seed)
      : n(static_cast<size_t>(c.count + c.shift)),
        param(Values(seed, 1.0)),
        grad(Values(seed + 1, 0.1)),
        m(Values(seed + 2, 0.01)),
        v(Squares(Values(seed + 3, 0.01))),
        copy(n) {}
  std::vector<float> Values(uint64_t seed, double scale) const {
    const auto d = RandomVector(static_cast<int64_t>(n), seed, scale);
    return std::vector<float>(d.begin(), d.end());
  }
  static std::vector<float> Squares(std::vector<float> x) {
    for (float& e : x) e *= e;  // v >= 0
    return x;
  }
  size_t n;
  DeviceBuffer<float> param, grad, m, v;
  DeviceBuffer<CopyT> copy;
};

template <typename CopyT>
class CudaMultiTensor : public testing::CudaTest {};
using CopyTypes = ::testing::Types<bf16, __half>;
TYPED_TEST_SUITE(CudaMultiTensor, CopyTypes);

// Three steps of AdamW (grad_scale 0.37, a weight decay per tensor) over awkward sizes, per tensor
// and in one launch, at a small chunk (many items per segment) and the training chunk.
TYPED_TEST(CudaMultiTensor, AdamWBitIdenticalToPerTensor) {
  using CopyT = TypeParam;
  const double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  const float grad_scale = 0.37f;
  for (const int64_t chunk : {int64_t{256}, kChunkElements}) {
    SCOPED_TRACE(chunk);
    std::vector<std::unique_ptr<TensorState<CopyT>>> single, multi;
    std::vector<AdamWSegment> segments;
    std::vector<int64_t> counts;
    for (size_t k = 0; k < kCases.size(); ++k) {
      const Case& c = kCases[k];
      single.push_back(std::make_unique<TensorState<CopyT>>(c, 100 + 10 * k));
      multi.push_back(std::make_unique<TensorState<CopyT>>(c, 100 + 10 * k));
      TensorState<CopyT>& t = *multi.back();
      AdamWSegment s;
      s.param = t.param.get() + c.shift;
      s.copy = c.copy ? t.copy.get() + c.shift : nullptr;
      s.grad = t.grad.get() + c.shift;
      s.m = t.m.get() + c.shift;
      s.v = t.v.get() + c.shift;
      s.count = c.count;
      s.weight_decay = static_cast<float>(c.weight_decay);
      s.vector = VectorAligned({s.param, s.grad, s.m, s.v}, s.copy) ? 1 : 0;
      ASSERT_EQ(s.vector, c.shift == 0 ? 1 : 0) << "case " << k;
      segments.push_back(s);
      counts.push_back(c.count);
    }
    const std::vector<WorkItem> items = PlanWorkItems(counts, chunk);
    DeviceBuffer<AdamWSegment> dsegments(segments);
    DeviceBuffer<WorkItem> ditems(items);
    for (int64_t step = 1; step <= 3; ++step) {
      for (size_t k = 0; k < kCases.size(); ++k) {
        const Case& c = kCases[k];
        TensorState<CopyT>& t = *single[k];
        AdamWUpdate<CopyT>(t.param.get() + c.shift, c.copy ? t.copy.get() + c.shift : nullptr,
                           t.grad.get() + c.shift, t.m.get() + c.shift, t.v.get() + c.shift,
                           c.count, lr, beta1, beta2, eps, c.weight_decay, step, grad_scale,
                           nullptr);
      }
      AdamWMultiUpdate<CopyT>(dsegments.get(), ditems.get(), static_cast<int64_t>(items.size()),
                              chunk, lr, beta1, beta2, eps, step, grad_scale, nullptr);
    }
    this->Sync();
    for (size_t k = 0; k < kCases.size(); ++k) {
      SCOPED_TRACE(::testing::Message() << "case " << k << ", " << kCases[k].count << " elements");
      const TensorState<CopyT>& a = *single[k];
      const TensorState<CopyT>& b = *multi[k];
      EXPECT_EQ(FirstBitDifference(a.param.Download(), b.param.Download()), -1) << "param";
      EXPECT_EQ(FirstBitDifference(a.m.Download(), b.m.Download()), -1) << "m";
      EXPECT_EQ(FirstBitDifference(a.v.Download(), b.v.Download()), -1) << "v";
      EXPECT_EQ(FirstBitDifference(a.copy.Download(), b.copy.Download()), -1) << "copy";
      // The update moved the parameters (the comparison is not of two untouched buffers).
      EXPECT_NE(FirstBitDifference(b.param.Download(), a.Values(100 + 10 * k, 1.0)), -1);
    }
  }
}

class CudaMultiSquares : public testing::CudaTest {
 protected:
  // sum x^2 over every case's view, per tensor (SumSquaresAccumulate) and in one launch.
  void Sums(const std::vector<std::vector<float>>& values, int64_t chunk, double* per_tensor,
            double* multi) {
    std::vector<std::unique_ptr<DeviceBuffer<float>>> xs;
    std::vector<SquaresSegment> segments;
    std::vector<int64_t> counts;
    for (size_t k = 0; k < kCases.size(); ++k) {
      xs.push_back(std::make_unique<DeviceBuffer<float>>(values[k]));
      SquaresSegment s;
      s.x = xs.back()->get() + kCases[k].shift;
      s.count = kCases[k].count;
      s.vector = VectorAligned({s.x}, nullptr) ? 1 : 0;
      segments.push_back(s);
      counts.push_back(s.count);
    }
    const std::vector<WorkItem> items = PlanWorkItems(counts, chunk);
    const int64_t n_items = static_cast<int64_t>(items.size());
    DeviceBuffer<SquaresSegment> dsegments(segments);
    DeviceBuffer<WorkItem> ditems(items);
    DeviceBuffer<double> partials(static_cast<size_t>(SumSquaresMultiBlocks(n_items)));
    DeviceBuffer<double> a(1), b(1), b2(1);
    for (const SquaresSegment& s : segments)
      SumSquaresAccumulate<float>(a.get(), s.x, s.count, nullptr);
    SumSquaresMulti(b.get(), partials.get(), dsegments.get(), ditems.get(), n_items, chunk,
                    nullptr);
    SumSquaresMulti(b2.get(), partials.get(), dsegments.get(), ditems.get(), n_items, chunk,
                    nullptr);
    Sync();
    *per_tensor = a.Download()[0];
    *multi = b.Download()[0];
    EXPECT_EQ(*multi, b2.Download()[0]) << "the same tables give the same bits";
  }
};

// Squares that are multiples of 1/16 with sums far below 2^24 / 16: every sum is exact in fp32 and
// fp64, whatever the order, so both must equal the exact total (each element counted once).
TEST_F(CudaMultiSquares, ExactValuesCountEveryElementOnce) {
  std::vector<std::vector<float>> values;
  double want = 0;
  for (size_t k = 0; k < kCases.size(); ++k) {
    std::vector<float> x(static_cast<size_t>(kCases[k].count + kCases[k].shift), 100.0f);
    for (int64_t i = 0; i < kCases[k].count; ++i) {
      x[kCases[k].shift + i] =
          static_cast<float>((i + 3 * static_cast<int64_t>(k)) % 7 - 3) * 0.25f;
      want += static_cast<double>(x[kCases[k].shift + i]) * x[kCases[k].shift + i];
    }
    values.push_back(x);  // the element before a shifted view (100) must not be counted
  }
  for (const int64_t chunk : {int64_t{256}, kChunkElements}) {
    double per_tensor = 0, multi = 0;
    Sums(values, chunk, &per_tensor, &multi);
    EXPECT_EQ(per_tensor, want);
    EXPECT_EQ(multi, want) << "chunk " << chunk;
  }
}

// Random values. The one launch adds exact fp64 squares in fp64: within 2 n 2^-53 of the host's
// fp64 sum (n terms, both sums). The per-tensor kernel squares in fp32 (one rounding) and sums in
// fp32 trees of depth 10 (5 shuffle levels in a warp, 5 over the warps; one element per thread at
// these sizes), all terms positive: within 11 * 2^-24 = 6.6e-7 of the exact sum, so within 1e-6
// of the one launch's.
TEST_F(CudaMultiSquares, RandomValuesMatchPerTensorSums) {
  std::vector<std::vector<float>> values;
  double want = 0;
  int64_t n = 0;
  for (size_t k = 0; k < kCases.size(); ++k) {
    const auto d = RandomVector(kCases[k].count + kCases[k].shift, 300 + k);
    values.emplace_back(d.begin(), d.end());
    for (int64_t i = 0; i < kCases[k].count; ++i) {
      const double xi = values.back()[kCases[k].shift + i];
      want += xi * xi;
    }
    n += kCases[k].count;
  }
  for (const int64_t chunk : {int64_t{256}, kChunkElements}) {
    double per_tensor = 0, multi = 0;
    Sums(values, chunk, &per_tensor, &multi);
    EXPECT_LE(std::fabs(multi - want), 2.0 * static_cast<double>(n) * 0x1p-53 * want);
    EXPECT_LE(std::fabs(multi - per_tensor), 1e-6 * multi) << "chunk " << chunk;
  }
}

}  // namespace
}  // namespace ptdp::cuda_kernels
