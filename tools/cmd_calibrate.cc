// `ptdp calibrate --plan P --measured B.trace.json --out profile.json [--profile start]`: fits the
// profile's effective figures (GEMM throughput forward and backward, memory-bound bandwidth,
// launch cost, each link class's bandwidth) to a measured run of the plan (costmodel/calibrate.h)
// and writes the fitted profile with a "calibration" block naming the run. Wiring only.
#include <sys/stat.h>

#include <cstdio>
#include <ctime>
#include <string>

#include "core/cluster.h"
#include "core/hardware.h"
#include "core/json.h"
#include "core/plan_file.h"
#include "core/timeline.h"
#include "costmodel/calibrate.h"
#include "schedule/schedule.h"
#include "tools/common.h"

namespace ptdp::tools {
namespace {

struct CalibrateArgs {
  std::string plan, measured, out, profile;
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

OrderedJson CalibrationBlock(const CalibrateArgs& a, const PlanFile& plan, const ClusterSpec& start,
                             const Timeline& measured, const costmodel::CalibrationResult& r,
                             const std::string& now) {
  OrderedJson j;
  j["tool"] = "ptdp calibrate";
  j["date"] = now;
  j["plan"] = a.plan;
  j["model"] = plan.model.name;
  j["layout"] = plan.layout.ToString();
  j["gpus"] = plan.cluster.gpus;
  j["trace"] = a.measured;
  j["trace_source"] = measured.source;
  j["trace_modified"] = ModifiedTime(a.measured);
  j["start_profile"] = start.name;
  j["method"] =
      "least squares on log time over the forward, backward and optimizer-step classes' "
      "quantile " +
      std::to_string(a.quantile) +
      " (GEMM throughput forward and backward, memory-bound bandwidth); link bandwidths from "
      "the receives' quantile and the fastest reduce-grads of each link class (docs/compare.md)";
  j["quantile"] = a.quantile;
  OrderedJson figures = OrderedJson::array();
  for (const auto& f : r.figures) {
    figures.push_back({{"figure", f.name},
                       {"before", f.before},
                       {"after", f.after},
                       {"unit", f.unit},
                       {"instructions", f.instructions}});
  }
  j["fitted"] = std::move(figures);
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

void PrintReport(const costmodel::CalibrationResult& r, const std::string& out) {
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
  std::printf("wrote %s\n", out.c_str());
}

Status RunCalibrate(const CalibrateArgs& a) {
  if (!(a.quantile > 0 && a.quantile <= 1)) {
    return Status::Invalid("--quantile: must be in (0, 1], got " + std::to_string(a.quantile));
  }
  PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--plan", a.plan));
  PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--measured", a.measured));
  Result<PlanFile> plan_or = ReadPlanFile(a.plan);
  if (!plan_or.ok()) return plan_or.status().WithPrefix("--plan");
  const PlanFile& plan = *plan_or;
  const std::string start_name = a.profile.empty() ? plan.cluster.name : a.profile;
  if (!a.profile.empty()) PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--profile", a.profile));
  Result<ClusterSpec> cluster_or = LoadCluster(start_name, plan.cluster.gpus);
  if (!cluster_or.ok()) {
    return cluster_or.status().WithPrefix(a.profile.empty() ? a.plan + ": cluster" : "--profile");
  }
  ClusterSpec& cluster = *cluster_or;
  PTDP_ASSIGN_OR_RETURN(cluster.software, PlanSoftware(plan));
  PTDP_RETURN_IF_ERROR(plan.layout.Validate(plan.model).WithPrefix(a.plan + ": layout"));
  if (plan.layout.WorldSize() != cluster.Gpus()) {
    return Status::Invalid(a.plan +
                           ": layout: tp * pp * dp = " + std::to_string(plan.layout.WorldSize()) +
                           " GPUs but the cluster has " + std::to_string(cluster.Gpus()));
  }
  PTDP_RETURN_IF_ERROR(schedule::CheckProgramMatchesLayout(plan.program, plan.model, plan.layout)
                           .WithPrefix(a.plan + ": program"));
  Result<Timeline> measured_or = ReadChromeTrace(a.measured);
  if (!measured_or.ok()) return measured_or.status().WithPrefix("--measured");
  const std::string now = UtcTime(std::time(nullptr));
  const std::string source = "ptdp calibrate " + now + ", fitted to " + a.measured + " (" +
                             measured_or->source + " trace of " + ModifiedTime(a.measured) +
                             ") of plan " + a.plan + " (" + plan.model.name + ", " +
                             plan.layout.ToString() + ")";
  Result<costmodel::CalibrationResult> r_or = costmodel::Calibrate(
      plan.model, cluster, plan.layout, plan.program, *measured_or, source, a.quantile);
  if (!r_or.ok()) return r_or.status().WithPrefix("--measured: " + a.measured);
  costmodel::CalibrationResult& r = *r_or;
  HardwareProfile& p = r.profile;
  const std::string suffix = "-calibrated";
  if (p.name.size() < suffix.size() ||
      p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    p.name += suffix;
  }
  p.about += " Calibrated by ptdp calibrate on " + now + " (see \"calibration\").";
  p.calibration = Json::parse(CalibrationBlock(a, plan, cluster, *measured_or, r, now).dump());
  // The file must read back with the strict reader (a figure fitted outside its range does not).
  const OrderedJson out = HardwareProfileToJson(p);
  const Result<HardwareProfile> back = HardwareProfileFromJson(Json::parse(out.dump()), a.out);
  if (!back.ok()) return back.status().WithPrefix("the fitted profile is not valid");
  PTDP_RETURN_IF_ERROR(WriteFileAtomic(a.out, out.dump(1) + "\n").WithPrefix("--out"));
  PrintReport(r, a.out);
  return Status::Ok();
}

}  // namespace

void RegisterCalibrate(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<CalibrateArgs>();
  auto* cmd = app.add_subcommand("calibrate",
                                 "Fit a profile's effective figures to a measured run of a plan");
  cmd->add_option("--plan", a->plan, "The plan file the run executed")->required();
  cmd->add_option("--measured", a->measured, "ptdp train --trace output of that plan")->required();
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
