#include "tools/op_times_compare.h"

#include <cstdio>
#include <sstream>

#include "costmodel/op_price.h"

namespace ptdp::tools {

namespace {

// "32768x2048x6144" -> {32768, 2048, 6144}; false if any part is not a positive integer.
bool ParseDims(const std::string& text, std::vector<int64_t>* dims) {
  dims->clear();
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, 'x')) {
    if (part.empty() || part.size() > 12 ||
        part.find_first_not_of("0123456789") != std::string::npos) {
      return false;
    }
    dims->push_back(std::stoll(part));
  }
  return !dims->empty();
}

}  // namespace

Result<std::vector<MeasuredOp>> ParseOpTimes(const std::string& text) {
  std::stringstream in(text);
  std::string line;
  int number = 0;
  bool in_table = false, ended = false;
  std::vector<MeasuredOp> ops;
  while (std::getline(in, line)) {
    ++number;
    if (!in_table) {
      in_table = line.rfind("op [shape]", 0) == 0;
      continue;
    }
    if (line.rfind("all ops", 0) == 0) {
      ended = true;
      break;
    }
    // name [shape] calls ms/step us/call share%
    std::stringstream fields(line);
    std::vector<std::string> f;
    for (std::string w; fields >> w;) f.push_back(w);
    const std::string where = "line " + std::to_string(number) + ": ";
    if (f.size() != 5 && f.size() != 6) {
      return Status::Invalid(where + "expected 'op [shape] calls ms/step us/call share', got '" +
                             line + "'");
    }
    MeasuredOp op;
    op.op = f[0];
    // "AdamW (multi-tensor)": TimedOps' note that the calls were fused into one launch
    // (runtime/backend/timed_ops.h) is part of the name, not a shape.
    if (f.size() == 6 && f[1].size() > 2 && f[1].front() == '(' && f[1].back() == ')') {
      op.op += " " + f[1];
    } else if (f.size() == 6 && !ParseDims(f[1], &op.dims)) {
      return Status::Invalid(where + "shape '" + f[1] + "' is not NxMx... positive integers");
    }
    const size_t at = f.size() - 4;
    try {
      op.calls_per_step = std::stod(f[at]);
      op.us_per_call = std::stod(f[at + 2]);
    } catch (const std::exception&) {
      return Status::Invalid(where + "calls or us/call is not a number");
    }
    if (!(op.calls_per_step > 0) || !(op.us_per_call >= 0)) {
      return Status::Invalid(where + "calls must be positive and us/call not negative");
    }
    ops.push_back(op);
  }
  if (!in_table) return Status::Invalid("no op table (no line starting 'op [shape]')");
  if (!ended) return Status::Invalid("the op table has no 'all ops' line (cut short?)");
  if (ops.empty()) return Status::Invalid("the op table has no rows");
  return ops;
}

std::string OpTimesComparisonText(const std::vector<MeasuredOp>& ops, const ModelSpec& model,
                                  const HardwareProfile& hw) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-44s %7s %12s %12s %9s\n", "op [shape]", "calls",
                "measured us", "priced us", "meas/price");
  out += line;
  double gemm_measured = 0, gemm_priced = 0, exact_measured = 0, exact_priced = 0, att_measured = 0,
         att_priced = 0, unpriced = 0;
  bool any_partial = false;
  for (const MeasuredOp& op : ops) {
    std::string shape;
    for (size_t i = 0; i < op.dims.size(); ++i) {
      if (i > 0) shape += 'x';
      shape += std::to_string(op.dims[i]);
    }
    const std::string label = op.op + (shape.empty() ? "" : " " + shape);
    const auto price = costmodel::PriceOp(op.op, op.dims, model, hw);
    const double measured_ms = op.calls_per_step * op.us_per_call / 1e3;
    if (!price) {
      unpriced += measured_ms;
      std::snprintf(line, sizeof(line), "%-44s %7.0f %12.1f %12s %9s\n", label.c_str(),
                    op.calls_per_step, op.us_per_call, "-", "-");
      out += line;
      continue;
    }
    const double priced_us = price->seconds * 1e6;
    const bool attention = op.op.rfind("Attention", 0) == 0;
    (attention ? att_measured : gemm_measured) += measured_ms;
    (attention ? att_priced : gemm_priced) += op.calls_per_step * priced_us / 1e3;
    if (!attention && !price->partial) {
      exact_measured += measured_ms;
      exact_priced += op.calls_per_step * priced_us / 1e3;
    }
    any_partial = any_partial || price->partial;
    std::snprintf(line, sizeof(line), "%-44s %7.0f %12.1f %12.1f %8.3f%s\n", label.c_str(),
                  op.calls_per_step, op.us_per_call, priced_us,
                  priced_us > 0 ? op.us_per_call / priced_us : 0.0, price->partial ? "*" : "");
    out += line;
  }
  const auto total = [&](const char* what, double measured, double priced) {
    std::snprintf(line, sizeof(line), "  %-50s %12.3f %12.3f %8.3f\n", what, measured, priced,
                  priced > 0 ? measured / priced : 0.0);
    out += line;
  };
  out += "per step, ms (measured, priced, measured / priced):\n";
  total("Linear GEMMs", gemm_measured, gemm_priced);
  total("  of which the ops priced whole (no *)", exact_measured, exact_priced);
  total("fused attention", att_measured, att_priced);
  std::snprintf(line, sizeof(line), "  %-50s %12.3f\n", "ops with no per-op price", unpriced);
  out += line;
  if (any_partial) {
    out += "* the op also runs work the price leaves out (a GeLU epilogue, a bias gradient)\n";
  }
  return out;
}

}  // namespace ptdp::tools
