// The recomputations the layout search tries (planner/search.cc): none, full, selective and its
// module sets, and the rule that skips a set redoing more than one that already fits.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model.h"
#include "core/parallel.h"
#include "planner/search.h"

namespace ptdp::planner {

// One recomputation the search tries: none, full, or selective with its modules
// (ParallelConfig::recompute_modules; 0: core_attn).
struct RecomputeChoice {
  Recompute kind = Recompute::kNone;
  uint8_t modules = 0;
};

// The recomputations to try, as --fix and the options allow: none, full, selective of the
// attention core (Megatron-Core's default) and, with o.recompute_modules, selective of each
// non-empty set of the other modules `m` has (mla_up_proj with multi-latent attention, mlp with
// dense MLPs, moe_act with experts outside FP8, which Megatron-Core refuses with delayed scaling,
// moe with experts, shared_experts with a shared expert); moe not beside moe_act or
// shared_experts, whose tensors it drops already (they would only add their own passes).
// Each set comes after its subsets (ascending bits).
std::vector<RecomputeChoice> RecomputeChoices(const ModelSpec& m, const SearchOptions& o,
                                              Precision precision);

// Selective recomputation's modules as a set: 0 is core_attn alone (Megatron-Core's default).
uint8_t ModuleSet(const RecomputeChoice& rc);

// A selective choice that redoes a strict superset of the modules of one that fits (`fitted`)
// with every other choice the same: it frees memory the layout does not need and only adds
// time, so it is never faster (RecomputeChoices lists every set after its subsets).
bool RecomputesMoreThanAFit(const RecomputeChoice& rc, const std::vector<uint8_t>& fitted);

}  // namespace ptdp::planner
