// The later Megatron-LM options a software profile's runs use (core/software.h
// SoftwareSearchDefaults), turned on in a search's options: `ptdp plan --software megatron-core`
// searches them without the flags; a flag still turns an option on for any stack.
#pragma once

#include "core/software.h"
#include "planner/search.h"

namespace ptdp::planner {

inline void ApplySoftwareSearchDefaults(const SoftwareProfile& sw, SearchOptions* o) {
  o->sequence_parallel = o->sequence_parallel || sw.search.sequence_parallel.value;
  o->selective_recompute = o->selective_recompute || sw.search.selective_recompute.value;
  o->distributed_optimizer = o->distributed_optimizer || sw.search.distributed_optimizer.value;
  o->fused_attention = o->fused_attention || sw.search.fused_attention.value;
  o->grad_accumulation_fusion =
      o->grad_accumulation_fusion || sw.search.grad_accumulation_fusion.value;
  o->context_parallel = o->context_parallel || sw.search.context_parallel.value;
}

}  // namespace ptdp::planner
