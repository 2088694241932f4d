// `--fix tp=8,pp=64,mbs=1,vp=1,...`: the parts of a layout the user fixes; the rest is searched.
// Keys: tp, pp, dp, cp, ep, etp, mbs, vp (positive integers; cp > 1 implies fused_attention; ep
// and etp for a mixture-of-experts model, etp compared as ParallelConfig::ExpertTp), recompute
// (none|full|selective), schedule (gpipe|1f1b|interleaved|zb-h1|zb-h2|zb-v), scatter_gather,
// sequence_parallel, distributed_optimizer, fsdp, optimizer_instances (a positive integer: the
// distributed optimizer's instances, never searched), grad_accumulation_fusion, grad_reduce_bf16,
// optimizer_state_bf16, fused_attention, moe_a2a_overlap, moe_shared_expert_overlap (on|off),
// moe_dispatcher
// (alltoall|deepep), precision (fp32|bf16|fp16), first_stage_layers, last_stage_layers (integers >=
// 0; 0: the even share; uneven stages), stage_layers (positive integers joined by '/', one per
// pipeline stage: "9/3/8/4"; fixes pp to their number; vp = 1 schedules only; exclusive with the
// first/last form).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "core/status.h"

namespace ptdp::planner {

struct FixedLayout {
  std::optional<int> tp, pp, dp, cp, ep, etp, mbs, vp, first_stage_layers, last_stage_layers,
      optimizer_instances;
  std::optional<ScheduleKind> schedule;
  std::optional<Recompute> recompute;
  std::optional<uint8_t> recompute_modules;  // RecomputeModule bits; implies recompute=selective
  std::optional<MoeDispatcher> moe_dispatcher;
  std::optional<bool> scatter_gather, sequence_parallel, distributed_optimizer, fsdp,
      grad_accumulation_fusion, grad_reduce_bf16, optimizer_state_bf16, fused_attention,
      moe_a2a_overlap, moe_shared_expert_overlap;
  std::optional<Precision> precision;
  std::optional<std::vector<int>> stage_layers;
  bool Any() const {
    return tp || pp || dp || cp || ep || etp || mbs || vp || schedule || recompute ||
           recompute_modules || scatter_gather || sequence_parallel || distributed_optimizer ||
           fsdp || grad_accumulation_fusion || grad_reduce_bf16 || optimizer_state_bf16 ||
           fused_attention || moe_a2a_overlap || moe_shared_expert_overlap || moe_dispatcher ||
           precision || first_stage_layers || last_stage_layers || stage_layers ||
           optimizer_instances;
  }
  // Whether `c` agrees with every fixed part.
  bool Admits(const ParallelConfig& c) const;
};

// Errors name the key and the reason: "--fix: tp: expected a positive integer, got \"x\"".
Result<FixedLayout> ParseFix(const std::string& text);

}  // namespace ptdp::planner
