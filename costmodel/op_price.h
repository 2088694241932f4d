// What the cost model charges for one op of `ptdp train --op-times` (runtime/backend/timed_ops.h
// names them: "LinearForward 32768x2048x6144" is n x c x oc, tokens by input by output features;
// "AttentionForward 16x2048x16x128" is b x s x local heads x head dim), so that an op table
// measured on a device can be laid beside the prices its profile gives, GEMM by GEMM. Only the
// ops the cost model prices as one term are priced: the Linears' GEMMs, with their fused GeLU
// epilogue and bias gradient at the layers' prices (costmodel/layer_cost.h GeluEpilogueSeconds,
// BiasGradSeconds) where the profile measured them (else these ride along unpriced: partial), and
// fused attention; the memory-bound ops are charged per layer, not per op, and are not priced
// here. Of the weight-gradient ops only QKV's and fc1's sum a bias (the projection's and fc2's
// biases are DropoutBackward's, the logits have none), as the runtime's layers run them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/hardware.h"
#include "core/model.h"
#include "core/units.h"

namespace ptdp::costmodel {

// One row of a `ptdp train --op-times` table (tools/op_times_compare.h reads it).
struct MeasuredOp {
  std::string op;             // "LinearForward"
  std::vector<int64_t> dims;  // {32768, 2048, 6144}; empty for an op without a shape
  double calls_per_step = 0;
  double us_per_call = 0;
};

// What a Linear op runs beside its GEMM, priced at a rate of its own (layer_cost.h).
enum class OpExtra { kNone, kGeluEpilogue, kDgeluEpilogue, kBiasGrad };

struct OpPrice {
  Seconds seconds = 0;
  // True when the op does more than the priced term (a GeLU epilogue, a bias gradient, where the
  // profile has no measured rate for it).
  bool partial = false;
  // The parts, for `ptdp calibrate --op-times` (costmodel/calibrate_ops.h): a Linear's GEMM
  // (its launch included; 0 for attention), which direction's table priced it, and the extra
  // work beside it over how many elements (seconds = gemm + the extra at its rate).
  Seconds gemm = 0;
  bool backward = false;
  OpExtra extra = OpExtra::kNone;
  double extra_elements = 0;
};

// The price of one call of `op` with `dims` (as the op table spells them) for `model` (its
// dropout and the attention rate it selects) on `hw`; nullopt when the cost model
// has no per-op price for it. Dimensions that do not fit the op are nullopt too.
std::optional<OpPrice> PriceOp(const std::string& op, const std::vector<int64_t>& dims,
                               const ModelSpec& model, const HardwareProfile& hw);

}  // namespace ptdp::costmodel
