// IdealCosts (simulator.h): a cost table turned into the closed forms' ideal pipeline, apart from
// the Interpreter that replays it.
#include <algorithm>
#include <limits>

#include "simulator/simulator.h"

namespace ptdp::sim {

costmodel::CostTable IdealCosts(const costmodel::CostTable& c) {
  costmodel::CostTable out = c;
  Seconds f = 0, b = 0, rc = 0, wg = 0;
  for (const auto& ch : c.chunks) {
    f += ch.forward.Total();
    b += ch.backward.Total();
    rc += ch.recompute.Total();
    wg += ch.weight_grad.Total();
  }
  const double n = std::max<size_t>(1, c.chunks.size());
  for (auto& ch : out.chunks) {
    ch.forward = costmodel::ComputeBreakdown{f / n, 0, 0};
    ch.backward = costmodel::ComputeBreakdown{b / n, 0, 0};
    ch.recompute = costmodel::ComputeBreakdown{rc / n, 0, 0};
    ch.weight_grad = costmodel::ComputeBreakdown{wg / n, 0, 0};
  }
  out.p2p_allgather = 0;
  out.p2p_link.assign(c.pp, costmodel::LinkCost{0, std::numeric_limits<double>::infinity(), false});
  out.dp_allreduce.assign(c.pp, 0);
  out.dp_param_gather.assign(c.pp, 0);
  out.dp_collectives.clear();
  out.embedding_allreduce.assign(c.pp, 0);
  return out;
}

}  // namespace ptdp::sim
