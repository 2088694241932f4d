#include "costmodel/op_price.h"

#include "costmodel/gemm.h"
#include "costmodel/layer_cost.h"

namespace ptdp::costmodel {

namespace {

// The attention op's shape as a model: b sequences of s tokens, `heads` local heads of dim d,
// everything else (the dropout, which picks the rate) as the plan's model has it.
ModelSpec AttentionModel(const ModelSpec& model, int64_t s, int64_t heads, int64_t d) {
  ModelSpec m = model;
  m.seq_len = s;
  m.heads = int(heads);
  m.kv_heads = 0;
  m.hidden = heads * d;
  return m;
}

// Whether the runtime's LinearBackwardWeight of n x c x oc also sums the Linear's bias gradient
// (runtime/model/gpt_layers.cc): for a model with biases, every Linear's but those of the
// projection and fc2, whose output features are the hidden size (DropoutBackward sums their
// biases), and the logits', which have none (input the hidden size, output a t-th of the padded
// vocabulary for a t that divides the heads).
bool WeightGradSumsBias(const ModelSpec& m, int64_t c, int64_t oc) {
  if (!m.linear_bias || oc == m.hidden) return false;
  if (c != m.hidden) return true;
  for (int t = 1; t <= m.heads; ++t) {
    if (m.heads % t == 0 && PaddedVocab(m, t) / t == oc) return false;
  }
  return true;
}

}  // namespace

std::optional<OpPrice> PriceOp(const std::string& op, const std::vector<int64_t>& dims,
                               const ModelSpec& model, const HardwareProfile& hw) {
  for (const int64_t d : dims) {
    if (d <= 0) return std::nullopt;
  }
  // The Linear's forward is C[n, oc] = X[n, c] W^T: the GEMM (m, n, k) = (n, oc, c), at the
  // table's rate as the layers price it in the precisions the runtime trains in (no FP8).
  const bool linear = op.rfind("Linear", 0) == 0;
  if (linear && dims.size() == 3) {
    const int64_t n = dims[0], c = dims[1], oc = dims[2];
    // The GeLU epilogues and the bias gradient at the layers' own prices (layer_cost.h) where the
    // profile measured them; without, the op carries more than its priced GEMM (partial). An op
    // table with a "+GeLU" op comes from a runtime that fuses the GeLU: the software fact is true.
    const bool epilogues = GeluPricedByEpilogue(model, hw, /*gelu_gemm_epilogue=*/true);
    // The GEMM, then what the op adds beside it over `elements` at that extra's price.
    const auto priced = [](Seconds gemm, bool backward, OpExtra extra, double elements,
                           Seconds extra_s, bool partial) {
      return OpPrice{gemm + extra_s, partial, gemm, backward, extra, elements};
    };
    const double outputs = double(n) * double(oc), inputs = double(n) * double(c);
    if (op == "LinearForward") {
      return priced(GemmTime(hw, n, oc, c), false, OpExtra::kNone, 0, 0, false);
    }
    if (op == "LinearForward+GeLU") {  // the GeLU over the n x oc outputs (fc1's)
      return priced(GemmTime(hw, n, oc, c), false, OpExtra::kGeluEpilogue, outputs,
                    GeluEpilogueSeconds(hw, outputs, false), !epilogues);
    }
    if (op == "LinearBackwardData") {
      return priced(GemmBackwardDataTime(hw, n, oc, c), true, OpExtra::kNone, 0, 0, false);
    }
    if (op == "LinearBackwardData+dGeLU") {  // GeLU' over the n x c input gradient (fc2's)
      return priced(GemmBackwardDataTime(hw, n, oc, c), true, OpExtra::kDgeluEpilogue, inputs,
                    GeluEpilogueSeconds(hw, inputs, true), !epilogues);
    }
    // The weight gradient's op also sums the bias gradient (n x oc) of QKV and fc1.
    if (op == "LinearBackwardWeight") {
      const Seconds gemm = GemmBackwardWeightTime(hw, n, oc, c);
      if (!WeightGradSumsBias(model, c, oc)) {
        return priced(gemm, true, OpExtra::kNone, 0, 0, false);
      }
      return priced(gemm, true, OpExtra::kBiasGrad, outputs, BiasGradSeconds(hw, outputs),
                    !BiasGradPricedByRate(hw));
    }
    return std::nullopt;
  }
  const bool attention = op == "AttentionForward" || op == "AttentionBackward";
  if (attention && dims.size() == 4) {
    const ModelSpec m = AttentionModel(model, dims[1], dims[2], dims[3]);
    const PieceCost c = FusedAttentionCost(m, hw, /*tp=*/1, int(dims[0]));
    return OpPrice{op == "AttentionForward" ? c.forward.gemm : c.backward.gemm, false};
  }
  return std::nullopt;
}

}  // namespace ptdp::costmodel
