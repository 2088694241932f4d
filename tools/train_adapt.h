// Run-time re-planning for `ptdp train` (--adapt; --switch-plan for tests): the layer above the
// runtime that decides WHICH plan to run, so that the runtime itself (runtime/, and cmd_train.cc)
// never sees the planner or the simulator. The runtime measures (Trainer::GatherMonitor) and
// switches (Trainer::SwitchPlan); train_adapt.cc calibrates the cost model's compute to what the
// window measured (per world rank: measured over modelled stage compute, so both the machine's
// units and a slow GPU's own slowness), prices candidate layouts with it and replays them in the
// simulator (train_replan.cc). A better layout with the running t, p, d is switched to in place;
// one with another t, p or d is reached through a checkpoint and a relaunch (exit
// kRelaunchExitCode).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/hardware.h"
#include "core/plan_file.h"
#include "core/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/executor/monitor.h"
#include "runtime/executor/trainer.h"
#include "tools/relaunch.h"

namespace ptdp::tools {

struct AdaptArgs {
  bool adapt = false;      // re-plan at every monitor window
  double threshold = 0.1;  // switch when the simulator predicts a step this much shorter
  // --adapt-calibrate: fit the plan's profile to each window's last step (ReplanForMeasuredCosts'
  // last_step) before pricing candidates, instead of one compute factor per rank alone.
  bool calibrate = false;
  std::string switch_plan;  // tests: switch to this plan after step switch_at
  int64_t switch_at = 0;
  std::string scratch_dir;  // where the state crosses over (Trainer::SwitchPlan)
  // --save: where a relaunch writes its plan (kRelaunchPlanName) before every rank saves; empty:
  // a layout of another t, p or d is reported and not taken.
  std::string save_dir;
  int64_t steps = 0;  // the run's last step (--steps): what a switch has left to repay its cost
};

// What --adapt remembers between windows: a switch is on trial until the next window has measured
// it; one that did not shorten the measured step is undone, and --adapt proposes nothing more in
// this run: its predictions are only as right as the profile (ptdp calibrate's business), and one
// that was wrong would be wrong again, each trial costing a window in a slower layout.
struct AdaptState {
  bool on_trial = false;
  bool stopped = false;      // a switch was undone
  PlanFile before;           // the plan switched away from
  double before_step_s = 0;  // its measured step time (the window before the switch)
  // The job's step times (StepMetrics::iteration_s, the same on every rank) since the last monitor
  // window; the caller appends each step's before AdaptAfterStep, which empties it at a window.
  std::vector<double> window_step_s;
  std::vector<std::string> rejected;  // layouts (ParallelConfig::ToString) tried and undone
  // What the switches so far taught (LearnFromTrial, JudgeSwitch): the share of its predicted gain
  // that the last switch to end its trial realised, and what it cost.
  double trust = 1;
  double trial_predicted_gain = 0;  // the switch on trial: its predicted 1 - best / running
  double trial_move_s = 0;          // its state move (Trainer::SwitchPlan), seconds
  int64_t trial_step = 0;           // the step after which it switched
  double switch_cost_s = -1;        // the last measured switch's cost; < 0: none measured yet
  // Set on every rank when rank 0 chose a layout of another t, p or d and wrote its plan to
  // relaunch_plan: the caller saves after this step and exits kRelaunchExitCode.
  bool relaunch = false;
  std::string relaunch_plan;
};

// The layout the re-planner picks for the measured costs, and what the simulator predicts.
struct Replan {
  ParallelConfig layout;      // the best with the running t, p, d; the running one when none is
  double current_step_s = 0;  // the running layout, simulated with the calibrated costs
  double best_step_s = 0;     // `layout`, the same way
  // Per world rank: its measured stage compute per step over the modelled one of its pipeline
  // rank. A candidate's pipeline rank is priced with the largest factor of the world ranks the
  // candidate places on it (RankGrid's order).
  std::vector<double> rank_scale;
  std::vector<double> scale;  // per pipeline rank of the running layout, from rank_scale
  int candidates = 0;         // layouts with the running t, p, d simulated
  // The best layout with another t, p or d (same world size; OtherShapeCandidates: the even split
  // and the planner's uneven ones), when shorter than the running one; reached only through a
  // relaunch.
  std::optional<ParallelConfig> other;
  double other_step_s = 0;
  int other_candidates = 0;  // such layouts simulated
  // The profile the candidates were priced with: the plan's cluster profile, fitted by `ptdp
  // calibrate`'s own function to the window's last step when a timeline was given.
  bool calibrated = false;
  double calibrated_error_before = 0, calibrated_error_after = 0;  // compute median |error|
  std::string calibration_summary;  // the fitted figures, for the log line
};

// Re-plans for the same GPUs (global batch, precision kept): with the running t, p, d, any
// microbatch size, schedule, interleaving and split of the layers over the stages; with another
// t, p, d of the same world size, any microbatch size and schedule with the even split and the
// uneven ones the planner searches (OtherShapeCandidates). Pure given
// its inputs (the report is the same on every rank). Layouts named in `rejected` are not
// candidates. With `last_step` (the window's last iteration, Trainer::GatherTimeline), the plan's
// cluster profile is first fitted to it (costmodel::Calibrate: GEMM and memory-bound figures, the
// links its messages crossed), so that candidates of other shapes and messages are priced with
// this machine's figures; the per-rank factors are then measured over that profile's prices. A fit
// that fails leaves the profile as it was.
Result<Replan> ReplanForMeasuredCosts(const PlanFile& running, const runtime::MonitorReport& report,
                                      Bytes memory_limit,
                                      const std::vector<std::string>& rejected = {},
                                      const Timeline* last_step = nullptr);

// The layouts with the running t, p, d that ReplanForMeasuredCosts prices (before the memory
// limit and `rejected`): every microbatch size, 1F1B and GPipe with every split of the layers,
// and each interleaving with the even split and the short ends core's rule allows
// (core/parallel.h InterleavedShortEnds).
std::vector<ParallelConfig> RunningShapeCandidates(const PlanFile& running);
// The per-stage splits (ParallelConfig::stage_layers, vp = 1, 1F1B and GPipe, every microbatch
// size) ReplanForMeasuredCosts also prices for the running t, p, d: per microbatch size the split
// that minimises the largest stage time, each pipeline rank's layers and fixed work (embedding;
// head and loss) priced by the cost model times the largest of `rank_factor` on it, and its
// neighbours (one layer across each boundary); those the first/last form lists are left out.
std::vector<ParallelConfig> BalancedStageCandidates(const PlanFile& running,
                                                    const ClusterSpec& cluster,
                                                    const std::vector<double>& rank_factor);

// The layouts with another t, p, d of the same world size that ReplanForMeasuredCosts prices
// (before the memory limit and `rejected`): each t, p, d whose d divides B and whose t is at most
// the plan's GPUs per node, every microbatch size, 1F1B and GPipe with the even split and the
// uneven ones the planner searches for that p (core/parallel.h UnevenStageSplits), each
// interleaving with the even split and InterleavedShortEnds'. Not every split, as for the running
// t, p, d, so that the count stays bounded.
std::vector<ParallelConfig> OtherShapeCandidates(const PlanFile& running);

// A switch's trial, measured by the window after it. realised_gain: 1 - after / before;
// trust: realised over predicted, in [0, 1] (the re-planner's own accuracy, measured, which
// discounts its next predictions); cost_s: the state move plus the first step's excess over the
// window's median (the new trainer's one-off costs on a GPU: cuBLASLt's timing of new GEMM shapes,
// cuDNN's plans, the allocator).
struct TrialLesson {
  double realised_gain = 0;
  double trust = 1;
  double first_step_excess_s = 0;
  double cost_s = 0;
};
TrialLesson LearnFromTrial(double predicted_gain, double before_step_s, double after_step_s,
                           double move_s, double first_step_s);

// Whether --adapt switches for a predicted gain (1 - best / running, the simulator's): the gain
// times the trust must pass the threshold and, once a switch has been measured, the saving it
// implies (the discounted gain times the measured step) over the steps left must repay that
// switch's cost. Before the first switch its cost is unknown and the threshold alone decides.
struct SwitchVerdict {
  double discounted_gain = 0;  // predicted gain x trust
  double saving_s = 0;         // per step, in measured seconds
  double repaid_s = 0;         // saving_s x steps left
  bool go = false;
  std::string why;  // "switching", or why not, for the log line
};
SwitchVerdict JudgeSwitch(double predicted_gain, double threshold, double trust,
                          double switch_cost_s, double measured_step_s, int64_t steps_left);

// A window's measured step time for --adapt's trial: the median of its steps' times. Not the mean:
// the first step of a trainer (the run's, and the one after a switch) pays one-off costs on a GPU
// (cuBLASLt's timing of each GEMM shape, cuDNN's plans, the allocator's first cudaMallocs) that
// would weigh on the window it falls in, and one noisy step would decide the trial. 0: no steps.
double WindowStepSeconds(std::vector<double> step_s);

// After step `step` (and its monitor window, `report` when one ended here): with --switch-plan at
// --switch-at, or with --adapt at a window whose re-plan gains more than the threshold, every rank
// switches `*trainer` and `*plan` together (collective; rank 0 decides and prints); with --adapt,
// a switch whose next window measured no shorter step is undone. When the best layout has another
// t, p or d and save_dir is set, rank 0 writes its plan there and every rank returns with
// state->relaunch set, the trainer untouched.
Status AdaptAfterStep(const AdaptArgs& a, const runtime::MonitorReport* report, int64_t step,
                      Bytes memory_limit, runtime::Communicator& world, AdaptState* state,
                      PlanFile* plan, std::unique_ptr<runtime::Trainer>* trainer);

}  // namespace ptdp::tools
