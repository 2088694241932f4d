// Megatron-Core's combined 1F1B priced (ParallelConfig::moe_a2a_overlap,
// --overlap-moe-expert-parallel-comm with --delay-wgrad-compute): in the steady state a rank runs
// the forward of one microbatch and the backward of another as one step, layer pair by layer pair
// (forward layer i with backward layer n - 1 - i), the all-to-alls on a communication stream
// beside the compute stream. The order is TransformerLayerSchedulePlan.run's
// (megatron/core/models/common/model_chunk_schedule_plan.py at d98e8a64):
//   communication: combine backward | dispatch forward, dispatch backward | combine forward
//   compute:       pre-dispatch forward | experts backward, their weight gradient, experts forward
//                  | pre-dispatch backward, its weight gradient
// each stream in that order, each piece waiting for what it consumes (the experts' backward for
// the combine's backward, the dispatch for the experts, the experts for the combine; the next
// layer's pre-dispatch forward for this layer's combine forward, its combine backward for this
// layer's pre-dispatch backward). Nothing here is fitted: the pieces are the cost model's.
#pragma once

#include <vector>

#include "costmodel/layer_cost.h"
#include "costmodel/moe_cost.h"

namespace ptdp::costmodel {

// One mixture layer's work in the pieces the combined step interleaves, seconds.
struct MoeLayerPhases {
  // Compute stream. Pre-dispatch: the attention block with its norms, the shared expert, the
  // router and the permute; its backward without, then with only, the weight gradients (and
  // with the selective recomputation's redo of the attention core).
  Seconds pre_forward = 0, pre_backward = 0, pre_weight = 0;
  // The experts (grouped GEMMs, SwiGLU, unpermute): forward, input gradient, weight gradient.
  Seconds experts_forward = 0, experts_backward = 0, experts_weight = 0;
  // Communication stream, each way: the dispatch (all-to-all, with etp > 1 the all-gather) and
  // the combine (all-to-all back, the reduce-scatter); their backwards move as many bytes.
  Seconds dispatch = 0, combine = 0;
  Seconds Serial() const {
    return pre_forward + pre_backward + pre_weight + experts_forward + experts_backward +
           experts_weight + 2 * (dispatch + combine);
  }
  Seconds Communication() const { return 2 * (dispatch + combine); }
};

// The phases from the pieces PricePieces prices: `attention` the layer without the experts,
// `parts` the experts' compute, `comm` their collectives, `redo` the selective recomputation's
// forward of the attention core (zero without).
MoeLayerPhases MoeLayerPhasesOf(const PieceCost& attention, const ExpertMlpParts& parts,
                                const ExpertComm& comm, const ComputeBreakdown& redo);

// What running n mixture layer pairs as the combined step saves against running the forward and
// the backward one after the other, for n = 0 .. max_pairs: n Serial() less the two-stream replay
// of the n pairs above, less OverlapStretch(slowdown) of each second of communication hidden
// behind compute (the software profile's overlap_compute_slowdown, as for the data-parallel
// buckets). Never negative.
std::vector<Seconds> PairedLayerSavings(const MoeLayerPhases& phases, int max_pairs,
                                        double slowdown);

}  // namespace ptdp::costmodel
