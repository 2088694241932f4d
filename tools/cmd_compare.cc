// `ptdp compare --predicted A.trace.json --measured B.trace.json`: a prediction (ptdp simulate
// --trace) beside a measurement (ptdp train --trace) of the same Program, instruction by
// instruction (core/timeline_compare.h); `--svg` draws both on one time axis, predicted above.
// `ptdp compare --op-times OPS.txt --plan P.json [--cluster C]`: a `ptdp train --op-times` table
// beside the cost model's price of each GEMM and attention op (tools/op_times_compare.h).
#include <cstdio>
#include <string>

#include "core/cluster.h"
#include "core/json.h"
#include "core/plan_file.h"
#include "core/timeline.h"
#include "core/timeline_compare.h"
#include "simulator/gantt.h"
#include "tools/common.h"
#include "tools/op_times_compare.h"

namespace ptdp::tools {
namespace {

struct CompareArgs {
  std::string predicted, measured, svg;
  int top = 10;
  std::string op_times, plan, cluster;  // the op-table mode
};

// The value of the first height="..." attribute of an SVG document (GanttSvg writes it on its
// root).
double SvgHeight(const std::string& svg) {
  const size_t at = svg.find("height=\"");
  return at == std::string::npos ? 0.0 : std::stod(svg.substr(at + 8));
}

// The document without its XML declaration and with its root <svg> placed at `y`, so that it can
// sit inside another <svg>.
std::string NestedAt(const std::string& svg, double y) {
  std::string body = svg.rfind("<?xml", 0) == 0 ? svg.substr(svg.find('\n') + 1) : svg;
  if (body.rfind("<svg ", 0) == 0) body.insert(5, "y=\"" + std::to_string(y) + "\" ");
  return body;
}

std::string PairSvg(const Timeline& predicted, const Timeline& measured) {
  sim::GanttOptions o;
  o.axis_end_ns = std::max(predicted.EndNs(), measured.EndNs());
  o.title = "predicted (" + predicted.source + ")";
  const std::string top = sim::GanttSvg(predicted, o);
  o.title = "measured (" + measured.source + ")";
  const std::string bottom = sim::GanttSvg(measured, o);
  const double h1 = SvgHeight(top), h2 = SvgHeight(bottom);
  const std::string width = std::to_string(o.width_px + 110);
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
         "version=\"1.1\" width=\"" +
         width + "\" height=\"" + std::to_string(h1 + h2) + "\">\n" + NestedAt(top, 0) +
         NestedAt(bottom, h1) + "</svg>\n";
}

// The op-table mode: the plan gives the model (and, without --cluster, the profile).
Status RunCompareOpTimes(const CompareArgs& a) {
  if (a.plan.empty()) return Status::Invalid("--op-times: needs --plan (the run's plan file)");
  Result<PlanFile> plan_or = ReadPlanFile(a.plan, /*require_program=*/false);
  if (!plan_or.ok()) return plan_or.status().WithPrefix("--plan");
  const PlanFile& plan = *plan_or;
  const std::string profile_name = a.cluster.empty() ? plan.cluster.name : a.cluster;
  Result<ClusterSpec> cluster_or = LoadCluster(profile_name);
  if (!cluster_or.ok()) {
    return cluster_or.status().WithPrefix(a.cluster.empty() ? a.plan + ": cluster" : "--cluster");
  }
  Result<std::string> text_or = ReadTextFile(a.op_times);
  if (!text_or.ok()) return text_or.status().WithPrefix("--op-times");
  Result<std::vector<MeasuredOp>> ops_or = ParseOpTimes(*text_or);
  if (!ops_or.ok()) return ops_or.status().WithPrefix("--op-times " + a.op_times);
  std::printf("ptdp compare: op times %s against the cost model on profile %s (model %s of %s)\n%s",
              a.op_times.c_str(), cluster_or->profile.name.c_str(), plan.model.name.c_str(),
              a.plan.c_str(),
              OpTimesComparisonText(*ops_or, plan.model, cluster_or->profile).c_str());
  return Status::Ok();
}

Status RunCompare(const CompareArgs& a) {
  const bool traces = !a.predicted.empty() || !a.measured.empty();
  if (!a.op_times.empty()) {
    if (traces) return Status::Invalid("--op-times: not with --predicted/--measured (one mode)");
    return RunCompareOpTimes(a);
  }
  if (!a.plan.empty() || !a.cluster.empty()) {
    return Status::Invalid(std::string(a.plan.empty() ? "--cluster" : "--plan") +
                           ": only with --op-times");
  }
  if (a.predicted.empty() || a.measured.empty()) {
    return Status::Invalid(std::string(a.predicted.empty() ? "--predicted" : "--measured") +
                           ": required (or --op-times with --plan)");
  }
  if (a.top < 0 || a.top > 100000) {
    return Status::Invalid("--top: " + std::to_string(a.top) + " is outside 0..100000");
  }
  Result<Timeline> predicted_or = ReadChromeTrace(a.predicted);
  if (!predicted_or.ok()) return predicted_or.status().WithPrefix("--predicted");
  Result<Timeline> measured_or = ReadChromeTrace(a.measured);
  if (!measured_or.ok()) return measured_or.status().WithPrefix("--measured");
  const Timeline& predicted = *predicted_or;
  const Timeline& measured = *measured_or;
  PTDP_ASSIGN_OR_RETURN(const TimelineComparison c, CompareTimelines(predicted, measured, a.top));
  std::printf("ptdp compare: predicted %s (%s) against measured %s (%s)\n%s", a.predicted.c_str(),
              predicted.source.c_str(), a.measured.c_str(), measured.source.c_str(),
              ComparisonText(c).c_str());
  if (!a.svg.empty()) {
    PTDP_RETURN_IF_ERROR(WriteFileAtomic(a.svg, PairSvg(predicted, measured)).WithPrefix("--svg"));
  }
  return Status::Ok();
}

}  // namespace

void RegisterCompare(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<CompareArgs>();
  auto* cmd = app.add_subcommand(
      "compare", "A predicted and a measured trace of one Program, instruction by instruction");
  cmd->add_option("--predicted", a->predicted, "ptdp simulate --trace output");
  cmd->add_option("--measured", a->measured, "ptdp train --trace output");
  cmd->add_option("--svg", a->svg, "Write both Gantt charts on one time axis, predicted above");
  cmd->add_option("--top", a->top, "How many divergent instructions to list")
      ->capture_default_str();
  cmd->add_option("--op-times", a->op_times,
                  "A `ptdp train --op-times` output: each GEMM and attention op against its price");
  cmd->add_option("--plan", a->plan, "With --op-times: the plan the run trained (its model)");
  cmd->add_option("--cluster", a->cluster,
                  "With --op-times: price on this profile or cluster (default: the plan's)");
  cmd->callback([a, exit_code] {
    const Status s = RunCompare(*a);
    *exit_code = s.ok() ? 0 : Fail("compare", s);
  });
}

}  // namespace ptdp::tools
