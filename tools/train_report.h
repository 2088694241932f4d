// What `ptdp train` reports (tools/cmd_train.cc): each step's --log line, and at the end of a run
// the measured memory against the ledger and the plan, the per-step losses against a reference
// log, and the op-time table.
// Rank 0 only; the callers agree the returned statuses over the ranks.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/plan_file.h"
#include "core/status.h"
#include "runtime/executor/trainer.h"

namespace ptdp::tools {

// Losses of the validation and the test data after a step (none: not evaluated).
struct EvalLosses {
  std::optional<double> valid, test;
};

// The mixture's loss lines after an iteration line, Megatron-LM's names for them: the auxiliary
// load-balancing loss (--moe-aux-loss-coeff) and the router z-loss (--moe-z-loss-coeff), each the
// mean over the mixture layers.
void PrintMoeLosses(const runtime::TrainOptions& o, const runtime::StepMetrics& m);

// The step's --log line; a monitor window that ends at this step is its "monitor" field, and a
// validation after it its "eval_loss" and "eval_ppl", the test its "test_loss" and "test_ppl" (so
// every line stays one step's metrics for the readers of the log).
std::string MetricsJson(const runtime::StepMetrics& m, const runtime::MonitorReport* monitor,
                        const EvalLosses& eval);

// Per pipeline rank: the measured peak without workspace (max over its ranks) beside the ledger
// and the plan's prediction; an error when over `memory_tol` (< 0: no check).
Status ReportMemory(double memory_tol, const PlanFile& plan, runtime::Trainer& trainer,
                    const std::vector<runtime::RankMemory>& mem);

// Per-step losses of steps first_step.. against the --log file `expect_losses` (--expect-losses),
// relative tolerance `loss_tol`.
Status CheckLosses(const std::string& expect_losses, double loss_tol, int64_t first_step,
                   const std::vector<double>& losses);

// --op-times: rank 0's Ops calls per step (steps after the first), largest total first.
void PrintOpTimes(const runtime::TimedOps& timer, int64_t steps);

}  // namespace ptdp::tools
