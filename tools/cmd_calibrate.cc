// `ptdp calibrate --plan P --measured B.trace.json --out profile.json [--profile start]
// [--op-times OPS.txt]`: fits the profile's effective figures (GEMM throughput forward and
// backward, memory-bound bandwidth, launch cost, each link class's bandwidth) to a measured run of
// the plan (costmodel/calibrate.h) and, from an op table of a run of the plan's model, the rates a
// trace cannot separate (attention, the GeLU epilogues, the bias gradient; and then the GEMMs:
// costmodel/calibrate_ops.h); writes the fitted profile with a "calibration" block naming the run
// and the table. Wiring only.
#include <sys/stat.h>

#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/hardware.h"
#include "core/json.h"
#include "core/plan_file.h"
#include "core/timeline.h"
#include "costmodel/calibrate.h"
#include "costmodel/calibrate_ops.h"
#include "schedule/schedule.h"
#include "tools/common.h"
#include "tools/op_times_compare.h"

namespace ptdp::tools {
namespace {

struct CalibrateArgs {
  std::vector<std::string> plans, measured;  // one trace per plan, in order
  std::string out, profile;
  std::string op_times;   // a `ptdp train --op-times` table of a run of the first plan's model
  double quantile = 0.5;  // of each class's measured durations, the one the fit matches
};

std::string UtcTime(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// When the file was last written ("unknown" when stat fails).
std::string ModifiedTime(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? UtcTime(st.st_mtime) : "unknown";
}

// A measured run as the command line gave it, loaded.
struct LoadedRun {
  std::string plan_path, trace_path;
  PlanFile plan;
  ClusterSpec cluster;
  Timeline measured;
};

// What the calibration block says of one run.
void DescribeRun(const LoadedRun& r, OrderedJson* j) {
  (*j)["plan"] = r.plan_path;
  (*j)["model"] = r.plan.model.name;
  (*j)["layout"] = r.plan.layout.ToString();
  (*j)["gpus"] = r.plan.cluster.gpus;
  if (r.trace_path.empty()) return;  // an op table alone (--op-times without --measured)
  (*j)["trace"] = r.trace_path;
  (*j)["trace_source"] = r.measured.source;
  (*j)["trace_modified"] = ModifiedTime(r.trace_path);
}

OrderedJson FiguresJson(const std::vector<costmodel::FittedFigure>& fitted, const char* count) {
  OrderedJson figures = OrderedJson::array();
  for (const auto& f : fitted) {
    figures.push_back({{"figure", f.name},
                       {"before", f.before},
                       {"after", f.after},
                       {"unit", f.unit},
                       {count, f.instructions}});
  }
  return figures;
}

// What the calibration block says of the op table and what was fitted from it.
void DescribeOpTimes(const std::string& path, const costmodel::OpTimesFit& fit, OrderedJson* j) {
  (*j)["op_times"] = path;
  (*j)["op_times_modified"] = ModifiedTime(path);
  (*j)["op_times_method"] =
      "each rate from the ops that carry it, priced by the cost model's own functions "
      "(costmodel/calibrate_ops.h): GEMM multiples from the Linear ops that run a GEMM alone, "
      "attention FLOPs over time, epilogue and bias-gradient elements over the time beside "
      "their GEMMs";
  (*j)["op_times_fitted"] = FiguresJson(fit.figures, "ops");
  OrderedJson kept = OrderedJson::array();
  for (const std::string& k : fit.kept) kept.push_back(k);
  (*j)["op_times_kept"] = std::move(kept);
}

// `trace_fit` null: an op table alone; `op_fit` null: a trace alone.
OrderedJson CalibrationBlock(const CalibrateArgs& a, const std::vector<LoadedRun>& runs,
                             const std::string& start_name,
                             const costmodel::CalibrationResult* trace_fit,
                             const costmodel::OpTimesFit* op_fit, const std::string& now) {
  OrderedJson j;
  j["tool"] = "ptdp calibrate";
  j["date"] = now;
  DescribeRun(runs.front(), &j);  // the first run; "runs" lists them all when there are more
  if (runs.size() > 1) {
    OrderedJson list = OrderedJson::array();
    for (const LoadedRun& run : runs) {
      OrderedJson one;
      DescribeRun(run, &one);
      list.push_back(std::move(one));
    }
    j["runs"] = std::move(list);
  }
  j["start_profile"] = start_name;
  if (op_fit) DescribeOpTimes(a.op_times, *op_fit, &j);
  if (!trace_fit) return j;
  const costmodel::CalibrationResult& r = *trace_fit;
  j["method"] =
      "least squares on log time over the forward, backward and optimizer-step classes' "
      "quantile " +
      std::to_string(a.quantile) +
      " (GEMM throughput forward and backward, memory-bound bandwidth); link bandwidths from "
      "the receives' quantile and the fastest reduce-grads of each link class (docs/compare.md)" +
      std::string(op_fit ? "; the GEMM multiples from the op table's fit" : "");
  j["quantile"] = a.quantile;
  j["fitted"] = FiguresJson(r.figures, "instructions");
  j["compute_instructions"] = r.compute_instructions;
  j["median_relative_error_before"] = r.median_error_before;
  j["median_relative_error_after"] = r.median_error_after;
  j["rms_log_residual"] = r.rms_log_residual;
  OrderedJson ops = OrderedJson::array();
  for (const auto& o : r.by_op) {
    ops.push_back({{"op", OpName(o.op)},
                   {"count", o.count},
                   {"median_relative_error_before", o.before},
                   {"median_relative_error_after", o.after}});
  }
  j["by_op"] = std::move(ops);
  return j;
}

void PrintOpTimesReport(const costmodel::OpTimesFit& fit, const std::string& path) {
  std::printf("from the op table %s:\n%-58s %12s %12s %9s %5s\n", path.c_str(), "fitted figure",
              "before", "after", "unit", "ops");
  for (const auto& f : fit.figures) {
    std::printf("%-58s %12.6g %12.6g %9s %5lld\n", f.name.c_str(), f.before, f.after,
                f.unit.c_str(), static_cast<long long>(f.instructions));
  }
  for (const std::string& k : fit.kept) std::printf("  %s\n", k.c_str());
}

void PrintReport(const costmodel::CalibrationResult& r) {
  std::printf("%-58s %12s %12s %6s %6s\n", "fitted figure", "before", "after", "unit", "instrs");
  for (const auto& f : r.figures) {
    std::printf("%-58s %12.6g %12.6g %6s %6lld\n", f.name.c_str(), f.before, f.after,
                f.unit.c_str(), static_cast<long long>(f.instructions));
  }
  std::printf(
      "median |error| per instruction, before -> after (reduce-grads include waiting; "
      "receives are their transfers):\n");
  for (const auto& o : r.by_op) {
    std::printf("  %-15s %6lld  %7.1f%% -> %7.1f%%\n", OpName(o.op),
                static_cast<long long>(o.count), 100 * o.before, 100 * o.after);
  }
  std::printf(
      "compute instructions (%lld): median |error| %.1f%% -> %.1f%%; rms log residual "
      "%.4f after %d steps\n",
      static_cast<long long>(r.compute_instructions), 100 * r.median_error_before,
      100 * r.median_error_after, r.rms_log_residual, r.iterations);
}

// Loads the i-th --plan and --measured and the starting profile for the plan's GPUs.
Status LoadRun(const CalibrateArgs& a, size_t i, const std::string& start_name, LoadedRun* run) {
  run->plan_path = a.plans[i];
  if (i < a.measured.size()) run->trace_path = a.measured[i];
  PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--plan", run->plan_path));
  if (!run->trace_path.empty()) {
    PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--measured", run->trace_path));
  }
  Result<PlanFile> plan_or = ReadPlanFile(run->plan_path);
  if (!plan_or.ok()) return plan_or.status().WithPrefix("--plan");
  run->plan = std::move(*plan_or);
  const PlanFile& plan = run->plan;
  const std::string& p = run->plan_path;
  if (a.profile.empty() && plan.cluster.name != start_name) {
    return Status::Invalid("--plan " + p + ": cluster " + plan.cluster.name +
                           " is not the first plan's " + start_name +
                           " (one machine per fit; give --profile)");
  }
  Result<ClusterSpec> cluster_or = LoadCluster(start_name, plan.cluster.gpus);
  if (!cluster_or.ok()) {
    return cluster_or.status().WithPrefix(a.profile.empty() ? p + ": cluster" : "--profile");
  }
  run->cluster = std::move(*cluster_or);
  PTDP_ASSIGN_OR_RETURN(run->cluster.software, PlanSoftware(plan));
  PTDP_RETURN_IF_ERROR(plan.layout.Validate(plan.model).WithPrefix(p + ": layout"));
  if (plan.layout.WorldSize() != run->cluster.Gpus()) {
    return Status::Invalid(p +
                           ": layout: tp * pp * dp = " + std::to_string(plan.layout.WorldSize()) +
                           " GPUs but the cluster has " + std::to_string(run->cluster.Gpus()));
  }
  PTDP_RETURN_IF_ERROR(schedule::CheckProgramMatchesLayout(plan.program, plan.model, plan.layout)
                           .WithPrefix(p + ": program"));
  if (run->trace_path.empty()) return Status::Ok();
  Result<Timeline> measured_or = ReadChromeTrace(run->trace_path);
  if (!measured_or.ok()) return measured_or.status().WithPrefix("--measured");
  run->measured = std::move(*measured_or);
  return Status::Ok();
}

Status CheckArgs(const CalibrateArgs& a) {
  if (!(a.quantile > 0 && a.quantile <= 1)) {
    return Status::Invalid("--quantile: must be in (0, 1], got " + std::to_string(a.quantile));
  }
  if (a.measured.empty() && a.op_times.empty()) {
    return Status::Invalid("--measured: one trace per --plan, or --op-times (neither given)");
  }
  if (a.measured.empty() && a.plans.size() != 1) {
    return Status::Invalid("--op-times: without --measured, one --plan (the op table's model)");
  }
  if (!a.measured.empty() && a.plans.size() != a.measured.size()) {
    return Status::Invalid("--measured: one trace per --plan, in order (" +
                           std::to_string(a.plans.size()) + " plans, " +
                           std::to_string(a.measured.size()) + " traces)");
  }
  if (!a.profile.empty()) PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--profile", a.profile));
  return Status::Ok();
}

// The op table's fit on `start` (costmodel/calibrate_ops.h), its sources naming the table.
Result<costmodel::OpTimesFit> FitOpTimes(const CalibrateArgs& a, const LoadedRun& run,
                                         const HardwareProfile& start, const std::string& now) {
  const std::string flag = "--op-times " + a.op_times;
  PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--op-times", a.op_times));
  Result<std::string> text_or = ReadTextFile(a.op_times);
  if (!text_or.ok()) return text_or.status().WithPrefix("--op-times");
  Result<std::vector<MeasuredOp>> ops_or = ParseOpTimes(*text_or);
  if (!ops_or.ok()) return ops_or.status().WithPrefix(flag);
  const std::string source = "ptdp calibrate " + now + ", fitted to the op table " + a.op_times +
                             " (of " + ModifiedTime(a.op_times) + ") of a run of " +
                             run.plan.model.name + " (plan " + run.plan_path + ")";
  Result<costmodel::OpTimesFit> fit_or =
      costmodel::CalibrateFromOpTimes(*ops_or, run.plan.model, start, source);
  if (!fit_or.ok()) return fit_or.status().WithPrefix(flag);
  return fit_or;
}

// The trace fit of every run on `start`.
Result<costmodel::CalibrationResult> FitTraces(const CalibrateArgs& a,
                                               const std::vector<LoadedRun>& runs,
                                               const HardwareProfile& start,
                                               const std::string& now) {
  std::string source = "ptdp calibrate " + now + ", fitted to ";
  std::vector<costmodel::CalibrationRun> fit_runs;
  for (size_t i = 0; i < runs.size(); ++i) {
    const LoadedRun& r = runs[i];
    source += (i ? " and " : "") + r.trace_path + " (" + r.measured.source + " trace of " +
              ModifiedTime(r.trace_path) + ") of plan " + r.plan_path + " (" + r.plan.model.name +
              ", " + r.plan.layout.ToString() + ")";
    fit_runs.push_back({&r.plan.model, r.cluster, r.plan.layout, &r.plan.program, &r.measured});
  }
  Result<costmodel::CalibrationResult> r_or =
      costmodel::Calibrate(fit_runs, start, source, a.quantile);
  if (!r_or.ok()) {
    return r_or.status().WithPrefix(runs.size() == 1 ? "--measured: " + runs[0].trace_path
                                                     : std::string("--measured"));
  }
  return r_or;
}

Status RunCalibrate(const CalibrateArgs& a) {
  PTDP_RETURN_IF_ERROR(CheckArgs(a));
  std::vector<LoadedRun> runs(a.plans.size());
  std::string start_name = a.profile;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (i == 0 && start_name.empty()) {
      Result<PlanFile> first = ReadPlanFile(a.plans[0]);
      if (first.ok()) start_name = first->cluster.name;
    }
    PTDP_RETURN_IF_ERROR(LoadRun(a, i, start_name, &runs[i]));
  }
  const std::string now = UtcTime(std::time(nullptr));
  // The op table first: the rates a trace cannot separate (attention, the epilogues), and GEMM
  // multiples. A trace then fits the GEMMs again from the table's: the traced run is the one to
  // predict, and an op table's run (each op synchronised, another run) need not share its
  // conditions (docs/op_times.md: held at the table's, a dry run's memory-bound hit its limit).
  std::optional<costmodel::OpTimesFit> op_fit;
  HardwareProfile p = runs.front().cluster.profile;
  if (!a.op_times.empty()) {
    PTDP_ASSIGN_OR_RETURN(op_fit, FitOpTimes(a, runs.front(), p, now));
    p = op_fit->profile;
  }
  std::optional<costmodel::CalibrationResult> trace_fit;
  if (!a.measured.empty()) {
    PTDP_ASSIGN_OR_RETURN(trace_fit, FitTraces(a, runs, p, now));
    p = trace_fit->profile;
  }
  const std::string suffix = "-calibrated";
  if (p.name.size() < suffix.size() ||
      p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    p.name += suffix;
  }
  p.about += " Calibrated by ptdp calibrate on " + now + " (see \"calibration\").";
  p.calibration = Json::parse(CalibrationBlock(a, runs, runs.front().cluster.name,
                                               trace_fit ? &*trace_fit : nullptr,
                                               op_fit ? &*op_fit : nullptr, now)
                                  .dump());
  // The file must read back with the strict reader (a figure fitted outside its range does not).
  const OrderedJson out = HardwareProfileToJson(p);
  const Result<HardwareProfile> back = HardwareProfileFromJson(Json::parse(out.dump()), a.out);
  if (!back.ok()) return back.status().WithPrefix("the fitted profile is not valid");
  PTDP_RETURN_IF_ERROR(WriteFileAtomic(a.out, out.dump(1) + "\n").WithPrefix("--out"));
  if (op_fit) PrintOpTimesReport(*op_fit, a.op_times);
  if (trace_fit) PrintReport(*trace_fit);
  std::printf("wrote %s\n", a.out.c_str());
  return Status::Ok();
}

}  // namespace

void RegisterCalibrate(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<CalibrateArgs>();
  auto* cmd = app.add_subcommand("calibrate",
                                 "Fit a profile's effective figures to a measured run of a plan");
  cmd->add_option("--plan", a->plans,
                  "The plan file the run executed (repeat, with one --measured each, to fit "
                  "several runs on one machine together)")
      ->required();
  cmd->add_option("--measured", a->measured,
                  "ptdp train --trace output of that plan, in order (optional with --op-times)");
  cmd->add_option(
      "--op-times", a->op_times,
      "ptdp train --op-times table of a run of the (first) plan's model: fits the "
      "attention, GeLU-epilogue and bias-gradient rates and the GEMM multiples (a trace "
      "fit then starts from these)");
  cmd->add_option("--out", a->out, "The fitted profile to write")->required();
  cmd->add_option("--profile", a->profile,
                  "Profile or cluster file to start from (default: the plan's cluster)");
  cmd->add_option("--quantile", a->quantile,
                  "Quantile of each instruction class's measured times the fit matches: 0.5 "
                  "(default, a machine of its own), 0.25 on a shared machine, whose noise only "
                  "adds time");
  cmd->callback([a, exit_code] {
    const Status s = RunCalibrate(*a);
    *exit_code = s.ok() ? 0 : Fail("calibrate", s);
  });
}

}  // namespace ptdp::tools
