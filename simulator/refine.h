// The simulator as the planner's pipeline model: build a layout's Program and CostTable and replay
// one iteration. SimulatedPipelineTime has the signature of planner::Refiner (planner/search.h), so
// the planner can re-score its layouts with it:  options.refiner = sim::SimulatedPipelineTime;
// (ptdp plan uses sim::MakeReplayRefiner, pipeline_replay.h: the same answer, faster).
#pragma once

#include "core/hardware.h"
#include "core/model.h"
#include "core/parallel.h"
#include "core/program.h"
#include "costmodel/cost_table.h"
#include "costmodel/estimate.h"
#include "simulator/simulator.h"

namespace ptdp::sim {

struct LayoutSimulation {
  Program program;
  costmodel::CostTable costs;  // as simulated (IdealCosts when `ideal`)
  SimResult result;
};

// Program (`program` when given, e.g. a plan file's, which the caller has checked against the
// layout with schedule::CheckProgramMatchesLayout; else schedule::BuildProgram with the layout's
// element size: messages of the ledger's PipelineMessageBytes) + CostTable
// (costmodel::BuildCostTable, or `costs` when given) + Simulate. `ideal`: free communication and
// equal per-stage costs (IdealCosts). Errors: the layout's own (ParallelConfig::Validate), a
// cluster of another size.
Result<LayoutSimulation> SimulateLayout(const ModelSpec& m, const ClusterSpec& cluster,
                                        const ParallelConfig& c,
                                        const SimOptions& options = SimOptions(),
                                        bool ideal = false,
                                        const costmodel::CostTable* costs = nullptr,
                                        const Program* program = nullptr);

// The refiner's answer from a replay: the pipeline time is the flush, and the bubble is the busiest
// rank's compute stream's idle time before it.
costmodel::PipelineTime PipelineTimeOf(Nanoseconds flush_ns, Nanoseconds busiest_compute_ns);

// planner::Refiner: the time from the first forward to the last backward, simulated, and the
// bubble within it, measured as that time minus m times the slowest rank's per-microbatch time
// (costmodel::StageMicrobatchTimes, p2p included), the closed form's "ideal".
Result<costmodel::PipelineTime> SimulatedPipelineTime(const ModelSpec& m,
                                                      const ClusterSpec& cluster,
                                                      const ParallelConfig& c,
                                                      const costmodel::CostTable& t);

}  // namespace ptdp::sim
