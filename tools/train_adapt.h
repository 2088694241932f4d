// Run-time re-planning for `ptdp train` (--adapt; --switch-plan for tests): the layer above the
// runtime that decides WHICH plan to run, so that the runtime itself (runtime/, and cmd_train.cc)
// never sees the planner or the simulator. The runtime measures (Trainer::GatherMonitor) and
// switches (Trainer::SwitchPlan); train_adapt.cc calibrates the cost model's compute to what the
// window measured (per pipeline rank: measured over modelled stage compute, so both the machine's
// units and a slow GPU's own slowness), prices candidate layouts with it and replays them in the
// simulator.
#pragma once

#include <memory>
#include <string>

#include "core/plan_file.h"
#include "core/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/executor/monitor.h"
#include "runtime/executor/trainer.h"

namespace ptdp::tools {

struct AdaptArgs {
  bool adapt = false;       // re-plan at monitor windows that name stragglers
  double threshold = 0.1;   // switch when the simulator predicts a step this much shorter
  std::string switch_plan;  // tests: switch to this plan after step switch_at
  int64_t switch_at = 0;
  std::string scratch_dir;  // where the state crosses over (Trainer::SwitchPlan)
};

// What --adapt remembers between windows: a switch is on trial until the next window has measured
// it; one that did not shorten the measured step is undone, and --adapt proposes nothing more in
// this run: its predictions are only as right as the profile (ptdp calibrate's business), and one
// that was wrong would be wrong again, each trial costing a window in a slower layout.
struct AdaptState {
  bool on_trial = false;
  bool stopped = false;               // a switch was undone
  PlanFile before;                    // the plan switched away from
  double before_step_s = 0;           // its measured step time (the window before the switch)
  std::vector<std::string> rejected;  // layouts (ParallelConfig::ToString) tried and undone
};

// The layout the re-planner picks for the measured costs, and what the simulator predicts.
struct Replan {
  ParallelConfig layout;      // the running one when nothing is better
  double current_step_s = 0;  // the running layout, simulated with the calibrated costs
  double best_step_s = 0;     // the picked layout, the same way
  // Per pipeline rank: measured / modelled stage compute per step (its slowest rank's), the
  // factor each candidate's compute on that rank is priced with.
  std::vector<double> scale;
  int candidates = 0;  // layouts simulated
};

// Re-plans for the same GPUs (t, p, d, global batch, precision kept; microbatch size, schedule,
// interleaving and the split of layers over the stages free). Pure given its inputs (the report is
// the same on every rank). Layouts named in `rejected` are not candidates.
Result<Replan> ReplanForMeasuredCosts(const PlanFile& running, const runtime::MonitorReport& report,
                                      Bytes memory_limit,
                                      const std::vector<std::string>& rejected = {});

// After step `step` (and its monitor window, `report` when one ended here): with --switch-plan at
// --switch-at, or with --adapt when the window names stragglers and the re-plan gains more than
// the threshold, every rank switches `*trainer` and `*plan` together (collective; rank 0 decides
// and prints); with --adapt, a switch whose next window measured no shorter step is undone.
Status AdaptAfterStep(const AdaptArgs& a, const runtime::MonitorReport* report, int64_t step,
                      Bytes memory_limit, runtime::Communicator& world, AdaptState* state,
                      PlanFile* plan, std::unique_ptr<runtime::Trainer>* trainer);

}  // namespace ptdp::tools
