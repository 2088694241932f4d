#include "costmodel/a2a_overlap.h"

#include <algorithm>

#include "costmodel/cost_table.h"

namespace ptdp::costmodel {

MoeLayerPhases MoeLayerPhasesOf(const PieceCost& attention, const ExpertMlpParts& parts,
                                const ExpertComm& comm, const ComputeBreakdown& redo) {
  MoeLayerPhases ph;
  const PieceCost& route = parts.routing;
  const PieceCost& run = parts.experts;
  ph.pre_forward = attention.forward.Total() + route.forward.Total();
  ph.pre_weight = attention.weight_grad.Total() + route.weight_grad.Total();
  ph.pre_backward =
      attention.backward.Total() + route.backward.Total() - ph.pre_weight + redo.Total();
  ph.experts_forward = run.forward.Total();
  ph.experts_weight = run.weight_grad.Total();
  ph.experts_backward = run.backward.Total() - ph.experts_weight;
  ph.dispatch = comm.all_to_all + comm.etp_allgather;
  ph.combine = comm.all_to_all + comm.etp_reduce_scatter;
  return ph;
}

std::vector<Seconds> PairedLayerSavings(const MoeLayerPhases& ph, int max_pairs, double slowdown) {
  std::vector<Seconds> saving(size_t(std::max(0, max_pairs)) + 1, 0.0);
  Seconds compute = 0, comm = 0;            // when each stream is free
  Seconds forward_in = 0, backward_in = 0;  // when this pair's forward / backward input is ready
  const Seconds busy = ph.Serial() - ph.Communication();
  // A piece of `work` on `stream` once it is free and its input is `ready`; its end.
  auto on = [](Seconds* stream, Seconds ready, Seconds work) {
    *stream = std::max(*stream, ready) + work;
    return *stream;
  };
  for (int n = 1; n <= max_pairs; ++n) {
    const Seconds combine_b = on(&comm, backward_in, ph.combine);
    const Seconds pre_f = on(&compute, forward_in, ph.pre_forward);
    const Seconds experts_b = on(&compute, combine_b, ph.experts_backward);
    const Seconds dispatch_f = on(&comm, pre_f, ph.dispatch);
    on(&compute, 0, ph.experts_weight);
    const Seconds dispatch_b = on(&comm, experts_b, ph.dispatch);
    const Seconds experts_f = on(&compute, dispatch_f, ph.experts_forward);
    forward_in = on(&comm, experts_f, ph.combine);
    backward_in = on(&compute, dispatch_b, ph.pre_backward);
    on(&compute, 0, ph.pre_weight);
    const Seconds span = std::max(compute, comm);
    // The communication that ran while the compute stream was busy: all of it but what the
    // compute stream waited for.
    const Seconds hidden = std::max(0.0, n * ph.Communication() - (span - n * busy));
    saving[size_t(n)] = std::max(0.0, n * ph.Serial() - span - hidden * OverlapStretch(slowdown));
  }
  return saving;
}

}  // namespace ptdp::costmodel
