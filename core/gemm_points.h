// GemmPoints: a Linear's three GEMMs timed at exact (m, n, k) shapes, an optional part of a
// HardwareProfile (core/hardware.h, key "gemm_points"; docs/profiles.md). The profile's GEMM
// tables hold a grid of powers of two and the cost model interpolates between them in log2; a
// model whose widths lie between (h 768, 3h 2304) or whose token count lies beyond the grid
// (m = 32768) runs its GEMMs at rates the grid does not hold (on the H200, gpt2-124m's ran 0.909
// of their grid price in the step). `ptdp profile --gemm-shapes-of` times those shapes with the
// grid's kernels and timing, and the cost model prices a GEMM at a point's shape from the point
// (costmodel/gemm.h).
//
// Each point is keyed as the backward tables are, by the forward's (m, n, k) = (tokens, output
// features, input features), and holds three rates, each counted as 2 m n k FLOPs: the forward,
// the input gradient and the weight gradient (accumulated into fp32), measured in the gemm table's
// dtype.
//
// JSON: {"source": "<non-empty>", "points": [{"m", "n", "k", "forward_tflops",
// "backward_data_tflops", "backward_weight_tflops"}, ...]}; m, n, k integers in [1, 1e9], rates in
// (0, 1e5]; no (m, n, k) twice.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/model.h"
#include "core/status.h"

namespace ptdp {

struct GemmPoint {
  int64_t m = 0, n = 0, k = 0;
  double forward_tflops = 0;
  double backward_data_tflops = 0;
  double backward_weight_tflops = 0;
};

struct GemmPoints {
  std::string source;
  std::vector<GemmPoint> points;  // in the order read or measured
  bool empty() const { return points.empty(); }
  // The point at exactly (m, n, k), or nullptr.
  const GemmPoint* Find(int64_t m, int64_t n, int64_t k) const;
};

// (m, n, k) of one Linear GEMM, keyed as GemmPoint.
using GemmShape = std::array<int64_t, 3>;

// The Linear GEMMs one microbatch of `mbs` sequences runs on a tensor-parallel rank of `tp`, as
// the cost model prices them (costmodel/layer_cost.cc): QKV (T, qkv/t, h), projection (T, h, h/t),
// fc1 (T, fc1/t, h), fc2 (T, h, f/t) and the logits (T, V'/t, h), with T = mbs s and V' the
// vocabulary padded for t. REQUIRES: a valid model, tp and mbs >= 1.
std::vector<GemmShape> LinearGemmShapes(const ModelSpec& m, int tp, int mbs);

// Checks every point (one-line errors "<path>.points[i].<field>: ...") and refuses a repeated
// shape.
Status ValidateGemmPoints(const GemmPoints& p, const std::string& path);
// Strict reader of the JSON object at `path` (unknown keys, wrong types refused).
Result<GemmPoints> GemmPointsFromJson(const Json& j, const std::string& path);
OrderedJson GemmPointsToJson(const GemmPoints& p);

}  // namespace ptdp
