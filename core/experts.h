// Mixture-of-experts shapes (ModelSpec::moe_experts > 0; docs/moe.md): what one rank holds and
// keeps of a layer's experts under expert parallelism (ParallelConfig::ep, etp), in the same lists
// core/shapes.h gives for the dense layer, so the ledger and the cost model count them once.
//
// A rank of a stage holds the router ([E, h], on every rank, a dense parameter) and E / ep experts,
// each SwiGLU's fc1 [2 f / etp, h] (gate and up) and fc2 [h, f / etp], f = moe_ffn_hidden. Per
// microbatch a rank routes its T0 tokens (b s / cp, split over tp by sequence parallelism) to k
// experts each; Megatron-Core's alltoall dispatcher sends each copy to the rank holding its expert
// (all-to-all over ep) and gathers them over the etp group, so a rank's experts run on
// N = T0 k etp token copies in all, N / (E / ep) each when the router balances its load (assumed:
// the auxiliary load-balancing loss Megatron-Core trains with aims at it; a dropless router's
// imbalance is not modelled).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model.h"
#include "core/parallel.h"
#include "core/shapes.h"

namespace ptdp {

// T0: the tokens of a microbatch one rank routes: b s / cp, over tp with sequence parallelism.
int64_t RoutedTokens(const ModelSpec& m, const ParallelConfig& c);
// Token dropping (ModelSpec::moe_capacity_factor): each expert's capacity in a routing unit of
// `tokens` tokens, Megatron-Core's get_capacity(tokens k, E, factor) = ceil(tokens k / E *
// factor) (moe_utils.py), in its order of operations; the runtime's router and the ledger both
// read it. A capacity over `tokens` drops nothing (and pads every expert to all of them).
int64_t ExpertCapacity(int64_t tokens, int topk, int experts, double factor);
// The copies a unit of `tokens` tokens gives its experts with the router's load balanced: tokens
// k dropless; at most E C when dropping; exactly E min(C, tokens) padded to capacity.
int64_t UnitCopies(const ModelSpec& m, int64_t tokens);
// The copies of one rank's T0 tokens: T0 k, or its share of the microbatch's units' copies
// (UnitCopies of each sequence's s / cp tokens, b of them, over tp under sequence parallelism).
int64_t RoutedCopies(const ModelSpec& m, const ParallelConfig& c);
// N = RoutedCopies etp (T0 k etp dropless): the token copies one rank's experts process per
// microbatch (above).
int64_t ExpertTokens(const ModelSpec& m, const ParallelConfig& c);
// E / ep.
int LocalExperts(const ModelSpec& m, const ParallelConfig& c);

// The router and one local expert's fc1 and fc2 on one rank, unnamed: AppendExpertParameters names
// them and repeats the expert E / ep times; LayerParameterCounts multiplies instead (the search
// counts a layer for every layout it scores, and DeepSeek-V3's 256 experts made the named list
// most of its time).
struct ExpertParameterShapes {
  ParamTensor router, fc1, fc2;
};
ExpertParameterShapes ExpertShapes(const ModelSpec& m, const ParallelConfig& c);

// The MoE block's parameters on one rank, in place of the dense MLP's fc1 and fc2: the router,
// then each local expert's fc1 and fc2, each marked `expert` and named by its global index
// (expert-parallel rank ep_rank holds experts [ep_rank E / ep, (ep_rank + 1) E / ep)).
void AppendExpertParameters(const ModelSpec& m, const ParallelConfig& c, const std::string& prefix,
                            std::vector<ParamTensor>* ps, int ep_rank = 0);

// What the MoE block keeps for its backward, in place of the dense MLP's fc1 input, activation
// input and fc2 input: the router's input (the LayerNorm's output, s b h or its s/t slice), its
// fp32 logits and the top-k probabilities (T0 E and T0 k), then on the expert side the dispatched
// tokens (fc1's input, N h), SwiGLU's input (N 2f / etp) and fc2's input (N f / etp); a shared
// expert's SwiGLU and fc2 inputs (b s 2 f_s / t, b s f_s / t) and, in fp8 training, its fc1
// input's FP8 copy. Less what recompute_modules drops: layernorm the router's input, moe_act
// fc2's input, shared_experts the shared expert's, moe all but the router's input.
std::vector<ActTensor> ExpertActivations(const ModelSpec& m, const ParallelConfig& c);
// The last of those, SwiGLU's output (fc2's input, N f / etp): what recompute_modules moe_act
// drops from them and rebuilds in the backward.
ActTensor ExpertActOutput(const ModelSpec& m, const ParallelConfig& c);
// A mixture layer's pre-MLP norm output, the router's input ([s b / t, h] under sequence
// parallelism): what recompute_modules layernorm drops from the stash and rebuilds.
ActTensor RouterInput(const ModelSpec& m, const ParallelConfig& c);
// What selective recomputation rebuilds of a mixture layer at once, those of them `c`
// recomputes: SwiGLU's output (moe_act), the shared expert's inside (shared_experts), everything
// ExpertActivations lists but the router's input (moe), and the router's input (layernorm).
std::vector<ActTensor> ExpertRecomputed(const ModelSpec& m, const ParallelConfig& c);

// Parameter elements of one rank's experts in one layer (what is reduced over the expert
// data-parallel group), and the same for all layers of pipeline rank `pp_rank`.
int64_t LayerExpertElements(const ModelSpec& m, const ParallelConfig& c);
int64_t StageExpertElements(const ModelSpec& m, const ParallelConfig& c, int pp_rank);

// The bytes one rank sends in one all-to-all of the dispatcher (and receives back in the combine):
// its token copies (RoutedCopies: T0 k dropless) of h elements in the compute dtype, `act_bytes`
// each.
int64_t DispatchBytes(const ModelSpec& m, const ParallelConfig& c, int act_bytes);

// How many nodes other than its own a routed token's k experts lie on, in expectation, when the
// expert-parallel group spans `nodes` nodes of its ranks (experts placed in order, E / nodes on
// each) and the router picks uniformly: k of the E experts, or with group-limited routing k of
// the experts of moe_router_group_topk groups picked uniformly (Megatron-Bridge's benchmarks draw
// random router logits, "force-balance" in their tables, which makes both uniform). What the DeepEP
// dispatcher sends over a node's NICs: each token once to each such node. For n nodes each hit
// with probability P it is (n - 1) P; P = 1 - C(pool - a, k) / C(pool, k) for a node with a of the
// pool's experts, averaged over the groups picked when groups and nodes nest (else the ungrouped
// P). 0 for one node.
double RemoteNodesPerToken(const ModelSpec& m, int nodes);

// The global ranks of rank 0's groups on the expert grid of a stage (etp-ep-edp, the stage's
// tp cp dp ranks consecutive): the expert-parallel group {0, etp, ..., (ep - 1) etp}, the expert
// tensor group {0, ..., etp - 1} and the expert data-parallel group {0, ep etp, ...}.
std::vector<int> ExpertParallelGroup(const ParallelConfig& c);
std::vector<int> ExpertTensorGroup(const ParallelConfig& c);
std::vector<int> ExpertDataGroup(const ParallelConfig& c);

}  // namespace ptdp
