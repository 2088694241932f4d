// AttentionTable: a fused (FlashAttention-class) causal attention kernel's achieved rate by shape,
// an optional part of a HardwareProfile (core/hardware.h, key "attention_table";
// docs/profiles.md). A flash kernel's rate depends on the head dimension d and the sequence
// length s (FlashAttention-2, Dao 2023, and FlashAttention-3, Shah et al. 2024: d = 64 well below
// d = 128, short sequences below long ones), so one rate measured at one shape cannot price models
// of other shapes on the same machine. Each point is forward + backward at the causal count, as
// attention_tflops counts it (half of 14 b s^2 heads d FLOPs), with and optionally without
// attention dropout. The points form a grid (every s with every d) so that the cost model looks a
// rate up bilinearly (costmodel/attention_rate.h).
//
// JSON: {"source": "<non-empty>", "points": [{"s", "d", "tflops", "dropout_tflops" (optional)},
// ...]}, points in any order; s and d in (0, 1e9], rates in (0, 1e5]; no (s, d) twice.
#pragma once

#include <string>
#include <vector>

#include "core/json.h"
#include "core/status.h"

namespace ptdp {

// One measured shape: sequence length s, head dimension d, TFLOP/s without dropout and, 0 when
// not measured, with dropout (the p `ptdp profile` times, 0.1).
struct AttentionPoint {
  double s = 0, d = 0;
  double tflops = 0;
  double dropout_tflops = 0;
};

// The points as a grid: axes strictly increasing, rates s-major (index is * d.size() + id).
struct AttentionTable {
  std::string source;
  std::vector<double> s, d;
  std::vector<double> tflops;
  // 0 where a point has no dropout rate; every entry 0 when none has.
  std::vector<double> dropout_tflops;
  bool empty() const { return tflops.empty(); }
  double At(size_t is, size_t id) const { return tflops[is * d.size() + id]; }
  double DropoutAt(size_t is, size_t id) const { return dropout_tflops[is * d.size() + id]; }
  // Every point has a dropout rate (only then does the cost model use them).
  bool HasDropout() const;
  // The points back, s-major.
  std::vector<AttentionPoint> Points() const;
};

// Builds the grid from points in any order, checking each (one-line errors under `path`:
// "<path>.points[i].tflops: ..."), refusing a duplicate (s, d) and a missing grid cell.
Result<AttentionTable> AttentionTableFromPoints(const std::string& source,
                                                const std::vector<AttentionPoint>& points,
                                                const std::string& path);

// Strict reader of the JSON object at `path` (unknown keys, wrong types refused).
Result<AttentionTable> AttentionTableFromJson(const Json& j, const std::string& path);
OrderedJson AttentionTableToJson(const AttentionTable& t);

}  // namespace ptdp
