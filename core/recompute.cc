// Selective recomputation's modules (core/parallel.h RecomputeModule): their names and the rules
// Validate applies to them.
#include <algorithm>
#include <string>
#include <vector>

#include "core/model.h"
#include "core/parallel.h"

namespace ptdp {
namespace {

struct ModuleName {
  RecomputeModule module;
  const char* name;
};
// Megatron-Core's names (transformer_config.py recompute_modules), in its order.
constexpr ModuleName kModules[] = {{kRecomputeCoreAttn, "core_attn"},
                                   {kRecomputeMlaUpProj, "mla_up_proj"},
                                   {kRecomputeMlp, "mlp"},
                                   {kRecomputeMoeAct, "moe_act"},
                                   {kRecomputeLayernorm, "layernorm"},
                                   {kRecomputeMoe, "moe"},
                                   {kRecomputeSharedExperts, "shared_experts"}};

}  // namespace

std::string RecomputeModulesText(uint8_t modules) {
  std::string out;
  for (const ModuleName& m : kModules) {
    if ((modules & m.module) == 0) continue;
    if (!out.empty()) out += '+';
    out += m.name;
  }
  return out;
}

Result<uint8_t> ParseRecomputeModules(const std::string& s, const std::string& field) {
  uint8_t modules = 0;
  size_t begin = 0;
  // Every name between '+'s, an empty one included ("mlp+" is refused, not read as "mlp").
  while (!s.empty() && begin <= s.size()) {
    const size_t end = std::min(s.find('+', begin), s.size());
    const std::string name = s.substr(begin, end - begin);
    bool known = false;
    for (const ModuleName& m : kModules) {
      if (name == m.name) modules |= m.module, known = true;
    }
    if (!known) {
      return Status::Invalid(
          field + ": '" + name +
          "' is not one of core_attn, mla_up_proj, mlp, moe_act, layernorm, moe, shared_experts "
          "(joined by +)");
    }
    begin = end + 1;
  }
  return modules;
}

Status ValidateRecomputeModules(const ParallelConfig& c, const ModelSpec& m) {
  auto bad = [](const std::string& s) { return Status::Invalid("recompute_modules: " + s); };
  if (c.recompute_modules != 0 && c.recompute != Recompute::kSelective) {
    return bad(std::string("needs recompute=selective, not ") + RecomputeName(c.recompute));
  }
  if (c.recompute_modules & ~kRecomputeAllModules) {
    return bad("holds an unknown module bit");
  }
  // With fused attention core_attn drops only the kernel's log-sum-exp and runs the kernel's
  // forward again (Megatron-Core checkpoints the core whatever its backend); under context
  // parallelism that forward would be the ring's, which is not priced.
  if (c.fused_attention && c.Recomputes(kRecomputeCoreAttn) && c.cp > 1) {
    return Status::Invalid(
        "recompute: selective recomputation of core_attn with context parallelism (cp > 1) is not "
        "modelled; use recompute=none or full, or recompute_modules without core_attn");
  }
  if (c.Recomputes(kRecomputeMlaUpProj) && !m.IsMla()) {
    return bad("mla_up_proj needs multi-latent attention (Megatron-Core refuses it otherwise)");
  }
  if (c.Recomputes(kRecomputeMoeAct) && !m.IsMoe()) {
    return bad("moe_act needs a mixture of experts");
  }
  if (c.Recomputes(kRecomputeLayernorm) && (!m.IsMoe() || m.IsMla())) {
    return bad(
        "layernorm is modelled for a mixture of experts without multi-latent attention "
        "(its pre-MLP norm; elsewhere the norms are fused into the Linears after them)");
  }
  if (c.Recomputes(kRecomputeMoe) && !m.IsMoe()) {
    return bad("moe needs a mixture of experts");
  }
  // Megatron-Core's own refusals (transformer_config.py at d98e8a64): the combined 1F1B splits
  // the block into the pieces it overlaps, and a shared expert beside the dispatcher is not
  // checkpointed.
  if (c.Recomputes(kRecomputeMoe) && c.moe_a2a_overlap) {
    return bad(
        "moe with moe_a2a_overlap: Megatron-Core refuses it (disable moe in "
        "recompute_modules when enabling overlap_moe_expert_parallel_comm)");
  }
  if (c.Recomputes(kRecomputeSharedExperts) && !m.HasSharedExpert()) {
    return bad("shared_experts needs a shared expert (moe_shared_ffn_hidden)");
  }
  if (c.Recomputes(kRecomputeSharedExperts) && c.moe_shared_expert_overlap) {
    return bad(
        "shared_experts with moe_shared_expert_overlap: Megatron-Core refuses it (shared "
        "experts recompute cannot work with --moe-shared-expert-overlap)");
  }
  if (c.Recomputes(kRecomputeMoeAct) && c.precision == Precision::kFp8) {
    return bad(
        "moe_act with precision fp8: Megatron-Core refuses it with delayed scaling, the FP8 "
        "recipe ptdp prices and emits");
  }
  return Status::Ok();
}

}  // namespace ptdp
