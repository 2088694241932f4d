// `ptdp train --adapt` and `--switch-plan` (tools/train_adapt.h): the re-planner on top of the
// runtime. It may use the cost model and the simulator; the runtime only measures and switches.
#include "tools/train_adapt.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <filesystem>

#include "core/json.h"
#include "core/shapes.h"
#include "runtime/comm/agree.h"
#include "schedule/schedule.h"

namespace ptdp::tools {
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

// Rank 0's report of a layout of another t, p or d that beats the running one by more than the
// threshold; writes its plan under --save. Returns whether to relaunch.
Result<bool> OfferRelaunch(const AdaptArgs& a, const Replan& rp, int64_t step, const PlanFile& plan,
                           double trust) {
  const double gain = (1 - rp.other_step_s / rp.current_step_s) * trust;
  const bool beats_switch = rp.other_step_s < rp.best_step_s;
  if (!rp.other || !beats_switch || !(gain > a.threshold)) return false;
  char figures[128];
  std::snprintf(figures, sizeof figures,
                ", %.4f s, %.1f%% shorter; best with the running t, p, d %.4f s", rp.other_step_s,
                100 * gain, rp.best_step_s);
  const std::string what = rp.other->ToString() + figures;
  if (a.save_dir.empty()) {
    std::printf(
        " adapt after step %lld: would relaunch to %s (%d layouts of other t, p, d "
        "simulated); give --save to allow it\n",
        static_cast<long long>(step), what.c_str(), rp.other_candidates);
    return false;
  }
  PlanFile next = plan;
  next.layout = *rp.other;
  PTDP_ASSIGN_OR_RETURN(next.program, schedule::BuildProgram(next.model, next.layout));
  next.has_program = true;
  next.prediction = Json::object();  // the planner's figures and alternatives were the old layout's
  next.extra = Json::object();
  std::error_code ec;
  std::filesystem::create_directories(a.save_dir, ec);
  const std::string path = a.save_dir + "/" + kRelaunchPlanName;
  PTDP_RETURN_IF_ERROR(WriteFileAtomic(path, PlanToJson(next).dump(1) + "\n").WithPrefix("--save"));
  std::printf(
      " adapt after step %lld: per-rank stage compute measured/modelled %s; %d layouts of "
      "other t, p, d simulated; running %.4f s, best (%s): relaunching (plan in %s)\n",
      static_cast<long long>(step), JoinScale(rp.rank_scale).c_str(), rp.other_candidates,
      rp.current_step_s, what.c_str(), path.c_str());
  return true;
}

// Rank 0 re-plans and decides; every rank returns rank 0's choice (empty: stay; *relaunch: the
// plan of another t, p, d is written, the caller saves and stops).
Result<std::optional<ParallelConfig>> DecideOnRoot(
    const AdaptArgs& a, const runtime::MonitorReport& report, int64_t step, Bytes memory_limit,
    runtime::Communicator& world, const PlanFile& plan, const AdaptState& state, double measured,
    const Timeline& last_step, bool* relaunch, double* predicted_gain) {
  // action (0 stay, 1 switch, 2 relaunch), mbs, schedule, vp, first_stage_layers,
  // last_stage_layers, the predicted gain (AdaptState's trial, the same on every rank), then pp
  // per-stage layer counts (stage_layers; all 0 when the choice has none), so that every rank
  // builds the same layout. The length is the same on every rank (the running pp).
  constexpr size_t kStageCounts = 7;
  std::vector<double> choice(kStageCounts + size_t(plan.layout.pp), 0.0);
  Status st;
  if (world.rank() == 0) {
    auto rp = ReplanForMeasuredCosts(plan, report, memory_limit, state.rejected, &last_step);
    if (rp.ok() && a.calibrate) {
      std::printf(
          " adapt after step %lld: %s the fit of the profile to the step's timeline (compute "
          "median |error| %.1f%% -> %.1f%%; %s)\n",
          static_cast<long long>(step), rp->calibrated ? "using" : "not using (no better)",
          100 * rp->calibrated_error_before, 100 * rp->calibrated_error_after,
          rp->calibration_summary.c_str());
    }
    auto go_other = rp.ok() ? OfferRelaunch(a, *rp, step, plan, state.trust) : Result<bool>(false);
    if (!rp.ok()) {
      // A window the re-planner cannot price (a fitted profile or factors that make the table
      // inconsistent) is a window without a re-plan: the monitor must not end the training run.
      std::printf(" adapt after step %lld: no re-plan this window: %s\n",
                  static_cast<long long>(step), rp.status().ToString().c_str());
    } else if (!go_other.ok()) {
      st = go_other.status().WithPrefix("--adapt");
    } else if (*go_other) {
      choice[0] = 2;
    } else {
      const double gain = 1 - rp->best_step_s / rp->current_step_s;
      const SwitchVerdict v = JudgeSwitch(gain, a.threshold, state.trust, state.switch_cost_s,
                                          measured, a.steps - step);
      char discounted[96] = "";
      if (state.trust < 1) {
        std::snprintf(discounted, sizeof discounted, "; %.1f%% at the measured trust %.2f",
                      100 * v.discounted_gain, state.trust);
      }
      std::printf(
          " adapt after step %lld: stage compute measured/modelled %s; %d layouts simulated; "
          "running %.4f s, best %.4f s (%s, layers %s, %.1f%% shorter%s): %s\n",
          static_cast<long long>(step), JoinScale(rp->scale).c_str(), rp->candidates,
          rp->current_step_s, rp->best_step_s, rp->layout.ToString().c_str(),
          JoinCounts(StageLayerCounts(plan.model, rp->layout)).c_str(), 100 * gain, discounted,
          v.why.c_str());
      if (v.go) {
        const std::vector<double> fields = {1,
                                            double(rp->layout.mbs),
                                            double(static_cast<int>(rp->layout.schedule)),
                                            double(rp->layout.vp),
                                            double(rp->layout.first_stage_layers),
                                            double(rp->layout.last_stage_layers),
                                            gain};
        std::copy(fields.begin(), fields.end(), choice.begin());
        for (size_t r = 0; r < rp->layout.stage_layers.size(); ++r) {
          choice[kStageCounts + r] = double(rp->layout.stage_layers[r]);
        }
      }
    }
    std::fflush(stdout);
  }
  PTDP_RETURN_IF_ERROR(runtime::AgreeStatus(world, st));
  PTDP_ASSIGN_OR_RETURN(std::vector<double> all, runtime::AllGatherDoubles(world, choice));
  *relaunch = all[0] == 2;
  if (all[0] != 1) return std::optional<ParallelConfig>();
  *predicted_gain = all[6];
  ParallelConfig c = plan.layout;
  c.mbs = static_cast<int>(all[1]);
  c.schedule = static_cast<ScheduleKind>(static_cast<int>(all[2]));
  c.vp = static_cast<int>(all[3]);
  c.first_stage_layers = static_cast<int>(all[4]);
  c.last_stage_layers = static_cast<int>(all[5]);
  c.stage_layers.clear();
  if (all[kStageCounts] > 0) {
    for (int r = 0; r < c.pp; ++r) c.stage_layers.push_back(int(all[kStageCounts + size_t(r)]));
  }
  return std::optional<ParallelConfig>(c);
}

}  // namespace

namespace {

// --adapt's next plan after a window, if any: undo a switch on trial that measured no gain, else
// re-plan (at every window: a slow stage, a straggling GPU and a slow link all lengthen the
// measured step, and only some of them name stragglers).
Result<std::optional<PlanFile>> NextAdaptPlan(const AdaptArgs& a,
                                              const runtime::MonitorReport& report, int64_t step,
                                              Bytes memory_limit, runtime::Communicator& world,
                                              AdaptState* state, const PlanFile& plan,
                                              runtime::Trainer& trainer, double measured,
                                              double first_step_s) {
  if (state->on_trial) {
    state->on_trial = false;
    if (measured < state->before_step_s) {
      const TrialLesson l = LearnFromTrial(state->trial_predicted_gain, state->before_step_s,
                                           measured, state->trial_move_s, first_step_s);
      state->trust = l.trust;
      state->switch_cost_s = l.cost_s;
      if (world.rank() == 0) {
        std::printf(
            " adapt after step %lld: the switch after step %lld realised %.1f%% of a predicted "
            "%.1f%% (trust %.2f) and cost %.3f s (state move %.3f s, its first step %.3f s over "
            "the window's median)\n",
            static_cast<long long>(step), static_cast<long long>(state->trial_step),
            100 * l.realised_gain, 100 * state->trial_predicted_gain, l.trust, l.cost_s,
            state->trial_move_s, l.first_step_excess_s);
      }
    } else {  // the same on every rank (gathered doubles)
      if (world.rank() == 0) {
        std::printf(
            " adapt after step %lld: %s measured a median step of %.4f s against %.4f s before: "
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
  if (state->stopped) return std::optional<PlanFile>();
  // The window's last iteration, every pipeline rank's, on rank 0 (collective): what the re-plan
  // fits the profile to before pricing candidates.
  Timeline last_step;
  if (a.calibrate) {
    PTDP_ASSIGN_OR_RETURN(last_step, trainer.GatherTimeline());
    if (world.rank() == 0) trainer.GiveSendsTheirTransfer(&last_step);
  }
  bool relaunch = false;
  double predicted_gain = 0;
  PTDP_ASSIGN_OR_RETURN(std::optional<ParallelConfig> c,
                        DecideOnRoot(a, report, step, memory_limit, world, plan, *state, measured,
                                     last_step, &relaunch, &predicted_gain));
  if (relaunch) {
    state->relaunch = true;
    state->relaunch_plan = a.save_dir + "/" + kRelaunchPlanName;
  }
  if (!c) return std::optional<PlanFile>();
  PlanFile next = plan;
  next.layout = *c;
  PTDP_ASSIGN_OR_RETURN(next.program, schedule::BuildProgram(next.model, next.layout));
  next.has_program = true;
  next.prediction = Json::object();  // the planner's figures were the old layout's
  state->on_trial = true;
  state->before = plan;
  state->before_step_s = measured;
  state->trial_predicted_gain = predicted_gain;
  state->trial_step = step;
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
    std::vector<double> window = std::move(state->window_step_s);
    state->window_step_s.clear();
    const double first_step_s = window.empty() ? 0 : window.front();
    const double measured = WindowStepSeconds(std::move(window));
    PTDP_ASSIGN_OR_RETURN(std::optional<PlanFile> p,
                          NextAdaptPlan(a, *report, step, memory_limit, world, state, *plan,
                                        **trainer, measured, first_step_s));
    if (!p) return Status::Ok();
    next = std::move(*p);
  } else {
    return Status::Ok();
  }
  const auto t0 = std::chrono::steady_clock::now();
  runtime::Trainer::SwitchTimes parts;
  PTDP_ASSIGN_OR_RETURN(*trainer, runtime::Trainer::SwitchPlan(std::move(*trainer), next, step,
                                                               a.scratch_dir, &parts));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  state->trial_move_s = s;
  if (world.rank() == 0) {
    std::printf(
        " switched after step %lld to %s (state moved through %s in %.3f s; rank 0: save %.3f, "
        "new trainer %.3f, load %.3f s)\n",
        static_cast<long long>(step), next.layout.ToString().c_str(), a.scratch_dir.c_str(), s,
        parts.save_s, parts.create_s, parts.load_s);
    std::fflush(stdout);
  }
  *plan = std::move(next);
  return Status::Ok();
}

}  // namespace ptdp::tools
