#include "costmodel/calibrate_ops.h"

#include <cstdio>

#include "core/checked.h"
#include "core/units.h"
#include "costmodel/layer_cost.h"

namespace ptdp::costmodel {
namespace {

std::string Label(const MeasuredOp& op) {
  std::string s = op.op;
  for (size_t i = 0; i < op.dims.size(); ++i) s += (i ? "x" : " ") + std::to_string(op.dims[i]);
  return s;
}

bool IsAttention(const MeasuredOp& op) {
  return op.op == "AttentionForward" || op.op == "AttentionBackward";
}

// Per step, seconds: what the cost model charges and what was measured, over how many rows.
struct Sum {
  double priced = 0, measured = 0;
  int64_t ops = 0;
};

// An op table of another model would fit rates to shapes the plan never runs: every Linear of the
// model's layers has the hidden size on one side and a multiple of the sequence as its tokens, and
// its attention the model's sequence length, head dimension and a divisor of its heads.
Status CheckOfModel(const MeasuredOp& op, const ModelSpec& m) {
  const std::vector<int64_t>& d = op.dims;
  std::string why;
  if (IsAttention(op)) {
    if (d[1] != m.seq_len || d[3] != m.HeadDim() || m.heads % d[2] != 0) {
      why = "s " + std::to_string(m.seq_len) + ", head dim " + std::to_string(m.HeadDim()) + ", " +
            std::to_string(m.heads) + " heads";
    }
  } else if (d[0] % m.seq_len != 0 || (d[1] != m.hidden && d[2] != m.hidden)) {
    why = "tokens a multiple of s " + std::to_string(m.seq_len) + ", hidden " +
          std::to_string(m.hidden) + " on one side";
  }
  if (why.empty()) return Status::Ok();
  return Status::Invalid(Label(op) + " is not an op of the plan's model " + m.name + " (" + why +
                         ")");
}

// Sets `f` to `value` and says so in its source, naming the starting figure where there was one.
void Set(Sourced* f, double value, const std::string& source, const std::string& how) {
  const std::string was = f->source.empty() ? "absent" : FormatDouble(f->value) + ", " + f->source;
  *f = Sourced{value, source + ": " + how + " (starting figure: " + was + ")"};
}

// The GEMM multiples from the ops that run a GEMM alone, priced at `start`; their launch cost
// is the profile's and stays out of both sums.
void FitGemms(const std::vector<MeasuredOp>& ops, const ModelSpec& model,
              const HardwareProfile& start, const std::string& source, OpTimesFit* fit) {
  const double launch = start.kernel_launch_us.value * kUs;
  Sum dir[2];  // forward, backward
  for (const MeasuredOp& op : ops) {
    const auto price = PriceOp(op.op, op.dims, model, start);
    if (!price || IsAttention(op) || price->extra != OpExtra::kNone) continue;
    Sum& s = dir[price->backward ? 1 : 0];
    s.priced += op.calls_per_step * (price->gemm - launch);
    s.measured += op.calls_per_step * (op.us_per_call * kUs - launch);
    ++s.ops;
  }
  const char* names[2] = {"gemm (forward throughput, multiple)",
                          "backward GEMM throughput (multiple)"};
  double* multiple[2] = {&fit->gemm.gemm_forward, &fit->gemm.gemm_backward};
  for (int i = 0; i < 2; ++i) {
    if (dir[i].ops == 0 || !(dir[i].measured > 0) || !(dir[i].priced > 0)) {
      fit->kept.push_back(std::string(names[i]) + ": kept, the table has no " +
                          (i ? "backward" : "forward") + " GEMM op timed above its launch");
      continue;
    }
    *multiple[i] = dir[i].priced / dir[i].measured;
    fit->figures.push_back({names[i], 1, *multiple[i], "x", dir[i].ops});
  }
  fit->profile = ApplyCalibration(start, fit->gemm, source);
}

// The attention ops' FLOPs (FusedAttentionCost's count, through PriceOp at 1 TFLOP/s) over their
// measured time, written where FusedAttentionTflops reads the model's rate.
void FitAttention(const std::vector<MeasuredOp>& ops, const ModelSpec& model,
                  const std::string& source, OpTimesFit* fit) {
  HardwareProfile unit = fit->profile;
  unit.attention_table = AttentionTable{};
  unit.attention_tflops = unit.attention_dropout_tflops = Sourced{1.0, "unit"};
  Sum s;  // priced: FLOPs / 1e12
  for (const MeasuredOp& op : ops) {
    if (!IsAttention(op)) continue;
    s.priced += op.calls_per_step * PriceOp(op.op, op.dims, model, unit)->seconds;
    s.measured += op.calls_per_step * op.us_per_call * kUs;
    ++s.ops;
  }
  HardwareProfile& p = fit->profile;
  const bool dropout = model.dropout > 0;
  const std::string key = dropout ? "attention_dropout_tflops" : "attention_tflops";
  if (s.ops == 0 || !(s.measured > 0)) {
    fit->kept.push_back(key + ": kept, the table has no attention op with a measured time");
    return;
  }
  // Both the whole device's (the unit profile keeps a device_share, so `rate` is too).
  const double rate = s.priced / s.measured,
               before = FusedAttentionTflops(model, p) * p.DeviceCopies();
  const std::string how = FormatDouble(s.priced) + " TFLOP (causal count) a step over " +
                          FormatDouble(s.measured) + " s, " + std::to_string(s.ops) +
                          " attention ops";
  AttentionTable& t = p.attention_table;
  if (!t.empty() && (!dropout || t.HasDropout())) {
    // The table prices this model: its rates of that kind, all scaled by one multiple.
    for (double& r : dropout ? t.dropout_tflops : t.tflops) r *= rate / before;
    t.source = source + ": every " + (dropout ? "dropout " : "") + "rate x " +
               FormatDouble(rate / before) + ", " + how + " (starting table: " + t.source + ")";
    fit->figures.push_back({std::string("attention_table (") + (dropout ? "dropout " : "") +
                                "rate at the model's s, d)",
                            before, rate, "TFLOP/s", s.ops});
    return;
  }
  if (dropout && !(p.attention_tflops.value > 0)) {
    fit->kept.push_back(key + ": kept, the profile has no attention_tflops, which it needs");
    return;
  }
  if (rate > 1e5) {
    fit->kept.push_back(key + ": kept, " + FormatDouble(rate) + " TFLOP/s is out of range");
    return;
  }
  Set(dropout ? &p.attention_dropout_tflops : &p.attention_tflops, rate, source, how);
  fit->figures.push_back({key, before, rate, "TFLOP/s", s.ops});
}

// One rate beside the GEMMs: its ops' elements over their time less their GEMMs at the fitted
// multiples. False (with the reason in `why`) where it cannot be fitted.
bool EpilogueRate(const std::vector<MeasuredOp>& ops, const ModelSpec& model,
                  const HardwareProfile& fitted, OpExtra extra, double* rate, int64_t* count,
                  std::string* how, std::string* why) {
  double elements = 0, beside = 0;
  *count = 0;
  for (const MeasuredOp& op : ops) {
    if (IsAttention(op)) continue;
    const auto price = PriceOp(op.op, op.dims, model, fitted);
    if (!price || price->extra != extra) continue;
    elements += op.calls_per_step * price->extra_elements;
    beside += op.calls_per_step * (op.us_per_call * kUs - price->gemm);
    ++*count;
  }
  if (*count == 0) return *why = "the table has no op that runs it", false;
  if (!(beside > 0)) {
    return *why = "its ops ran no slower than their GEMMs at the fitted multiples", false;
  }
  *rate = elements / beside / 1e9;
  if (*rate > kMaxEpilogueGelemsPerSecond)
    return *why = FormatDouble(*rate) + " is out of range", false;
  *how = FormatDouble(elements) + " elements a step in " + FormatDouble(beside) +
         " s beside the GEMMs of " + std::to_string(*count) + " ops";
  return true;
}

void FitEpilogues(const std::vector<MeasuredOp>& ops, const ModelSpec& model,
                  const std::string& source, OpTimesFit* fit) {
  HardwareProfile& p = fit->profile;
  struct Key {
    const char* name;
    OpExtra extra;
    Sourced* figure;
  };
  const Key keys[3] = {
      {"gelu_epilogue_Gelems_per_s", OpExtra::kGeluEpilogue, &p.gelu_epilogue_Gelems_per_s},
      {"dgelu_epilogue_Gelems_per_s", OpExtra::kDgeluEpilogue, &p.dgelu_epilogue_Gelems_per_s},
      {"bias_grad_Gelems_per_s", OpExtra::kBiasGrad, &p.bias_grad_Gelems_per_s}};
  double rate[3] = {0, 0, 0};
  int64_t count[3] = {0, 0, 0};
  std::string how[3], why[3];
  bool ok[3];
  for (int i = 0; i < 3; ++i) {
    ok[i] = EpilogueRate(ops, model, p, keys[i].extra, &rate[i], &count[i], &how[i], &why[i]);
  }
  // The profile holds the two GeLU epilogue rates both or neither (core/hardware.cc).
  const bool had_gelu = !p.gelu_epilogue_Gelems_per_s.source.empty();
  if (!had_gelu && ok[0] != ok[1]) {
    const int fitted = ok[0] ? 0 : 1;
    ok[fitted] = false;
    why[fitted] = std::string("fitted ") + FormatDouble(rate[fitted]) +
                  ", but the profile has neither " +
                  "GeLU epilogue rate and the other could not be fitted";
  }
  for (int i = 0; i < 3; ++i) {
    if (!ok[i]) {
      fit->kept.push_back(std::string(keys[i].name) + ": kept, " + why[i]);
      continue;
    }
    const double before = keys[i].figure->value;
    Set(keys[i].figure, rate[i], source, how[i]);
    fit->figures.push_back({keys[i].name, before, rate[i], "G elems/s", count[i]});
  }
}

}  // namespace

Result<OpTimesFit> CalibrateFromOpTimes(const std::vector<MeasuredOp>& ops, const ModelSpec& model,
                                        const HardwareProfile& start, const std::string& source) {
  int64_t priced = 0;
  for (const MeasuredOp& op : ops) {
    if (!PriceOp(op.op, op.dims, model, start)) continue;
    PTDP_RETURN_IF_ERROR(CheckOfModel(op, model));
    ++priced;
  }
  if (priced == 0) {
    return Status::Invalid("the op table has no Linear or attention op with a shape to fit");
  }
  OpTimesFit fit;
  FitGemms(ops, model, start, source, &fit);
  FitAttention(ops, model, source, &fit);
  FitEpilogues(ops, model, source, &fit);
  return fit;
}

}  // namespace ptdp::costmodel
