// The mixture-of-experts half of a layer (model.moe_experts; docs/moe.md "In the runtime"), in
// place of the MLP half of gpt_layers.cc, as Megatron-Core runs it with the experts split over the
// tensor group (etp = tp, its default), dropless:
//
//   ln2 -> router ([E][h], on this rank's rows: R of them under sequence parallelism) -> the top
//   k of each token's logits and their softmax (kernels/reference/moe.h) -> the tokens gathered
//   over the tensor group, copied into the experts' order (each token once per chosen expert)
//   -> each expert's fc1 (column-parallel) and SwiGLU, times the token's probability -> fc2
//   (row-parallel) -> the copies added back into their tokens' rows -> the g reduction (a
//   reduce-scatter under sequence parallelism) -> dropout and the residual.
//
// The probability multiplies the activation inside the expert, as Megatron-Core's grouped MLP
// does, so its gradient comes from fc2's input side (the stash holds it) and needs no expert
// output. Which tokens go to which expert is read on the host (one download of the chosen
// indices per forward and per backward: the sizes of the experts' GEMMs), as Megatron-Core's
// dropless dispatcher reads its token counts; the backward chooses again from the stashed
// logits (the same choice), so the indices are not kept. A shared expert
// (model.moe_shared_ffn_hidden, no gate) is a SwiGLU MLP on every token whose partial sums join the
// routed experts' before g.
//
// With expert parallelism (LayerCtx::ep, ep > 1) each rank holds E / ep experts, and the copies
// of the route (after the gather over the tensor group, so tensor rank j exchanges with tensor rank
// j of the other members) travel to their experts' ranks and back by point-to-point all-to-alls,
// each with its probability; the probability gradients come back the same way. The counts per
// expert are all-gathered over the group first (Megatron-Core's alltoall dispatcher's). What a
// rank's experts process then depends on the routing, so the ledger's balanced figure is what
// the memory check cannot hold them to (docs/moe.md). Internal to runtime/model.
#pragma once

#include "runtime/model/gpt_layers.h"

namespace ptdp::runtime {

// REQUIRES: st->x2 holds the attention half's output. Fills the stash (core/experts.h
// ExpertActivations) and writes y [R][h] (allocated by `out` here when empty).
Status MoeBlockForward(const LayerCtx& c, const LayerWeights& w, int layer, MemTag tag,
                       LayerStash* st, const LayerOutput& out, TensorRef y);
// dy [R][h] -> *dx2 (the gradient at ln2's input plus the residual's); the router's and the
// experts' weight gradients accumulate.
Status MoeBlockBackward(const LayerCtx& c, const LayerWeights& w, const LayerGrads& g,
                        LayerStash* st, ConstRef dy, Tensor* dx2);

}  // namespace ptdp::runtime
