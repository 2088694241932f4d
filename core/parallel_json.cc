// The contract's "layout" object (LayoutToJson, LayoutFromJson: core/parallel.h), apart from
// ParallelConfig's rules and text in parallel.cc.
#include <string>

#include "core/interleaved_order.h"
#include "core/parallel.h"

namespace ptdp {

namespace {

// DefaultMicrobatchGroup for an interleaved layout with a valid microbatch count whose group is
// not pp; 0 otherwise.
int64_t MicrobatchGroupToState(const ParallelConfig& c) {
  if (c.schedule != ScheduleKind::kInterleaved || c.mbs < 1 || c.dp < 1 || c.pp < 1) return 0;
  const int64_t m = c.Microbatches(), g = m >= c.pp ? DefaultMicrobatchGroup(m, c.pp) : c.pp;
  return g == c.pp ? 0 : g;
}

}  // namespace

OrderedJson LayoutToJson(const ParallelConfig& c) {
  OrderedJson j;
  j["tp"] = c.tp;
  j["pp"] = c.pp;
  j["dp"] = c.dp;
  if (c.cp > 1) j["cp"] = c.cp;  // plans without context parallelism stay as they were
  if (c.ep > 1) j["ep"] = c.ep;  // likewise without expert parallelism
  if (c.etp > 0 && c.etp != c.tp) j["etp"] = c.etp;
  j["mbs"] = c.mbs;
  j["vp"] = c.vp;
  j["schedule"] = ScheduleName(c.schedule);
  j["recompute"] = RecomputeName(c.recompute);
  if (c.recompute_modules != 0) j["recompute_modules"] = RecomputeModulesText(c.recompute_modules);
  j["scatter_gather"] = c.scatter_gather;
  j["sequence_parallel"] = c.sequence_parallel;
  j["distributed_optimizer"] = c.distributed_optimizer;
  j["grad_accumulation_fusion"] = c.grad_accumulation_fusion;
  j["fused_attention"] = c.fused_attention;
  j["precision"] = PrecisionName(c.precision);
  j["first_stage_layers"] = c.first_stage_layers;
  j["last_stage_layers"] = c.last_stage_layers;
  if (!c.stage_layers.empty()) j["stage_layers"] = c.stage_layers;  // old plans stay as they were
  if (c.grad_reduce_bf16) j["grad_reduce_bf16"] = true;             // likewise
  if (c.optimizer_state_bf16) j["optimizer_state_bf16"] = true;     // likewise
  if (c.fsdp) j["fsdp"] = true;                                     // likewise
  if (c.optimizer_instances > 1) j["optimizer_instances"] = c.optimizer_instances;  // likewise
  if (c.moe_a2a_overlap) j["moe_a2a_overlap"] = true;                               // likewise
  if (c.moe_dispatcher != MoeDispatcher::kAllToAll) {
    j["moe_dispatcher"] = MoeDispatcherName(c.moe_dispatcher);
  }
  if (c.moe_shared_expert_overlap) j["moe_shared_expert_overlap"] = true;  // likewise
  // Interleaving with m % p != 0: the microbatch group Megatron-Core is told to use (its default,
  // p, is left unsaid), a function of the layout written out so the plan states it.
  if (const int64_t g = MicrobatchGroupToState(c); g != 0) j["microbatch_group"] = g;
  return j;
}

Result<ParallelConfig> LayoutFromJson(const Json& j, const std::string& path,
                                      const ParallelConfig& base) {
  ParallelConfig c = base;
  JsonObjectReader r(j, path);
  std::string schedule = ScheduleName(c.schedule), recompute = RecomputeName(c.recompute),
              precision = PrecisionName(c.precision);
  r.Required("tp", &c.tp);
  r.Required("pp", &c.pp);
  r.Required("dp", &c.dp);
  r.Optional("cp", &c.cp);
  r.Optional("ep", &c.ep);
  r.Optional("etp", &c.etp);
  r.Required("mbs", &c.mbs);
  r.Optional("vp", &c.vp);
  r.Optional("schedule", &schedule);
  r.Optional("recompute", &recompute);
  std::string modules = RecomputeModulesText(c.recompute_modules);
  r.Optional("recompute_modules", &modules);
  r.Optional("scatter_gather", &c.scatter_gather);
  r.Optional("sequence_parallel", &c.sequence_parallel);
  r.Optional("distributed_optimizer", &c.distributed_optimizer);
  r.Optional("grad_accumulation_fusion", &c.grad_accumulation_fusion);
  r.Optional("fused_attention", &c.fused_attention);
  r.Optional("grad_reduce_bf16", &c.grad_reduce_bf16);
  r.Optional("optimizer_state_bf16", &c.optimizer_state_bf16);
  r.Optional("fsdp", &c.fsdp);
  r.Optional("optimizer_instances", &c.optimizer_instances);
  r.Optional("moe_a2a_overlap", &c.moe_a2a_overlap);
  r.Optional("moe_shared_expert_overlap", &c.moe_shared_expert_overlap);
  std::string dispatcher = MoeDispatcherName(c.moe_dispatcher);
  r.Optional("moe_dispatcher", &dispatcher);
  r.Optional("precision", &precision);
  r.Optional("first_stage_layers", &c.first_stage_layers);
  r.Optional("last_stage_layers", &c.last_stage_layers);
  r.Optional("stage_layers", &c.stage_layers);
  int64_t group = -1;
  r.Optional("microbatch_group", &group);
  PTDP_RETURN_IF_ERROR(r.Finish());
  auto pr = ParsePrecision(precision, path + ".precision");
  if (!pr.ok()) return pr.status();
  c.precision = *pr;
  auto s = ParseSchedule(schedule);
  if (!s.ok()) return s.status().WithPrefix(path);
  c.schedule = *s;
  auto dispatch = ParseMoeDispatcher(dispatcher);
  if (!dispatch.ok()) return dispatch.status().WithPrefix(path);
  c.moe_dispatcher = *dispatch;
  auto rc = ParseRecompute(recompute);
  if (!rc.ok()) return rc.status().WithPrefix(path);
  c.recompute = *rc;
  auto mods = ParseRecomputeModules(modules, path + ".recompute_modules");
  if (!mods.ok()) return mods.status();
  c.recompute_modules = *mods;
  // The group is not a choice: a stated one must be the one the layout implies.
  if (group != -1 && group != MicrobatchGroupToState(c)) {
    const int64_t want = MicrobatchGroupToState(c);
    return Status::Invalid(path + ".microbatch_group: " + std::to_string(group) +
                           (want == 0
                                ? std::string(" stated, but this layout takes its microbatches "
                                              "in groups of pp (leave the key out)")
                                : " but this layout's group is " + std::to_string(want)));
  }
  return c;
}

}  // namespace ptdp
