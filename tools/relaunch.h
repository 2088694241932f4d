// The contract between `ptdp train --adapt` (tools/train_adapt.cc) and the job scripts of `ptdp
// launch` (tools/launch_script.cc) for a relaunch in another t, p, d (docs/runtime.md
// "Re-planning").
#pragma once

namespace ptdp::tools {

// The exit status of every rank of a run that saved and stopped so as to be relaunched in another
// t, p, d (sysexits.h's EX_TEMPFAIL: try again); `ptdp launch` job scripts relaunch on it.
inline constexpr int kRelaunchExitCode = 75;
// The file under --save that a relaunch's plan is written to (`ptdp plan --out`'s format).
inline constexpr const char* kRelaunchPlanName = "relaunch-plan.json";

}  // namespace ptdp::tools
