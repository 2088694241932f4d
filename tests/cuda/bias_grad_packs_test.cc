// The bias-gradient kernel's partition (runtime/cuda/bias_grad_packs.h) run on the host as
// bias_grad.cu launches it: every block and thread in turn, the row lanes reduced in shared-memory
// order, the block partials added per column. With integer-valued inputs every fp32 sum is exact,
// so the result equals the double reference exactly iff every element is summed exactly once
// (label unit: no GPU; cuda_ops_test compares the kernel with CpuOps on a GPU).
#include "runtime/cuda/bias_grad_packs.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace ptdp::runtime::cuda::packs {
namespace {

template <typename T>
T FromInt(int v) {
  return Narrow<T>(static_cast<float>(v));
}

// dbias (starting at `start`) after the emulated launch, for n rows of c columns.
template <typename T, int V>
std::vector<float> Emulate(const std::vector<T>& dout, int64_t n, int64_t c, int64_t target_blocks,
                           float start) {
  const BiasGradGrid g = BiasGradGridFor(n, c, V, target_blocks);
  std::vector<float> dbias(size_t(c), start);
  for (int64_t bx = 0; bx < g.x; ++bx) {
    for (int64_t by = 0; by < g.y; ++by) {
      float partial[kBiasRowLanes][kBiasPacksPerBlock * V] = {};
      for (int ty = 0; ty < kBiasRowLanes; ++ty) {
        for (int tx = 0; tx < kBiasPacksPerBlock; ++tx) {
          const int64_t pack = bx * kBiasPacksPerBlock + tx;
          float acc[V] = {};
          if (pack < c / V) {
            ColumnPackSum<T, V>(acc, dout.data(), c, pack, by * kBiasRowLanes + ty,
                                g.y * kBiasRowLanes, n);
          }
          for (int j = 0; j < V; ++j) partial[ty][tx * V + j] = acc[j];
        }
      }
      for (int t = 0; t < kBiasPacksPerBlock * V; ++t) {
        const int64_t col = bx * kBiasPacksPerBlock * V + t;
        if (col >= c) continue;
        float sum = 0.0f;
        for (int k = 0; k < kBiasRowLanes; ++k) sum += partial[k][t];
        dbias[size_t(col)] += sum;
      }
    }
  }
  return dbias;
}

template <typename T, int V>
void CheckShape(int64_t n, int64_t c, int64_t target_blocks) {
  SCOPED_TRACE(testing::Message() << "n " << n << " c " << c << " V " << V << " blocks "
                                  << target_blocks);
  // 64-byte aligned, as the kernel requires 16 (the launcher checks it).
  T* raw = static_cast<T*>(std::aligned_alloc(64, (size_t(n * c) * sizeof(T) + 63) / 64 * 64));
  std::vector<T> dout(size_t(n * c));
  std::vector<double> expect(size_t(c), 3.0);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < c; ++j) {
      const int v = int((r * 7 + j * 13) % 9) - 4;  // small integers: every fp32 sum exact
      dout[size_t(r * c + j)] = FromInt<T>(v);
      expect[size_t(j)] += v;
    }
  }
  std::memcpy(raw, dout.data(), dout.size() * sizeof(T));
  std::vector<T> aligned(raw, raw + n * c);
  std::free(raw);
  const std::vector<float> got = Emulate<T, V>(aligned, n, c, target_blocks, 3.0f);
  for (int64_t j = 0; j < c; ++j) ASSERT_EQ(double(got[size_t(j)]), expect[size_t(j)]) << j;
}

TEST(BiasGradPacks, EveryElementSummedOnceBf16) {
  constexpr int V = kWidth<__nv_bfloat16>;
  CheckShape<__nv_bfloat16, V>(1, 8, 1056);
  CheckShape<__nv_bfloat16, V>(37, 264, 1056);    // 33 packs: a second, mostly idle block column
  CheckShape<__nv_bfloat16, V>(4099, 512, 1056);  // rows not a multiple of the lanes x grid
  CheckShape<__nv_bfloat16, V>(300, 2048, 3);     // fewer blocks than columns need: y = 1
}

TEST(BiasGradPacks, EveryElementSummedOnceFp32) {
  constexpr int V = kWidth<float>;
  CheckShape<float, V>(5, 4, 1056);
  CheckShape<float, V>(1001, 392, 1056);
  CheckShape<float, V>(64, 128, 1);
}

TEST(BiasGradPacks, GridCoversColumnsAndBoundsRows) {
  // gpt-1.3b's fc1 on an H200 (132 SMs x 8 blocks): 8192 columns in 1024 packs of 8.
  BiasGradGrid g = BiasGradGridFor(32768, 8192, 8, 1056);
  EXPECT_EQ(g.x, 32);
  EXPECT_EQ(g.y, 33);
  g = BiasGradGridFor(3, 2048, 8, 1056);  // 3 rows: one row lane block
  EXPECT_EQ(g.x, 8);
  EXPECT_EQ(g.y, 1);
  g = BiasGradGridFor(1 << 30, 8, 8, 1 << 20);  // CUDA's y limit
  EXPECT_EQ(g.y, 65535);
}

}  // namespace
}  // namespace ptdp::runtime::cuda::packs
