// `ptdp train --adapt` and `--switch-plan` (tools/train_adapt.h): the re-planner on top of the
// runtime. It may use the cost model and the simulator; the runtime only measures and switches.
#include "tools/train_adapt.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/cluster.h"
#include "core/ledger.h"
#include "costmodel/estimate.h"
#include "runtime/comm/agree.h"
#include "schedule/schedule.h"
#include "simulator/simulator.h"

namespace ptdp::tools {
namespace {

void Scale(costmodel::ComputeBreakdown* b, double f) {
  b->gemm *= f;
  b->memory *= f;
  b->tp_comm *= f;
}

// The table with each pipeline rank's compute multiplied by its calibration factor. A straggler
// in one data-parallel replica paces the whole step (the gradient all-reduce waits for it), so
// the factor of a pipeline rank is its slowest rank's.
costmodel::CostTable Calibrated(costmodel::CostTable t, const std::vector<double>& scale) {
  for (int r = 0; r < t.pp; ++r) {
    for (int chunk = 0; chunk < t.vp; ++chunk) {
      costmodel::ChunkCost& c = t.chunks[static_cast<size_t>(r * t.vp + chunk)];
      Scale(&c.forward, scale[static_cast<size_t>(r)]);
      Scale(&c.backward, scale[static_cast<size_t>(r)]);
      Scale(&c.recompute, scale[static_cast<size_t>(r)]);
    }
  }
  return t;
}

// The simulated iteration of layout `c` with calibrated compute; an error when the layout cannot
// run here (its Program cannot be built, or a pipeline rank's ledger exceeds the memory limit).
Result<double> SimulatedStep(const PlanFile& p, const ClusterSpec& cluster, const ParallelConfig& c,
                             const std::vector<double>& scale, Bytes memory_limit) {
  PTDP_ASSIGN_OR_RETURN(Program program, schedule::BuildProgram(p.model, c));
  for (int r = 0; r < c.pp && memory_limit > 0; ++r) {
    if (MemoryOf(p.model, c, program, r).Total() > memory_limit) {
      return Status::DoesNotFit("over the memory limit");
    }
  }
  const costmodel::CostTable t = Calibrated(costmodel::BuildCostTable(p.model, cluster, c), scale);
  PTDP_ASSIGN_OR_RETURN(sim::SimResult res, sim::Simulate(program, t));
  return double(res.iteration_ns) * 1e-9;
}

// Layouts for the same GPUs: every microbatch size dividing B/d, with 1F1B, GPipe and each
// interleaving the model's layers allow; t, p, d, recomputation and the rest as running.
std::vector<ParallelConfig> Candidates(const PlanFile& p) {
  std::vector<ParallelConfig> out;
  const ParallelConfig& base = p.layout;
  const int64_t per_replica = base.global_batch / base.dp;
  for (int64_t mbs = 1; mbs <= per_replica; ++mbs) {
    if (per_replica % mbs != 0) continue;
    for (int vp = 1; vp <= p.model.layers; ++vp) {
      for (ScheduleKind kind :
           {ScheduleKind::k1F1B, ScheduleKind::kGPipe, ScheduleKind::kInterleaved}) {
        if ((kind == ScheduleKind::kInterleaved) != (vp > 1)) continue;
        ParallelConfig c = base;
        c.mbs = static_cast<int>(mbs);
        c.vp = vp;
        c.schedule = kind;
        if (c.Validate(p.model).ok()) out.push_back(c);
      }
    }
  }
  return out;
}

}  // namespace

Result<Replan> ReplanForMeasuredCosts(const PlanFile& running, const runtime::MonitorReport& report,
                                      Bytes memory_limit,
                                      const std::vector<std::string>& rejected) {
  PTDP_ASSIGN_OR_RETURN(ClusterSpec cluster,
                        LoadCluster(running.cluster.name, running.layout.WorldSize()));
  const ParallelConfig& now = running.layout;
  Replan out;
  // Each pipeline rank's compute is its slowest rank's slowdown (the monitor's compute per
  // expected FLOP over the median rank's) times the profile's: relative, so that what the
  // profile gets wrong for every rank alike (ptdp calibrate's business) does not pass for a
  // property of one layout.
  out.scale.assign(static_cast<size_t>(now.pp), 1.0);
  for (size_t i = 0; i < report.ranks.size() && i < report.slowdown.size(); ++i) {
    double& s = out.scale[static_cast<size_t>(report.ranks[i].coord.pp)];
    if (report.slowdown[i] > 0) s = std::max(s, report.slowdown[i]);
  }
  PTDP_ASSIGN_OR_RETURN(out.current_step_s,
                        SimulatedStep(running, cluster, now, out.scale, /*memory_limit=*/0));
  out.layout = now;
  out.best_step_s = out.current_step_s;
  for (const ParallelConfig& c : Candidates(running)) {
    if (std::find(rejected.begin(), rejected.end(), c.ToString()) != rejected.end()) continue;
    auto step_s = SimulatedStep(running, cluster, c, out.scale, memory_limit);
    if (!step_s.ok()) continue;
    ++out.candidates;
    if (*step_s < out.best_step_s) {
      out.best_step_s = *step_s;
      out.layout = c;
    }
  }
  return out;
}

namespace {

// Rank 0 re-plans and decides; every rank returns rank 0's choice (empty: stay).
Result<std::optional<ParallelConfig>> DecideOnRoot(
    const AdaptArgs& a, const runtime::MonitorReport& report, int64_t step, Bytes memory_limit,
    runtime::Communicator& world, const PlanFile& plan, const std::vector<std::string>& rejected) {
  std::vector<double> choice = {0, 0, 0, 0};  // switch, mbs, schedule, vp
  Status st;
  if (world.rank() == 0) {
    auto rp = ReplanForMeasuredCosts(plan, report, memory_limit, rejected);
    if (!rp.ok()) {
      st = rp.status().WithPrefix("--adapt");
    } else {
      const double gain = 1 - rp->best_step_s / rp->current_step_s;
      const bool go = gain > a.threshold;
      std::printf(
          " adapt after step %lld: %d layouts simulated with the measured slowdowns; running "
          "%.4f s, best %.4f s (%s, %.1f%% shorter): %s\n",
          static_cast<long long>(step), rp->candidates, rp->current_step_s, rp->best_step_s,
          rp->layout.ToString().c_str(), 100 * gain,
          go ? "switching" : "staying (under --adapt-threshold)");
      std::fflush(stdout);
      if (go) {
        choice = {1, double(rp->layout.mbs), double(static_cast<int>(rp->layout.schedule)),
                  double(rp->layout.vp)};
      }
    }
  }
  PTDP_RETURN_IF_ERROR(runtime::AgreeStatus(world, st));
  PTDP_ASSIGN_OR_RETURN(std::vector<double> all, runtime::AllGatherDoubles(world, choice));
  if (all[0] == 0) return std::optional<ParallelConfig>();
  ParallelConfig c = plan.layout;
  c.mbs = static_cast<int>(all[1]);
  c.schedule = static_cast<ScheduleKind>(static_cast<int>(all[2]));
  c.vp = static_cast<int>(all[3]);
  return std::optional<ParallelConfig>(c);
}

}  // namespace

namespace {

// The job's mean step time over the window (every rank's wall_s is the job's).
double MeasuredStep(const runtime::MonitorReport& r) {
  if (r.ranks.empty() || r.ranks[0].steps == 0) return 0;
  return r.ranks[0].wall_s / double(r.ranks[0].steps);
}

// --adapt's next plan after a window, if any: undo a switch on trial that measured no gain, else
// re-plan when the window names stragglers.
Result<std::optional<PlanFile>> NextAdaptPlan(const AdaptArgs& a,
                                              const runtime::MonitorReport& report, int64_t step,
                                              Bytes memory_limit, runtime::Communicator& world,
                                              AdaptState* state, const PlanFile& plan) {
  const double measured = MeasuredStep(report);
  if (state->on_trial) {
    state->on_trial = false;
    if (!(measured < state->before_step_s)) {  // the same on every rank (gathered doubles)
      if (world.rank() == 0) {
        std::printf(
            " adapt after step %lld: %s measured %.4f s per step against %.4f s before: "
            "undoing the switch; no more re-plans in this run (the profile mispredicts it: ptdp "
            "calibrate)\n",
            static_cast<long long>(step), plan.layout.ToString().c_str(), measured,
            state->before_step_s);
      }
      state->rejected.push_back(plan.layout.ToString());
      state->stopped = true;
      return std::optional<PlanFile>(state->before);
    }
  }
  if (state->stopped || report.stragglers.empty()) return std::optional<PlanFile>();
  PTDP_ASSIGN_OR_RETURN(std::optional<ParallelConfig> c,
                        DecideOnRoot(a, report, step, memory_limit, world, plan, state->rejected));
  if (!c) return std::optional<PlanFile>();
  PlanFile next = plan;
  next.layout = *c;
  PTDP_ASSIGN_OR_RETURN(next.program, schedule::BuildProgram(next.model, next.layout));
  next.has_program = true;
  next.prediction = Json::object();  // the planner's figures were the old layout's
  state->on_trial = true;
  state->before = plan;
  state->before_step_s = measured;
  return std::optional<PlanFile>(std::move(next));
}

}  // namespace

Status AdaptAfterStep(const AdaptArgs& a, const runtime::MonitorReport* report, int64_t step,
                      Bytes memory_limit, runtime::Communicator& world, AdaptState* state,
                      PlanFile* plan, std::unique_ptr<runtime::Trainer>* trainer) {
  PlanFile next;
  if (!a.switch_plan.empty() && step == a.switch_at) {
    auto read = ReadPlanFile(a.switch_plan);
    PTDP_RETURN_IF_ERROR(runtime::AgreeStatus(
        world, read.ok() ? Status::Ok() : read.status().WithPrefix("--switch-plan")));
    next = std::move(read).value();
  } else if (a.adapt && report != nullptr) {
    PTDP_ASSIGN_OR_RETURN(std::optional<PlanFile> p,
                          NextAdaptPlan(a, *report, step, memory_limit, world, state, *plan));
    if (!p) return Status::Ok();
    next = std::move(*p);
  } else {
    return Status::Ok();
  }
  const auto t0 = std::chrono::steady_clock::now();
  PTDP_ASSIGN_OR_RETURN(
      *trainer, runtime::Trainer::SwitchPlan(std::move(*trainer), next, step, a.scratch_dir));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (world.rank() == 0) {
    std::printf(" switched after step %lld to %s (state moved through %s in %.3f s)\n",
                static_cast<long long>(step), next.layout.ToString().c_str(), a.scratch_dir.c_str(),
                s);
    std::fflush(stdout);
  }
  *plan = std::move(next);
  return Status::Ok();
}

}  // namespace ptdp::tools
