// `ptdp calibrate --op-times`: the figures an instruction trace cannot separate, fitted from an op
// table (`ptdp train --op-times`: each op synchronised and timed alone, by op and shape).
//
// Within one layout every layer holds its GEMMs, its fused attention and its GeLU epilogues in
// one ratio, so a trace fit (costmodel/calibrate.h) cannot tell attention_tflops or the epilogue
// rates from the GEMM multiples and keeps them as measured. An op table times each op on its own,
// priced by the cost model's own functions (costmodel/op_price.h), so each rate has its own ops:
//   gemm_forward, gemm_backward  multiples of the GEMM tables' throughput: the summed price of the
//                 Linear ops that run a GEMM alone (LinearForward, LinearBackwardData, the weight
//                 gradients that sum no bias) over their summed measured time, per direction, the
//                 launch cost (kept) taken out of both
//   attention     the rate the model is priced at (FusedAttentionTflops: attention_dropout_tflops
//                 for a model with dropout, else attention_tflops; the attention table's rates
//                 where the profile's table prices the model, all scaled by one multiple): the
//                 attention ops' FLOPs as FusedAttentionCost counts them over their measured time
//   gelu_epilogue_Gelems_per_s, dgelu_epilogue_Gelems_per_s, bias_grad_Gelems_per_s
//                 the elements of the ops that carry them (LinearForward+GeLU,
//                 LinearBackwardData+dGeLU, the weight gradients that sum a bias) over their
//                 measured time less their GEMMs' price at the fitted multiples
// Sums are per step (calls x time per call). A figure whose ops are absent, or whose time beside
// the GEMMs is not positive, or that the profile cannot hold (attention_dropout_tflops without
// attention_tflops, one GeLU epilogue rate without the other), is kept, and `kept` says why.
#pragma once

#include <string>
#include <vector>

#include "core/hardware.h"
#include "core/model.h"
#include "core/status.h"
#include "costmodel/calibrate.h"
#include "costmodel/op_price.h"

namespace ptdp::costmodel {

struct OpTimesFit {
  HardwareProfile profile;  // the start with the fitted figures, each source naming the table
  CalibrationParams gemm;   // gemm_forward and gemm_backward as fitted (1 where no op fits them)
  std::vector<FittedFigure> figures;  // `instructions` counts the op table's rows used
  std::vector<std::string> kept;      // a line per figure left as it was, saying why
};

// Fits the figures above from `ops`, a table of a run of `model`, starting from `start`; `source`
// names the table in every fitted figure's source. Refuses an op whose shape is not one of the
// model's layers (another model's table), naming it, and a table with no op the fit can use.
Result<OpTimesFit> CalibrateFromOpTimes(const std::vector<MeasuredOp>& ops, const ModelSpec& model,
                                        const HardwareProfile& start, const std::string& source);

}  // namespace ptdp::costmodel
