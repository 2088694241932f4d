#include "costmodel/calibrate_ops.h"

#include <gtest/gtest.h>

#include <cmath>

#include "costmodel/gemm.h"
#include "costmodel/layer_cost.h"
#include "tests/costmodel/test_profile.h"

namespace ptdp::costmodel {
namespace {

using testing::S;

// A GPT with biases and attention dropout (h 64, 4 heads of 16, s 32), its vocabulary (1100) not
// fc1's width (256) at any t: PriceOp tells the logits' weight gradient (no bias) from fc1's
// by its width.
ModelSpec Gpt(double dropout) {
  ModelSpec m = testing::TinyModel();
  m.vocab = 1100;
  m.dropout = dropout;
  return m;
}

// The round profile with GEMMs that depend on their shape, backward GEMMs slower than forward,
// a launch cost, and every rate the op table fits.
HardwareProfile Start() {
  HardwareProfile p = testing::RoundProfile();
  p.gemm.tflops = {40, 60, 70, 80, 90, 100, 110, 120};
  p.gemm_backward_efficiency = S(0.8);
  p.kernel_launch_us = S(2);
  p.attention_tflops = S(40);
  p.attention_dropout_tflops = S(30);
  p.gelu_epilogue_Gelems_per_s = S(100);
  p.dgelu_epilogue_Gelems_per_s = S(80);
  p.bias_grad_Gelems_per_s = S(50);
  return p;
}

// The "machine": GEMMs 1.27x and 1.4x slower forward and backward, attention 1.62x slower,
// the epilogues and the bias gradient at other known multiples.
HardwareProfile Truth(const HardwareProfile& start) {
  CalibrationParams x;
  x.gemm_forward = 1 / 1.27, x.gemm_backward = 1 / 1.4;
  HardwareProfile p = ApplyCalibration(start, x, "truth");
  p.attention_tflops = S(start.attention_tflops.value / 1.3);
  p.attention_dropout_tflops = S(start.attention_dropout_tflops.value / 1.62);
  p.gelu_epilogue_Gelems_per_s = S(start.gelu_epilogue_Gelems_per_s.value * 0.5);
  p.dgelu_epilogue_Gelems_per_s = S(start.dgelu_epilogue_Gelems_per_s.value * 0.6);
  p.bias_grad_Gelems_per_s = S(start.bias_grad_Gelems_per_s.value * 0.4);
  return p;
}

// The ops one step of `m` runs (tp 1, microbatch 4, the layers' calls), as runtime/model's
// layers name them, each timed at its price on `machine`: an op table with no noise.
std::vector<MeasuredOp> Step(const ModelSpec& m, const HardwareProfile& machine,
                             bool attention = true) {
  const int64_t b = 4, n = b * m.seq_len, h = m.hidden, f = m.FfnHidden();
  const int64_t v = PaddedVocab(m, 1);
  std::vector<std::pair<std::string, std::vector<int64_t>>> ops;
  // QKV, projection, fc1 (the GeLU in its epilogue), fc2 (its dGeLU), logits: n x c x oc.
  const std::vector<std::vector<int64_t>> linears = {
      {n, h, 3 * h}, {n, h, h}, {n, h, f}, {n, f, h}, {n, h, v}};
  for (size_t i = 0; i < linears.size(); ++i) {
    ops.push_back({i == 2 ? "LinearForward+GeLU" : "LinearForward", linears[i]});
    ops.push_back({i == 3 ? "LinearBackwardData+dGeLU" : "LinearBackwardData", linears[i]});
    ops.push_back({"LinearBackwardWeight", linears[i]});
  }
  if (attention) {
    ops.push_back({"AttentionForward", {b, m.seq_len, m.heads, m.HeadDim()}});
    ops.push_back({"AttentionBackward", {b, m.seq_len, m.heads, m.HeadDim()}});
  }
  ops.push_back({"AdamW", {}});  // no per-op price: left out of every fit
  std::vector<MeasuredOp> out;
  for (const auto& [name, dims] : ops) {
    const auto price = PriceOp(name, dims, m, machine);
    const double us = price ? price->seconds * 1e6 : 123.0;
    out.push_back({name, dims, name.rfind("Linear", 0) == 0 ? double(m.layers) : 1.0, us});
  }
  return out;
}

double Figure(const OpTimesFit& fit, const std::string& name) {
  for (const FittedFigure& f : fit.figures) {
    if (f.name == name) return f.after;
  }
  return -1;
}

// Priced with rates at known multiples of the start's, the table gives them back within 1%.
TEST(CalibrateOps, RecoversTheRatesItWasPricedWith) {
  for (const double dropout : {0.1, 0.0}) {
    const ModelSpec m = Gpt(dropout);
    const HardwareProfile start = Start(), truth = Truth(start);
    const auto fit = CalibrateFromOpTimes(Step(m, truth), m, start, "ops.txt");
    ASSERT_TRUE(fit.ok()) << fit.status().ToString();
    const HardwareProfile& p = fit->profile;
    EXPECT_NEAR(fit->gemm.gemm_forward * 1.27, 1, 0.01);
    EXPECT_NEAR(fit->gemm.gemm_backward * 1.4, 1, 0.01);
    EXPECT_NEAR(FusedAttentionTflops(m, p) / FusedAttentionTflops(m, truth), 1, 0.01);
    // Only the rate the model uses moves.
    EXPECT_EQ(dropout > 0 ? p.attention_tflops.value : p.attention_dropout_tflops.value,
              dropout > 0 ? start.attention_tflops.value : start.attention_dropout_tflops.value);
    EXPECT_NEAR(p.gelu_epilogue_Gelems_per_s.value / truth.gelu_epilogue_Gelems_per_s.value, 1,
                0.01);
    EXPECT_NEAR(p.dgelu_epilogue_Gelems_per_s.value / truth.dgelu_epilogue_Gelems_per_s.value, 1,
                0.01);
    EXPECT_NEAR(p.bias_grad_Gelems_per_s.value / truth.bias_grad_Gelems_per_s.value, 1, 0.01);
    EXPECT_TRUE(fit->kept.empty()) << fit->kept.front();
    // Each fitted figure says where it came from; the fitted multiples count their ops (per
    // layer: QKV, projection, fc2 and logits forward; 4 input gradients and 3 weight gradients).
    EXPECT_NE(p.bias_grad_Gelems_per_s.source.find("ops.txt: "), std::string::npos);
    EXPECT_NE(p.gemm.source.find("ops.txt: every entry x"), std::string::npos);
    ASSERT_EQ(fit->figures.front().instructions, 4);
    EXPECT_EQ(fit->figures[1].instructions, 7);
  }
}

// Without attention ops the attention rates stay as they were, and the fit says so.
TEST(CalibrateOps, NoAttentionOpsKeepTheAttentionRate) {
  const ModelSpec m = Gpt(0.1);
  const HardwareProfile start = Start();
  const auto fit = CalibrateFromOpTimes(Step(m, Truth(start), false), m, start, "ops.txt");
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_EQ(fit->profile.attention_dropout_tflops.value, 30);
  EXPECT_EQ(fit->profile.attention_dropout_tflops.source, "test");
  EXPECT_EQ(Figure(*fit, "attention_dropout_tflops"), -1);
  ASSERT_EQ(fit->kept.size(), 1u);
  EXPECT_EQ(fit->kept[0],
            "attention_dropout_tflops: kept, the table has no attention op with a measured time");
}

// Ops no slower than their GEMMs leave the epilogue rates; a profile that had neither GeLU rate
// does not get one alone (the profile holds both or neither).
TEST(CalibrateOps, EpilogueRatesOnlyFromTimeBesideTheGemms) {
  const ModelSpec m = Gpt(0.1);
  const HardwareProfile truth = Truth(Start());
  HardwareProfile start = Start();
  start.gelu_epilogue_Gelems_per_s = start.dgelu_epilogue_Gelems_per_s = Sourced{};
  std::vector<MeasuredOp> ops = Step(m, truth);
  for (MeasuredOp& op : ops) {  // the dGeLU op faster than its GEMM alone
    if (op.op == "LinearBackwardData+dGeLU") {
      op.us_per_call = 0.99e6 * GemmBackwardDataTime(truth, op.dims[0], op.dims[2], op.dims[1]);
    }
  }
  const auto fit = CalibrateFromOpTimes(ops, m, start, "ops.txt");
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_EQ(fit->profile.gelu_epilogue_Gelems_per_s.value, 0);
  EXPECT_EQ(fit->profile.dgelu_epilogue_Gelems_per_s.value, 0);
  ASSERT_EQ(fit->kept.size(), 2u);
  EXPECT_NE(fit->kept[0].find("gelu_epilogue_Gelems_per_s: kept, fitted "), std::string::npos)
      << fit->kept[0];
  EXPECT_EQ(fit->kept[1],
            "dgelu_epilogue_Gelems_per_s: kept, its ops ran no slower than their GEMMs at the "
            "fitted multiples");
  EXPECT_GT(fit->profile.bias_grad_Gelems_per_s.value, 0);  // the others are still fitted
}

// A table of another model, or with nothing to fit, is refused in one line naming the op.
TEST(CalibrateOps, RefusesAnotherModelsTable) {
  const HardwareProfile start = Start();
  ModelSpec other = Gpt(0.1);
  other.hidden = 128;
  const auto fit = CalibrateFromOpTimes(Step(other, start), Gpt(0.1), start, "ops.txt");
  ASSERT_FALSE(fit.ok());
  EXPECT_EQ(fit.status().message(),
            "LinearForward 128x128x384 is not an op of the plan's model tiny (tokens a multiple "
            "of s 32, hidden 64 on one side)");
  const auto none = CalibrateFromOpTimes({{"AdamW", {}, 1, 5}}, Gpt(0.1), start, "ops.txt");
  EXPECT_EQ(none.status().message(),
            "the op table has no Linear or attention op with a shape to fit");
}

}  // namespace
}  // namespace ptdp::costmodel
