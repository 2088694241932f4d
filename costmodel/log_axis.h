// Where a size falls on a measured axis, in log2 space: what the cost model's table lookups share
// (the GEMM table, costmodel/gemm.h; the attention table, costmodel/attention_rate.h). Rates vary
// smoothly with the logarithm of a size, so tables are interpolated linearly in log2 of each.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace ptdp::costmodel {

// Position of x on an increasing axis as (lower index, weight of the upper point) in log2 space,
// clamped to the axis ends: below the first point {0, 0}, above the last {size - 2, 1} (a
// one-point axis: {0, 0}).
struct AxisPos {
  size_t lo = 0;
  double w = 0;
};
inline AxisPos Locate(const std::vector<double>& axis, double x) {
  if (axis.size() == 1 || x <= axis.front()) return {0, 0.0};
  if (x >= axis.back()) return {axis.size() - 2, 1.0};
  const size_t hi = size_t(std::upper_bound(axis.begin(), axis.end(), x) - axis.begin());
  const size_t lo = hi - 1;
  const double w =
      (std::log2(x) - std::log2(axis[lo])) / (std::log2(axis[hi]) - std::log2(axis[lo]));
  return {lo, w};
}

}  // namespace ptdp::costmodel
