// A mixture layer's shared expert (model.moe_shared_ffn_hidden; Megatron-Core's SharedExpertMLP),
// as runtime/model/moe_layer.cc runs it: a SwiGLU MLP of fs / t features on every token of the
// microbatch, read from the router's input (gathered over the tensor group again, as the shared
// expert's own column-parallel fc1 gathers it), its output's partial sums added to the routed
// experts' before the g reduction. With a gate (model.moe_shared_gate, Qwen2-MoE's
// shared_expert_gate) each token's output is scaled by sigmoid(x . w_gate), a scalar per token
// alike on every tensor rank, so it scales the partial sums as it would their total.
#pragma once

#include "runtime/model/gpt_layers.h"

namespace ptdp::runtime {

// Whether the backward rebuilds the shared expert's inside (recompute_modules shared_experts, or
// moe, which rebuilds the whole block).
bool RedoesSharedExpert(const LayerCtx& c);

// The shared expert's inside into the stash (tagged `tag`): fc1 on the gathered router input
// (st->ln2_out), then SwiGLU; with `gate`, the gate of each row too. The forward runs it, and
// the backward again under RedoesSharedExpert.
Status SharedInsideForward(const LayerCtx& c, const LayerWeights& w, MemTag tag, LayerStash* st,
                           Tensor* gate);

// Its forward: the inside, then fc2 (gated with a gate), added to `mlp` [N][h]; the inside dropped
// after fc2 under RedoesSharedExpert.
Status SharedForward(const LayerCtx& c, const LayerWeights& w, MemTag tag, LayerStash* st,
                     TensorRef mlp);

// Its backward from the gathered output gradient dout [N][h]: its weights' gradients, and its
// input gradient's partial sums into dln [N][h].
Status SharedBackward(const LayerCtx& c, const LayerWeights& w, const LayerGrads& g,
                      const LayerStash* st, ConstRef dout, TensorRef dln);

}  // namespace ptdp::runtime
