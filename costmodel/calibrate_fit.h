// Internal to costmodel/calibrate*.cc: what one fit sees (the runs' cost-table inputs and their
// measured samples) and the link fit, split from calibrate.cc to keep each file to one concern.
#pragma once

#include <cstdint>
#include <vector>

#include "core/cluster.h"
#include "core/hardware.h"
#include "core/model.h"
#include "core/parallel.h"
#include "core/program.h"
#include "costmodel/calibrate.h"
#include "costmodel/cost_table.h"

namespace ptdp::costmodel::calibrate_fit {

// Multipliers stay within these, so a fitted figure stays inside the profile's ranges for any
// sane starting profile (core/hardware.h).
constexpr double kMinScale = 1e-3, kMaxScale = 1e3;
// A blocking collective on an oversubscribed CPU can take a thousand times its bytes' worth.
constexpr double kMinLinkScale = 1e-6;

// The q-quantile of `v`, interpolated between its two nearest elements; 0 for none.
double Quantile(std::vector<double> v, double q);

// A measured instruction of run `run`, with its rank.
struct Sample {
  int run = 0;
  int32_t pp_rank = 0;
  Instr instr;
  Seconds measured_s = 0;
};

// The measured durations of one compute instruction class (run, pipeline rank, op, chunk,
// recompute).
struct ComputeClass {
  int run = 0;
  int32_t pp_rank = 0;
  Instr instr;  // a representative
  std::vector<double> measured_s;
  // What the fit matches: a quantile of measured_s (Calibrate's `quantile`). The median on a
  // machine of its own; on a shared one, where another process taking the core for a time slice
  // only ever adds time and can hit half of a class, a lower one (0.25).
  double typical_s = 0;
};

// One measured run's inputs of BuildCostTable.
struct RunContext {
  const ModelSpec* model = nullptr;
  ClusterSpec cluster;  // its profile replaced at each evaluation
  ParallelConfig layout;
  std::vector<int64_t> param_counts;
};

// What one fit sees: every run's cost-table inputs and the measured samples of all of them.
struct FitContext {
  std::vector<RunContext> runs;
  HardwareProfile start;
  std::vector<ComputeClass> classes;
  std::vector<Sample> recvs[2], reduces[2];  // by link class: intra, inter

  // Each run's cost table under the starting profile with `x` applied.
  std::vector<CostTable> TablesFor(const CalibrationParams& x);
};

// Fits each link class's bandwidths in `x` (and its latency where the receives hold messages of
// more than one size): the collectives to their fastest reduce-grads, send_recv to the receives'
// `quantile` (calibrate.h).
void FitLinks(FitContext& f, double quantile, CalibrationParams* x);

}  // namespace ptdp::costmodel::calibrate_fit
