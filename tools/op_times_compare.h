// `ptdp compare --op-times OPS.txt --plan P.json`: an op table measured by `ptdp train --op-times`
// beside what the cost model charges for each op under a profile (the plan's cluster, or
// --cluster), GEMM by GEMM and for fused attention (costmodel/op_price.h). This is how a measured
// step's GEMMs are checked against a profile's tables without a throwaway script: the in-step
// rate of each shape against the table's, one source of prices (the cost model's own functions).
#pragma once

#include <string>
#include <vector>

#include "core/hardware.h"
#include "core/model.h"
#include "core/status.h"
#include "costmodel/op_price.h"

namespace ptdp::tools {

using costmodel::MeasuredOp;  // one row of the table (costmodel/op_price.h)

// The rows of the op table in `text` (the lines between the "op [shape]" header and "all ops";
// anything before the header, such as the training log, is skipped). Errors name the line.
Result<std::vector<MeasuredOp>> ParseOpTimes(const std::string& text);

// The table of measured against priced times (one line per op, then totals for the priced GEMMs,
// the attention and the ops with no per-op price).
std::string OpTimesComparisonText(const std::vector<MeasuredOp>& ops, const ModelSpec& model,
                                  const HardwareProfile& hw);

}  // namespace ptdp::tools
