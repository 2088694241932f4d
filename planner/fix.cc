#include "planner/fix.h"

#include <charconv>
#include <set>
#include <sstream>

namespace ptdp::planner {

bool FixedLayout::Admits(const ParallelConfig& c) const {
  return (!tp || *tp == c.tp) && (!pp || *pp == c.pp) && (!dp || *dp == c.dp) &&
         (!cp || *cp == c.cp) && (!ep || *ep == c.ep) && (!etp || *etp == c.ExpertTp()) &&
         (!mbs || *mbs == c.mbs) && (!vp || *vp == c.vp) &&
         (!schedule || *schedule == c.schedule) && (!recompute || *recompute == c.recompute) &&
         (!recompute_modules || *recompute_modules == c.recompute_modules) &&
         (!scatter_gather || *scatter_gather == c.scatter_gather) &&
         (!sequence_parallel || *sequence_parallel == c.sequence_parallel) &&
         (!distributed_optimizer || *distributed_optimizer == c.distributed_optimizer) &&
         (!fsdp || *fsdp == c.fsdp) &&
         (!optimizer_instances || *optimizer_instances == c.optimizer_instances) &&
         (!grad_accumulation_fusion || *grad_accumulation_fusion == c.grad_accumulation_fusion) &&
         (!grad_reduce_bf16 || *grad_reduce_bf16 == c.grad_reduce_bf16) &&
         (!optimizer_state_bf16 || *optimizer_state_bf16 == c.optimizer_state_bf16) &&
         (!fused_attention || *fused_attention == c.fused_attention) &&
         (!moe_a2a_overlap || *moe_a2a_overlap == c.moe_a2a_overlap) &&
         (!moe_shared_expert_overlap ||
          *moe_shared_expert_overlap == c.moe_shared_expert_overlap) &&
         (!moe_dispatcher || *moe_dispatcher == c.moe_dispatcher) &&
         (!precision || *precision == c.precision) &&
         (!first_stage_layers || *first_stage_layers == c.first_stage_layers) &&
         (!last_stage_layers || *last_stage_layers == c.last_stage_layers) &&
         (!stage_layers || *stage_layers == c.stage_layers);
}

namespace {

// "9/3/8/4": one positive layer count per stage.
Result<std::vector<int>> ParseStageLayers(const std::string& value) {
  std::vector<int> counts;
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, '/')) {
    int x = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), x);
    if (ec != std::errc() || p != item.data() + item.size() || x < 0) {
      return Status::Invalid(
          "--fix: stage_layers: expected layer counts joined by '/' (9/3/8/4), got \"" + value +
          "\"");
    }
    counts.push_back(x);
  }
  if (counts.size() < 2 || value.back() == '/') {
    return Status::Invalid(
        "--fix: stage_layers: expected a count for each of 2 or more stages (9/3/8/4), got \"" +
        value + "\"");
  }
  return counts;
}

// stage_layers against the other fixed keys: one form of the split; with vp = 1 (or unset) pp
// its count and a schedule of one chunk per rank; with a fixed vp > 1 (interleaved) pp vp its
// count, pp the count / vp.
Status CheckFixedStageLayers(FixedLayout* f) {
  const std::vector<int>& counts = *f->stage_layers;
  auto bad = [](const std::string& s) { return Status::Invalid("--fix: stage_layers: " + s); };
  if (f->first_stage_layers || f->last_stage_layers) {
    return bad("excludes first_stage_layers and last_stage_layers (give one form of the split)");
  }
  const int vp = f->vp.value_or(1);
  if (vp > 1) {
    if (f->schedule && *f->schedule != ScheduleKind::kInterleaved) {
      return bad(std::string("per-virtual-stage counts (vp=") + std::to_string(vp) +
                 ") need schedule=interleaved, not " + ScheduleName(*f->schedule));
    }
    if (counts.size() % size_t(vp) != 0) {
      return bad(std::to_string(counts.size()) +
                 " counts is not pp*vp for vp=" + std::to_string(vp) + " (one per virtual stage)");
    }
    const int pp = int(counts.size()) / vp;
    if (f->pp && *f->pp != pp) {
      return bad(std::to_string(counts.size()) + " counts but pp=" + std::to_string(*f->pp) +
                 " and vp=" + std::to_string(vp) + " are fixed (one per virtual stage)");
    }
    f->pp = pp;
    f->schedule = ScheduleKind::kInterleaved;
    return Status::Ok();
  }
  if (f->schedule && (*f->schedule == ScheduleKind::kInterleaved || VShaped(*f->schedule))) {
    return bad(std::string("per-stage counts need a schedule of one chunk per rank, not ") +
               ScheduleName(*f->schedule) + " (or fix vp > 1 for per-virtual-stage counts)");
  }
  if (f->pp && size_t(*f->pp) != counts.size()) {
    return bad(std::to_string(counts.size()) + " counts but pp=" + std::to_string(*f->pp) +
               " is fixed (one per stage)");
  }
  f->pp = int(counts.size());
  return Status::Ok();
}

}  // namespace

Result<FixedLayout> ParseFix(const std::string& text) {
  FixedLayout f;
  std::set<std::string> seen;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return Status::Invalid("--fix: \"" + item + "\" is not key=value");
    }
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    // A repeated key (tp=2,tp=4) is a contradiction, not "the last one wins".
    if (!seen.insert(key).second) {
      return Status::Invalid("--fix: " + key + ": given more than once");
    }
    auto integer = [&](std::optional<int>* out, int least) -> Status {
      int x = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), x);
      if (ec != std::errc() || p != value.data() + value.size() || x < least) {
        return Status::Invalid("--fix: " + key + ": expected a " +
                               (least > 0 ? "positive" : "non-negative") + " integer, got \"" +
                               value + "\"");
      }
      *out = x;
      return Status::Ok();
    };
    auto positive = [&](std::optional<int>* out) { return integer(out, 1); };
    if (key == "tp") {
      PTDP_RETURN_IF_ERROR(positive(&f.tp));
    } else if (key == "pp") {
      PTDP_RETURN_IF_ERROR(positive(&f.pp));
    } else if (key == "dp") {
      PTDP_RETURN_IF_ERROR(positive(&f.dp));
    } else if (key == "cp") {
      PTDP_RETURN_IF_ERROR(positive(&f.cp));
    } else if (key == "ep") {
      PTDP_RETURN_IF_ERROR(positive(&f.ep));
    } else if (key == "etp") {
      PTDP_RETURN_IF_ERROR(positive(&f.etp));
    } else if (key == "mbs") {
      PTDP_RETURN_IF_ERROR(positive(&f.mbs));
    } else if (key == "vp") {
      PTDP_RETURN_IF_ERROR(positive(&f.vp));
    } else if (key == "optimizer_instances") {
      PTDP_RETURN_IF_ERROR(positive(&f.optimizer_instances));
    } else if (key == "first_stage_layers") {
      PTDP_RETURN_IF_ERROR(integer(&f.first_stage_layers, 0));
    } else if (key == "last_stage_layers") {
      PTDP_RETURN_IF_ERROR(integer(&f.last_stage_layers, 0));
    } else if (key == "stage_layers") {
      PTDP_ASSIGN_OR_RETURN(f.stage_layers, ParseStageLayers(value));
    } else if (key == "schedule") {
      auto s = ParseSchedule(value);
      if (!s.ok()) return s.status().WithPrefix("--fix");
      f.schedule = *s;
    } else if (key == "recompute") {
      auto r = ParseRecompute(value);
      if (!r.ok()) return r.status().WithPrefix("--fix");
      f.recompute = *r;
    } else if (key == "recompute_modules") {
      PTDP_ASSIGN_OR_RETURN(f.recompute_modules,
                            ParseRecomputeModules(value, "--fix: recompute_modules"));
    } else if (key == "moe_dispatcher") {
      auto d = ParseMoeDispatcher(value);
      if (!d.ok()) return d.status().WithPrefix("--fix");
      f.moe_dispatcher = *d;
    } else if (key == "precision") {
      auto p = ParsePrecision(value, "--fix: precision");
      if (!p.ok()) return p.status();
      f.precision = *p;
    } else if (key == "scatter_gather" || key == "sequence_parallel" ||
               key == "distributed_optimizer" || key == "fsdp" ||
               key == "grad_accumulation_fusion" || key == "grad_reduce_bf16" ||
               key == "optimizer_state_bf16" || key == "fused_attention" ||
               key == "moe_a2a_overlap" || key == "moe_shared_expert_overlap") {
      if (value != "on" && value != "off") {
        return Status::Invalid("--fix: " + key + ": expected on or off, got \"" + value + "\"");
      }
      std::optional<bool>& slot = key == "scatter_gather"              ? f.scatter_gather
                                  : key == "sequence_parallel"         ? f.sequence_parallel
                                  : key == "distributed_optimizer"     ? f.distributed_optimizer
                                  : key == "fsdp"                      ? f.fsdp
                                  : key == "fused_attention"           ? f.fused_attention
                                  : key == "grad_reduce_bf16"          ? f.grad_reduce_bf16
                                  : key == "optimizer_state_bf16"      ? f.optimizer_state_bf16
                                  : key == "moe_a2a_overlap"           ? f.moe_a2a_overlap
                                  : key == "moe_shared_expert_overlap" ? f.moe_shared_expert_overlap
                                                                       : f.grad_accumulation_fusion;
      slot = value == "on";
    } else {
      return Status::Invalid(
          "--fix: unknown key \"" + key +
          "\" (known: tp, pp, dp, cp, ep, etp, mbs, vp, recompute, recompute_modules, schedule, "
          "scatter_gather, "
          "sequence_parallel, distributed_optimizer, fsdp, optimizer_instances, "
          "grad_accumulation_fusion, grad_reduce_bf16, optimizer_state_bf16, "
          "fused_attention, moe_a2a_overlap, moe_shared_expert_overlap, moe_dispatcher, "
          "precision, first_stage_layers, "
          "last_stage_layers, stage_layers)");
    }
  }
  if (f.stage_layers) PTDP_RETURN_IF_ERROR(CheckFixedStageLayers(&f));
  if (f.recompute_modules) {  // the modules of selective recomputation
    if (f.recompute && *f.recompute != Recompute::kSelective) {
      return Status::Invalid(std::string("--fix: recompute_modules: needs recompute=selective (") +
                             RecomputeName(*f.recompute) + " is fixed)");
    }
    f.recompute = Recompute::kSelective;
  }
  if (f.cp && *f.cp > 1 && f.fused_attention && !*f.fused_attention) {
    return Status::Invalid(
        "--fix: cp: context parallelism needs fused_attention=on (off is fixed)");
  }
  if (f.sequence_parallel && *f.sequence_parallel && f.tp && *f.tp == 1) {
    return Status::Invalid("--fix: sequence_parallel: needs tp > 1 (tp=1 is fixed)");
  }
  return f;
}

}  // namespace ptdp::planner
