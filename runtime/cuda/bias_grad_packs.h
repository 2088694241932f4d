// The bias gradient's column reduction (dbias[j] += sum_r dout[r][j]) in 16-byte packs: a thread
// sums one pack of V neighbouring columns down a strided set of rows, so a warp reads 512
// contiguous bytes of a row at a time. kernels/cuda's ColumnSums reads one 2-byte element per
// thread per row and adds every block's partial into the same columns (up to 1024 atomics per
// column): on an H200 the bias gradient of fc1 (32768 x 8192 bf16, 512 MiB) took about 0.6 ms
// inside LinearBackwardWeight (2.21 ms against fc2's 1.57 ms for the same GEMM FLOPs without a
// bias; docs/cuda.md), under 1 TB/s.
//
// Geometry: blocks of kBiasPacksPerBlock packs (x) by kBiasRowLanes row lanes (y); the grid's x
// covers a row's c / V packs, its y splits the rows so that about `target_blocks` blocks run.
// Thread (x, y) of block (bx, by) sums pack bx * kBiasPacksPerBlock + x over rows
// by * kBiasRowLanes + y + k * gridDim.y * kBiasRowLanes. The bodies are __host__ __device__ so
// that a CPU test (tests/cuda/bias_grad_packs_test.cc, label unit) runs the kernel's own partition.
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/cuda/elementwise_packs.h"

namespace ptdp::runtime::cuda::packs {

inline constexpr int kBiasPacksPerBlock = 32, kBiasRowLanes = 8;

struct BiasGradGrid {
  int64_t x = 1, y = 1;
};

// The launch grid for n rows of c columns in packs of v (v divides c): x = ceil(c / v / 32); y
// such that x * y is about target_blocks, at least 1, at most one row lane's worth of rows
// (ceil(n / 8)) and CUDA's 65535.
inline BiasGradGrid BiasGradGridFor(int64_t n, int64_t c, int v, int64_t target_blocks) {
  BiasGradGrid g;
  const int64_t packs = c / v;
  g.x = std::max<int64_t>(1, (packs + kBiasPacksPerBlock - 1) / kBiasPacksPerBlock);
  const int64_t max_y =
      std::min<int64_t>(65535, std::max<int64_t>(1, (n + kBiasRowLanes - 1) / kBiasRowLanes));
  g.y = std::clamp<int64_t>(target_blocks / g.x, 1, max_y);
  return g;
}

// acc[j] = sum over rows r = row0, row0 + step, ... < n of dout[r][pack * V + j], in fp32 and in
// row order (four rows loaded before they are added, for the loads in flight).
template <typename T, int V>
PTDP_HOST_DEVICE inline void ColumnPackSum(float* acc, const T* dout, int64_t c, int64_t pack,
                                           int64_t row0, int64_t step, int64_t n) {
  for (int j = 0; j < V; ++j) acc[j] = 0.0f;
  const int64_t col = pack * V;
  int64_t r = row0;
  for (; r + 3 * step < n; r += 4 * step) {
    const Pack<T, V> a = Load<T, V>(dout, r * c + col);
    const Pack<T, V> b = Load<T, V>(dout, (r + step) * c + col);
    const Pack<T, V> d = Load<T, V>(dout, (r + 2 * step) * c + col);
    const Pack<T, V> e = Load<T, V>(dout, (r + 3 * step) * c + col);
    for (int j = 0; j < V; ++j)
      acc[j] = (((acc[j] + Wide(a.e[j])) + Wide(b.e[j])) + Wide(d.e[j])) + Wide(e.e[j]);
  }
  for (; r < n; r += step) {
    const Pack<T, V> a = Load<T, V>(dout, r * c + col);
    for (int j = 0; j < V; ++j) acc[j] += Wide(a.e[j]);
  }
}

}  // namespace ptdp::runtime::cuda::packs
