// `ptdp simulate`: replay one iteration of a layout's Program with the cost model's CostTable on
// the event-driven simulator; print the iteration time, the bubble measured from the timeline,
// per-rank busy / idle / communication time and activation memory, and optionally write a Chrome
// trace and an SVG Gantt picture.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

#include "core/cluster.h"
#include "core/json.h"
#include "core/ledger.h"
#include "core/model.h"
#include "core/plan_file.h"
#include "core/shapes.h"
#include "core/timeline.h"
#include "costmodel/estimate.h"
#include "planner/fix.h"
#include "planner/search.h"
#include "planner/software_search.h"
#include "schedule/schedule.h"
#include "simulator/gantt.h"
#include "simulator/refine.h"
#include "tools/common.h"

namespace ptdp::tools {
namespace {

constexpr int kMaxBuckets = 4096;

// One rank's memory as `ptdp simulate` reports it.
struct RankMemory {
  MemoryLedger ledger;
  Bytes workspace = 0;
  Bytes Static() const { return ledger.weights + ledger.grads + ledger.optimizer + workspace; }
  Bytes Total() const { return ledger.TotalWithWorkspace() + workspace; }
};

struct SimulateArgs {
  std::string plan;
  std::string profile;  // with --plan: price it on this profile or cluster file instead
  std::string model = "gpt-1t";
  std::string cluster = "selene";
  int gpus = 0;
  int nodes = 0;
  int64_t global_batch = 0;
  std::string fix;
  std::string precision;  // empty: the cluster profile's
  std::string software;   // empty: the plan's, or without a plan megatron-core
  std::string trace;
  std::string svg;
  std::string format = "table";
  bool ideal = false;
  bool overlap = false;
  int buckets = 0;
};

// The layout to simulate: a plan file's, or the planner's best under --fix (the whole layout when
// --fix names all of it).
// `program`: a plan file's Program (what runs then), empty otherwise.
Status ResolveLayout(const SimulateArgs& a, ModelSpec* model, ClusterSpec* cluster,
                     ParallelConfig* layout, std::optional<Program>* program, std::string* origin) {
  if (!a.plan.empty()) {
    PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--plan", a.plan));
    PTDP_ASSIGN_OR_RETURN(PlanFile plan, ReadPlanFile(a.plan));
    *model = plan.model;
    if (!a.profile.empty()) PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--profile", a.profile));
    auto c = LoadCluster(a.profile.empty() ? plan.cluster.name : a.profile, plan.cluster.gpus);
    if (!c.ok())
      return c.status().WithPrefix(a.profile.empty() ? a.plan + ": cluster" : "--profile");
    *cluster = *c;
    PTDP_ASSIGN_OR_RETURN(cluster->software, PlanSoftware(plan));
    *layout = plan.layout;
    *program = std::move(plan.program);
    *origin = "plan file " + a.plan;
    return Status::Ok();
  }
  if (a.global_batch < 1)
    return Status::Invalid(
        "--global-batch: must be a positive number of sequences (or use --plan)");
  if (a.gpus == 0 && a.nodes == 0)
    return Status::Invalid("--gpus or --nodes: one is required (or use --plan)");
  PTDP_RETURN_IF_ERROR(planner::CheckSearchCounts(a.gpus, a.nodes, a.global_batch));
  PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--model", a.model));
  PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--cluster", a.cluster));
  PTDP_ASSIGN_OR_RETURN(*model, LoadModel(a.model));
  PTDP_ASSIGN_OR_RETURN(*cluster, LoadCluster(a.cluster, a.gpus, a.nodes));
  const std::string software = a.software.empty() ? kDefaultSoftware : a.software;
  PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--software", software));
  PTDP_ASSIGN_OR_RETURN(cluster->software, LoadSoftware(software));
  planner::SearchOptions o;
  o.global_batch = a.global_batch;
  o.keep = 1;
  planner::ApplySoftwareSearchDefaults(cluster->software, &o);
  PTDP_ASSIGN_OR_RETURN(o.fix, planner::ParseFix(a.fix));
  if (!a.precision.empty()) {
    PTDP_ASSIGN_OR_RETURN(o.precision, ParsePrecision(a.precision, "--precision"));
  }
  PTDP_ASSIGN_OR_RETURN(planner::SearchResult r, planner::Search(*model, *cluster, o));
  *layout = r.top.front().layout;
  *origin =
      a.fix.empty() ? "the planner's best layout" : "the planner's best layout with --fix " + a.fix;
  return Status::Ok();
}

Status RunSimulate(const SimulateArgs& a) {
  if (a.format != "table" && a.format != "json") {
    return Status::Invalid("--format: \"" + a.format + "\" is not table or json");
  }
  if (a.plan.empty() && !a.profile.empty()) {
    return Status::Invalid("--profile: only with --plan (otherwise --cluster names the profile)");
  }
  if (!a.plan.empty() && (!a.fix.empty() || a.global_batch != 0 || a.gpus != 0 || a.nodes != 0 ||
                          !a.precision.empty() || !a.software.empty())) {
    return Status::Invalid(
        "--plan: give either a plan file or the plan flags (--gpus, --global-batch, --fix, "
        "--precision, --software), not both");
  }
  // Capped: the simulator issues one collective per bucket per chunk.
  if (a.buckets < 0 || a.buckets > kMaxBuckets) {
    return Status::Invalid("--buckets: " + std::to_string(a.buckets) + " is outside 1.." +
                           std::to_string(kMaxBuckets));
  }
  ModelSpec model;
  ClusterSpec cluster;
  ParallelConfig layout;
  std::optional<Program> program;
  std::string origin;
  PTDP_RETURN_IF_ERROR(ResolveLayout(a, &model, &cluster, &layout, &program, &origin));

  sim::SimOptions so;
  so.record_timeline = !a.trace.empty() || !a.svg.empty();
  so.overlap_dp_allreduce = a.overlap;
  // A plan file's layout is checked here, before the cost model (which requires a valid one).
  PTDP_RETURN_IF_ERROR(layout.Validate(model).WithPrefix("layout"));
  PTDP_RETURN_IF_ERROR(CheckPrecision(cluster.profile, layout.precision));
  const std::string caveat = planner::PrecisionCaveat(cluster, layout.precision);
  if (!caveat.empty()) std::fprintf(stderr, "ptdp simulate: note: %s\n", caveat.c_str());
  if (layout.WorldSize() != cluster.Gpus()) {
    return Status::Invalid("layout: tp * pp * dp = " + std::to_string(layout.WorldSize()) +
                           " GPUs but the cluster has " + std::to_string(cluster.Gpus()));
  }
  // A plan's Program runs as written, once shown to be the one its layout gives.
  if (program) {
    PTDP_RETURN_IF_ERROR(schedule::CheckProgramMatchesLayout(*program, model, layout)
                             .WithPrefix(a.plan + ": program"));
  }
  const auto t0 = std::chrono::steady_clock::now();
  costmodel::CostTable table = costmodel::BuildCostTable(model, cluster, layout);
  if (a.buckets > 0) table.dp_buckets = a.buckets;
  PTDP_ASSIGN_OR_RETURN(sim::LayoutSimulation s,
                        sim::SimulateLayout(model, cluster, layout, so, a.ideal, &table,
                                            program ? &*program : nullptr));
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const sim::SimResult& r = s.result;

  // Throughput as `ptdp plan` computes it, from the simulated iteration time.
  costmodel::Prediction pred = costmodel::Predict(model, cluster, layout, table);
  const Seconds closed_form_s = pred.iteration_s;
  pred.iteration_s = ToSeconds(r.iteration_ns);
  costmodel::SetThroughput(model, cluster, layout, &pred);
  // Memory per rank: the ledger's walk of the Program (core/ledger.h) with the runtime's transient
  // buffers (PeakWorkspaceBytes), plus the profile's workspace.
  std::vector<RankMemory> memory;
  for (int r = 0; r < layout.pp; ++r) {
    memory.push_back(RankMemory{MemoryOf(model, layout, s.program, r),
                                Bytes(cluster.profile.workspace_GiB.value * kGiB)});
  }
  // Layers per rank (core/shapes.h's placement; they differ with uneven stages).
  const std::vector<int> layers = StageLayerCounts(model, layout);
  const int64_t m = layout.Microbatches();
  // The closed form the planner prices this schedule's bubble with, on the costs simulated, as a
  // share of the ideal compute m T: (p-1)/(v m) for GPipe, 1F1B and interleaved, the zero-bubble
  // paper's forms for ZB-H1/H2/V (for which (p-1)/(v m) does not hold).
  const costmodel::PipelineTime closed = costmodel::ClosedFormPipeline().Time(s.costs, layout);
  const double formula =
      closed.total > closed.bubble ? closed.bubble / (closed.total - closed.bubble) : 0;
  // The combined 1F1B's closed form (costmodel/closed_form.cc): the fill and drain at the
  // unpaired time T, one more chunk alone, over the paired steady state m P.
  const char* formula_name = layout.moe_a2a_overlap
                                 ? "((p-1) T + T - P)/(v m P), combined 1F1B"
                                 : costmodel::ClosedFormBubbleName(layout.schedule);
  const char* formula_scope = layout.schedule == ScheduleKind::kInterleaved && m % layout.pp != 0
                                  ? ", published for m % p == 0 only"
                              : layout.schedule == ScheduleKind::kZbV
                                  ? ", exact for W < B <= F, B <= 2W only"
                                  : "";

  if (!a.trace.empty()) PTDP_RETURN_IF_ERROR(WriteChromeTrace(r.timeline, a.trace));
  if (!a.svg.empty()) {
    sim::GanttOptions g;
    g.title = model.name + " " + layout.ToString() + (a.ideal ? " (ideal)" : "");
    PTDP_RETURN_IF_ERROR(WriteFileAtomic(a.svg, sim::GanttSvg(r.timeline, g)));
  }

  if (a.format == "json") {
    OrderedJson j;
    j["model"] = model.name;
    j["cluster"] = cluster.name;
    j["gpus"] = cluster.Gpus();
    j["global_batch"] = layout.global_batch;
    j["layout"] = LayoutToJson(layout);
    j["layout_from"] = origin;
    j["software"] = cluster.software.name;
    j["ideal"] = a.ideal;
    j["overlap_dp_allreduce"] = a.overlap;
    j["microbatches"] = m;
    j["iteration_s"] = ToSeconds(r.iteration_ns);
    j["pipeline_s"] = ToSeconds(r.pipeline_ns);
    j["closed_form_iteration_s"] = closed_form_s;
    j["bubble_fraction"] = r.bubble_fraction;
    j["bubble_fraction_of_total"] = r.bubble_fraction_of_total;
    j["bubble_fraction_formula"] = formula;
    j["bubble_formula"] = formula_name;
    j["tflops_per_gpu"] = pred.tflops_per_gpu;
    j["model_tflops_per_gpu"] = pred.model_tflops_per_gpu;
    j["percent_of_peak"] = pred.percent_of_peak;
    j["tokens_per_s"] = pred.tokens_per_s;
    OrderedJson peak = OrderedJson::array(), ranks = OrderedJson::array();
    for (size_t i = 0; i < r.ranks.size(); ++i) {
      const auto& rs = r.ranks[i];
      const RankMemory& mem = memory[i];
      peak.push_back(BytesToGiB(double(mem.ledger.activations)));
      OrderedJson rj;
      rj["pp_rank"] = i;
      rj["layers"] = layers[i];
      rj["compute_s"] = ToSeconds(rs.compute_ns);
      rj["idle_s"] = ToSeconds(rs.idle_ns);
      rj["bubble_fraction"] = rs.bubble_fraction;
      rj["p2p_s"] = ToSeconds(rs.p2p_ns);
      rj["recv_wait_s"] = ToSeconds(rs.recv_wait_ns);
      rj["allreduce_s"] = ToSeconds(rs.allreduce_ns);
      rj["optimizer_s"] = ToSeconds(rs.optimizer_ns);
      rj["peak_stashed"] = rs.peak_stashed;
      rj["peak_activation_GiB"] = BytesToGiB(double(mem.ledger.activations));
      rj["static_GiB"] = BytesToGiB(double(mem.Static()));
      rj["peak_memory_GiB"] = BytesToGiB(double(mem.Total()));
      rj["weights_bytes"] = mem.ledger.weights;
      rj["grads_bytes"] = mem.ledger.grads;
      rj["optimizer_bytes"] = mem.ledger.optimizer;
      rj["activations_bytes"] = mem.ledger.activations;
      rj["transient_bytes"] = mem.ledger.workspace;
      rj["workspace_bytes"] = mem.workspace;
      rj["total_bytes"] = mem.Total();
      ranks.push_back(std::move(rj));
    }
    j["peak_activation_GiB"] = std::move(peak);
    j["ranks"] = std::move(ranks);
    j["events"] = r.events;
    j["instructions"] = InstructionCount(s.program);
    j["simulated_seconds"] = wall_s;
    if (!a.trace.empty()) j["trace"] = a.trace;
    if (!a.svg.empty()) j["svg"] = a.svg;
    std::cout << j.dump(1) << "\n";
    return Status::Ok();
  }
  std::printf("%s on %d GPUs of %s, global batch %lld (layout: %s)\n", model.name.c_str(),
              cluster.Gpus(), cluster.name.c_str(), (long long)layout.global_batch, origin.c_str());
  std::printf("software: %s\n", cluster.software.name.c_str());
  std::printf("layout: %s, %lld microbatches%s%s\n", layout.ToString().c_str(), (long long)m,
              a.ideal ? ", IDEAL (free communication, equal stage costs)" : "",
              a.overlap ? ", data-parallel all-reduce overlapped" : "");
  std::printf("iteration        %10.4f s simulated (closed form %.4f s)\n",
              ToSeconds(r.iteration_ns), closed_form_s);
  std::printf("pipeline flush   %10.4f s\n", ToSeconds(r.pipeline_ns));
  std::printf(
      "bubble           %10.4f of ideal compute (closed form %s = %.4f%s); %.4f of the "
      "pipeline time\n",
      r.bubble_fraction, formula_name, formula, formula_scope, r.bubble_fraction_of_total);
  std::printf(
      "throughput       %10.1f TFLOP/s per GPU (%.1f%% of peak; MFU %.1f%%), %.0f tokens/s\n",
      pred.tflops_per_gpu, pred.percent_of_peak, pred.model_flops_utilization, pred.tokens_per_s);
  std::printf("\n%5s %6s %10s %10s %8s %10s %10s %10s %8s %9s %9s %9s\n", "rank", "layers",
              "compute_s", "idle_s", "bubble", "p2p_s", "wait_s", "allred_s", "stashed", "act_GiB",
              "static_GiB", "peak_GiB");
  for (size_t i = 0; i < r.ranks.size(); ++i) {
    const auto& rs = r.ranks[i];
    std::printf("%5zu %6d %10.4f %10.4f %8.4f %10.4f %10.4f %10.4f %8d %9.2f %9.2f %9.2f\n", i,
                layers[i], ToSeconds(rs.compute_ns), ToSeconds(rs.idle_ns), rs.bubble_fraction,
                ToSeconds(rs.p2p_ns), ToSeconds(rs.recv_wait_ns), ToSeconds(rs.allreduce_ns),
                rs.peak_stashed, BytesToGiB(double(memory[i].ledger.activations)),
                BytesToGiB(double(memory[i].Static())), BytesToGiB(double(memory[i].Total())));
  }
  std::printf("\n%lld events, %lld instructions; program, costs and replay took %.3f s\n",
              (long long)r.events, (long long)InstructionCount(s.program), wall_s);
  if (!a.trace.empty()) std::printf("wrote %s\n", a.trace.c_str());
  if (!a.svg.empty()) std::printf("wrote %s\n", a.svg.c_str());
  return Status::Ok();
}

}  // namespace

void RegisterSimulate(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<SimulateArgs>();
  auto* cmd = app.add_subcommand(
      "simulate", "Replay one training iteration of a layout on the event-driven simulator");
  cmd->add_option("--plan", a->plan, "A plan file written by `ptdp plan --out`");
  cmd->add_option("--profile", a->profile,
                  "With --plan: price the plan on this profile or cluster file (a `ptdp "
                  "calibrate` output, say) instead of the plan's cluster, on as many GPUs");
  cmd->add_option(
         "--model", a->model,
         "Preset name, model JSON, or a Hugging Face config.json (GPT-2, Llama, Mistral, Qwen2)")
      ->capture_default_str();
  cmd->add_option("--software", a->software,
                  "Without --plan: the training stack (megatron-core, the default | "
                  "megatron-lm-2021 | ptdp | a software profile JSON); a plan brings its own");
  cmd->add_option("--cluster", a->cluster, "Cluster preset, profile JSON or cluster JSON")
      ->capture_default_str();
  cmd->add_option("--gpus", a->gpus, "Number of GPUs");
  cmd->add_option("--nodes", a->nodes, "Number of nodes (instead of --gpus)");
  cmd->add_option("--global-batch", a->global_batch, "Global batch size B in sequences");
  cmd->add_option("--fix", a->fix,
                  "Fix parts of the layout: tp=8,pp=64,mbs=1,vp=1,schedule=1f1b,...");
  cmd->add_option("--precision", a->precision,
                  "fp32 | bf16 | fp16 | fp8 (default: the cluster profile's); not with --plan");
  cmd->add_option("--trace", a->trace, "Write a Chrome trace (Perfetto, chrome://tracing)");
  cmd->add_option("--svg", a->svg, "Write an SVG Gantt picture of the schedule");
  cmd->add_option("--format", a->format, "table | json")->capture_default_str();
  cmd->add_flag("--ideal", a->ideal,
                "Free communication and equal per-stage costs: what the schedule alone costs");
  cmd->add_flag("--overlap-allreduce", a->overlap,
                "Overlap the data-parallel all-reduce with the last backwards, bucket by bucket");
  cmd->add_option(
      "--buckets", a->buckets,
      "With --overlap-allreduce: gradient buckets per model chunk (default: the cost model's)");
  cmd->callback([a, exit_code] {
    Status s = RunSimulate(*a);
    *exit_code = s.ok() ? 0 : Fail("simulate", s);
  });
}

}  // namespace ptdp::tools
