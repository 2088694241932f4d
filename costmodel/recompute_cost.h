// What selective recomputation redoes in one layer's backward (ParallelConfig::recompute_modules,
// core/parallel.h RecomputeModule), priced from the same pieces as the layer's forward.
#pragma once

#include "core/hardware.h"
#include "core/model.h"
#include "core/parallel.h"
#include "costmodel/cost_table.h"

namespace ptdp::costmodel {

// One layer of `m`'s kind (as one context-parallel rank sees it) on one rank of `c`:
// - core_attn: the attention core's forward (AttentionCoreForwardCost; with fused attention the
//   kernel's forward, FusedAttentionCost);
// - mla_up_proj: the up projections' GEMMs (MlaProjections' second and fourth) at the Linears'
//   rate, and the pass that assembles q and k with their rotary parts (read and write both);
// - mlp (a dense layer): fc1 and fc2 at the Linears' rate, the activation's forward, the norm
//   inside the module, the FP8 casts of its two inputs in fp8 training, and `mlp_tp_comm`, the
//   MLP's own tensor-parallel collectives (the caller's: half the dense layer's forward tp_comm);
// - moe_act (a mixture layer): SwiGLU's forward on the experts' N token copies;
// - layernorm (a mixture layer): its pre-MLP norm's forward (read its input, write its output);
// - moe (a mixture layer): `mixture.block` and `mixture.shared`, the MoE block's forward with its
//   exchanges (ExpertMlpCost) and its shared expert's (SharedExpertCost), as the layer's forward
//   runs them (the caller's);
// - shared_experts (a mixture layer): `mixture.shared` (again with moe: Megatron-Core's
//   checkpoint of the shared expert then nests inside the block's, and runs once more).
// Zero without selective recomputation.
struct MixtureForward {
  ComputeBreakdown block, shared;
};
ComputeBreakdown SelectiveRecomputeCost(const ModelSpec& m, const HardwareProfile& hw,
                                        const ParallelConfig& c, Seconds mlp_tp_comm,
                                        const MixtureForward& mixture = {});

}  // namespace ptdp::costmodel
