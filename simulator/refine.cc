#include "simulator/refine.h"

#include <algorithm>

#include "schedule/schedule.h"

namespace ptdp::sim {

Result<LayoutSimulation> SimulateLayout(const ModelSpec& m, const ClusterSpec& cluster,
                                        const ParallelConfig& c, const SimOptions& options,
                                        bool ideal, const costmodel::CostTable* costs,
                                        const Program* program) {
  PTDP_RETURN_IF_ERROR(c.Validate(m));
  if (c.WorldSize() != cluster.Gpus()) {
    return Status::Invalid("layout: tp * pp * dp = " + std::to_string(c.WorldSize()) +
                           " GPUs but the cluster has " + std::to_string(cluster.Gpus()));
  }
  LayoutSimulation out;
  if (program != nullptr) {
    out.program = *program;
  } else {
    // Messages of the ledger's PipelineMessageBytes: BoundaryElements x the layout's element size.
    PTDP_ASSIGN_OR_RETURN(out.program, schedule::BuildProgram(m, c));
  }
  out.costs = costs ? *costs : costmodel::BuildCostTable(m, cluster, c);
  if (ideal) out.costs = IdealCosts(out.costs);
  PTDP_ASSIGN_OR_RETURN(out.result, Simulate(out.program, out.costs, options));
  return out;
}

Result<costmodel::PipelineTime> SimulatedPipelineTime(const ModelSpec& m,
                                                      const ClusterSpec& /*cluster*/,
                                                      const ParallelConfig& c,
                                                      const costmodel::CostTable& t) {
  PTDP_ASSIGN_OR_RETURN(Program p, schedule::BuildProgram(m, c));
  PTDP_ASSIGN_OR_RETURN(SimResult r, Simulate(p, t));
  Nanoseconds busiest = 0;
  for (const RankStats& s : r.ranks) busiest = std::max(busiest, s.compute_ns);
  return PipelineTimeOf(r.pipeline_ns, busiest);
}

costmodel::PipelineTime PipelineTimeOf(Nanoseconds flush_ns, Nanoseconds busiest_compute_ns) {
  costmodel::PipelineTime out;
  out.total = ToSeconds(flush_ns);
  // The bubble as the simulator measures it: the time the busiest rank's compute stream stands
  // idle before the flush (waiting on the schedule or on messages not hidden behind compute).
  out.bubble = std::max(0.0, out.total - ToSeconds(busiest_compute_ns));
  return out;
}

}  // namespace ptdp::sim
