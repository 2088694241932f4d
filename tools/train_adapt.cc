// `ptdp train --adapt` and `--switch-plan` (tools/train_adapt.h): the re-planner on top of the
// runtime. It may use the cost model and the simulator; the runtime only measures and switches.
#include "tools/train_adapt.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/cluster.h"
#include "core/ledger.h"
#include "core/shapes.h"
#include "costmodel/calibrate.h"
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

// The table with each pipeline rank's compute multiplied by its calibration factor
// (MeasuredOverModelled).
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

// The stage splits for the same pipeline: the even one, and with vp = 1 every uneven one in
// Megatron-LM's form (first_stage_layers, last_stage_layers; the stages between share the rest
// evenly), one representation per distinct split. For pp = 2 that is every split; for pp > 2 the
// middle stages move together, so a slow middle stage is relieved only by heavier first and last
// stages, which lightens every middle stage alike.
std::vector<std::pair<int, int>> StageSplits(const PlanFile& p, const ParallelConfig& base) {
  std::vector<std::pair<int, int>> out = {{0, 0}};
  if (base.pp < 2) return out;
  std::vector<std::vector<int>> seen = {StageLayerCounts(p.model, base)};
  for (int first = 0; first <= p.model.layers; ++first) {
    for (int last = 0; last <= p.model.layers; ++last) {
      ParallelConfig c = base;
      c.first_stage_layers = first;
      c.last_stage_layers = last;
      if (!c.Uneven() || !c.ValidateStageSplit(p.model).ok()) continue;
      std::vector<int> counts = StageLayerCounts(p.model, c);
      if (std::find(seen.begin(), seen.end(), counts) != seen.end()) continue;
      seen.push_back(std::move(counts));
      out.emplace_back(first, last);
    }
  }
  return out;
}

// Layouts for the same GPUs: every microbatch size dividing B/d, with 1F1B, GPipe and each
// interleaving the model's layers allow, and (1F1B, GPipe) every split of the layers over the
// stages; t, p, d, recomputation and the rest as running.
std::vector<ParallelConfig> Candidates(const PlanFile& p) {
  std::vector<ParallelConfig> out;
  ParallelConfig base = p.layout;
  base.vp = 1;
  base.first_stage_layers = base.last_stage_layers = 0;
  const std::vector<std::pair<int, int>> splits = StageSplits(p, base);
  const int64_t per_replica = base.global_batch / base.dp;
  for (int64_t mbs = 1; mbs <= per_replica; ++mbs) {
    if (per_replica % mbs != 0) continue;
    for (int vp = 1; vp <= p.model.layers; ++vp) {
      for (ScheduleKind kind :
           {ScheduleKind::k1F1B, ScheduleKind::kGPipe, ScheduleKind::kInterleaved}) {
        if ((kind == ScheduleKind::kInterleaved) != (vp > 1)) continue;
        for (const auto& [first, last] : splits) {
          if (vp > 1 && (first > 0 || last > 0)) continue;
          ParallelConfig c = base;
          c.mbs = static_cast<int>(mbs);
          c.vp = vp;
          c.schedule = kind;
          c.first_stage_layers = first;
          c.last_stage_layers = last;
          if (c.Validate(p.model).ok()) out.push_back(c);
        }
      }
    }
  }
  return out;
}

// Per pipeline rank, the cost model's stage compute per step of the running layout: what the
// monitor measures (kForward and kBackward), each instruction priced as the simulator prices it.
Result<std::vector<double>> ModelledStageCompute(const PlanFile& p, const ClusterSpec& cluster) {
  PTDP_ASSIGN_OR_RETURN(Program program, schedule::BuildProgram(p.model, p.layout));
  const costmodel::CostTable t = costmodel::BuildCostTable(p.model, cluster, p.layout);
  std::vector<double> out(static_cast<size_t>(p.layout.pp), 0.0);
  for (const RankProgram& rp : program.ranks) {
    for (const Instr& in : rp.instrs) {
      if (in.op != Op::kForward && in.op != Op::kBackward) continue;
      out[static_cast<size_t>(rp.pp_rank)] +=
          costmodel::PredictedInstructionTime(t, rp.pp_rank, in);
    }
  }
  return out;
}

// The calibration: per pipeline rank, the measured stage compute per step (its slowest rank's: a
// straggler in one data-parallel replica paces the whole step, the gradient all-reduce waits for
// it) over the modelled one. It puts the prediction in this machine's units (the fastest rank's
// factor: the profile's error, common to every rank) and carries each GPU's own slowness (its
// factor over the fastest's) to whatever layers a candidate gives it.
std::vector<double> MeasuredOverModelled(const runtime::MonitorReport& report,
                                         const std::vector<double>& modelled) {
  std::vector<double> measured(modelled.size(), 0.0);
  for (const runtime::RankWindow& w : report.ranks) {
    if (w.steps <= 0) continue;
    double& m = measured[static_cast<size_t>(w.coord.pp)];
    m = std::max(m, w.stage_compute_s / double(w.steps));
  }
  std::vector<double> scale(modelled.size(), 0.0);
  double fastest = 0;
  for (size_t r = 0; r < scale.size(); ++r) {
    if (measured[r] > 0 && modelled[r] > 0) scale[r] = measured[r] / modelled[r];
    if (scale[r] > 0 && (fastest == 0 || scale[r] < fastest)) fastest = scale[r];
  }
  for (double& s : scale) s = s > 0 ? s : (fastest > 0 ? fastest : 1.0);  // unmeasured: fastest's
  return scale;
}

}  // namespace

Result<Replan> ReplanForMeasuredCosts(const PlanFile& running, const runtime::MonitorReport& report,
                                      Bytes memory_limit,
                                      const std::vector<std::string>& rejected) {
  PTDP_ASSIGN_OR_RETURN(ClusterSpec cluster,
                        LoadCluster(running.cluster.name, running.layout.WorldSize()));
  const ParallelConfig& now = running.layout;
  Replan out;
  PTDP_ASSIGN_OR_RETURN(const std::vector<double> modelled, ModelledStageCompute(running, cluster));
  out.scale = MeasuredOverModelled(report, modelled);
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

std::string JoinScale(const std::vector<double>& v) {
  std::string out;
  char buf[32];
  for (double x : v) {
    std::snprintf(buf, sizeof buf, "%s%.3g", out.empty() ? "" : " ", x);
    out += buf;
  }
  return out;
}

std::string JoinCounts(const std::vector<int>& v) {
  std::string out;
  for (int x : v) {
    if (!out.empty()) out += '/';
    out += std::to_string(x);
  }
  return out;
}

// Rank 0 re-plans and decides; every rank returns rank 0's choice (empty: stay).
Result<std::optional<ParallelConfig>> DecideOnRoot(
    const AdaptArgs& a, const runtime::MonitorReport& report, int64_t step, Bytes memory_limit,
    runtime::Communicator& world, const PlanFile& plan, const std::vector<std::string>& rejected) {
  // switch, mbs, schedule, vp, first_stage_layers, last_stage_layers
  std::vector<double> choice = {0, 0, 0, 0, 0, 0};
  Status st;
  if (world.rank() == 0) {
    auto rp = ReplanForMeasuredCosts(plan, report, memory_limit, rejected);
    if (!rp.ok()) {
      st = rp.status().WithPrefix("--adapt");
    } else {
      const double gain = 1 - rp->best_step_s / rp->current_step_s;
      const bool go = gain > a.threshold;
      std::printf(
          " adapt after step %lld: stage compute measured/modelled %s; %d layouts simulated; "
          "running %.4f s, best %.4f s (%s, layers %s, %.1f%% shorter): %s\n",
          static_cast<long long>(step), JoinScale(rp->scale).c_str(), rp->candidates,
          rp->current_step_s, rp->best_step_s, rp->layout.ToString().c_str(),
          JoinCounts(StageLayerCounts(plan.model, rp->layout)).c_str(), 100 * gain,
          go ? "switching" : "staying (under --adapt-threshold)");
      std::fflush(stdout);
      if (go) {
        choice = {1,
                  double(rp->layout.mbs),
                  double(static_cast<int>(rp->layout.schedule)),
                  double(rp->layout.vp),
                  double(rp->layout.first_stage_layers),
                  double(rp->layout.last_stage_layers)};
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
  c.first_stage_layers = static_cast<int>(all[4]);
  c.last_stage_layers = static_cast<int>(all[5]);
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
