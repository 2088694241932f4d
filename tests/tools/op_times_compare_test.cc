#include "tools/op_times_compare.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/costmodel/test_profile.h"

namespace ptdp::tools {
namespace {

// What `ptdp train --op-times` prints (tools/train_report.cc), after the training log.
const char* kTable =
    " iteration      2/     3 | elapsed time per iteration (ms): 5.0\n"
    "op times, rank 0, per step (steps after the first; ...)\n"
    "op [shape]                                   calls    ms/step   us/call  share\n"
    "LinearForward 4096x3072x768                      2      1.000     500.0  50.0%\n"
    "AdamW                                           10      0.500      50.0  25.0%\n"
    "AttentionForward 4x128x2x32                      2      0.500     250.0  25.0%\n"
    "SumSquares (multi-tensor)                        1      0.100     100.0   5.0%\n"
    "all ops                                                 2.100\n";

TEST(OpTimes, ParsesTheTable) {
  auto ops = ParseOpTimes(kTable);
  ASSERT_TRUE(ops.ok()) << ops.status().ToString();
  ASSERT_EQ(ops->size(), 4u);
  EXPECT_EQ((*ops)[0].op, "LinearForward");
  EXPECT_EQ((*ops)[0].dims, (std::vector<int64_t>{4096, 3072, 768}));
  EXPECT_EQ((*ops)[0].calls_per_step, 2);
  EXPECT_EQ((*ops)[0].us_per_call, 500.0);
  EXPECT_TRUE((*ops)[1].dims.empty());
  EXPECT_EQ((*ops)[2].dims.size(), 4u);
  // A CUDA run's fused optimizer ops carry a note, not a shape (runtime/backend/timed_ops.h).
  EXPECT_EQ((*ops)[3].op, "SumSquares (multi-tensor)");
  EXPECT_TRUE((*ops)[3].dims.empty());
}

// A cut table, a bad shape and text without a table are refused, naming what is wrong.
TEST(OpTimes, RefusesMalformedTables) {
  const std::string table = kTable;
  const auto cut = ParseOpTimes(table.substr(0, table.find("all ops")));
  EXPECT_NE(cut.status().message().find("no 'all ops' line"), std::string::npos);
  std::string bad = table;
  bad.replace(bad.find("4096x3072x768"), 13, "4096xAx768");
  EXPECT_NE(ParseOpTimes(bad).status().message().find("line 4: shape '4096xAx768'"),
            std::string::npos);
  EXPECT_NE(ParseOpTimes("hello\n").status().message().find("no op table"), std::string::npos);
}

// The priced GEMM (2 x 4096 x 768 x 3072 at 100 TFLOP/s = 193.3 us, measured 500) and the
// unpriced AdamW land in their totals.
TEST(OpTimes, ComparisonTotals) {
  const auto ops = ParseOpTimes(kTable);
  ASSERT_TRUE(ops.ok());
  const std::string text =
      OpTimesComparisonText(*ops, testing::TinyModel(), testing::RoundProfile());
  EXPECT_NE(text.find("LinearForward 4096x3072x768"), std::string::npos) << text;
  EXPECT_NE(text.find("193.3"), std::string::npos) << text;
  EXPECT_NE(text.find("2.587"), std::string::npos) << text;  // 500 / 193.27
  EXPECT_NE(text.find("ops with no per-op price                                  0.600"),
            std::string::npos)
      << text;
}

// The fused ops: unpriced work (*) on a profile without the epilogue and bias-gradient rates,
// priced whole on one with them (costmodel/op_price.h), the footnote gone.
TEST(OpTimes, FusedOpsPricedWholeWithMeasuredRates) {
  const auto ops = ParseOpTimes(
      "op [shape]                                   calls    ms/step   us/call  share\n"
      "LinearForward+GeLU 4096x768x3072                 2      1.000     500.0  50.0%\n"
      "LinearBackwardWeight 4096x768x3072               2      1.000     500.0  50.0%\n"
      "all ops                                                 2.000\n");
  ASSERT_TRUE(ops.ok()) << ops.status().ToString();
  const char* footnote = "* the op also runs work the price leaves out";
  HardwareProfile hw = testing::RoundProfile();
  const std::string partial = OpTimesComparisonText(*ops, testing::TinyModel(), hw);
  EXPECT_NE(partial.find(footnote), std::string::npos) << partial;
  hw.gelu_epilogue_Gelems_per_s = {4.0, "test"};
  hw.dgelu_epilogue_Gelems_per_s = {2.0, "test"};
  hw.bias_grad_Gelems_per_s = {0.5, "test"};
  const std::string whole = OpTimesComparisonText(*ops, testing::TinyModel(), hw);
  EXPECT_EQ(whole.find(footnote), std::string::npos) << whole;
  // Both ops now count among those priced whole: their 2 ms a step (none without the rates).
  const auto whole_ms = [](const std::string& text) {
    const std::string label = "of which the ops priced whole (no *)";
    const size_t at = text.find(label);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + label.size()));
  };
  EXPECT_DOUBLE_EQ(whole_ms(whole), 2.0) << whole;
  EXPECT_DOUBLE_EQ(whole_ms(partial), 0.0) << partial;
}

}  // namespace
}  // namespace ptdp::tools
