#include "core/parallel.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "core/checked.h"
#include "core/fsdp.h"

namespace ptdp {

const char* ScheduleName(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kInterleaved:
      return "interleaved";
    case ScheduleKind::kZbH1:
      return "zb-h1";
    case ScheduleKind::kZbH2:
      return "zb-h2";
    case ScheduleKind::kZbV:
      return "zb-v";
  }
  return "?";
}

Result<ScheduleKind> ParseSchedule(const std::string& s) {
  if (s == "gpipe") return ScheduleKind::kGPipe;
  if (s == "1f1b") return ScheduleKind::k1F1B;
  if (s == "interleaved") return ScheduleKind::kInterleaved;
  if (s == "zb-h1") return ScheduleKind::kZbH1;
  if (s == "zb-h2") return ScheduleKind::kZbH2;
  if (s == "zb-v") return ScheduleKind::kZbV;
  return Status::Invalid("schedule: '" + s +
                         "' is not one of gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v");
}

const char* RecomputeName(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kFull:
      return "full";
    case Recompute::kSelective:
      return "selective";
  }
  return "?";
}

Result<Recompute> ParseRecompute(const std::string& s) {
  if (s == "none") return Recompute::kNone;
  if (s == "full") return Recompute::kFull;
  if (s == "selective") return Recompute::kSelective;
  return Status::Invalid("recompute: '" + s + "' is not one of none, full, selective");
}

const char* MoeDispatcherName(MoeDispatcher d) {
  return d == MoeDispatcher::kDeepEp ? "deepep" : "alltoall";
}

Result<MoeDispatcher> ParseMoeDispatcher(const std::string& s) {
  if (s == "alltoall") return MoeDispatcher::kAllToAll;
  if (s == "deepep") return MoeDispatcher::kDeepEp;
  return Status::Invalid("moe_dispatcher: '" + s + "' is not one of alltoall, deepep");
}

Result<int> ShortEndsVirtualStageLayers(const ModelSpec& m, int pp, int vp, bool embedding,
                                        bool loss, const std::string& field) {
  const int ends = int(embedding) + int(loss);
  const int64_t units = int64_t(m.layers) + ends;  // the embedding and the loss as layers
  const int64_t virtual_stages = int64_t(pp) * vp;
  if (virtual_stages < 1 || units % virtual_stages != 0) {
    return Status::Invalid(
        field + ": with vp = " + std::to_string(vp) + " the " + std::to_string(m.layers) +
        " layers plus " + std::to_string(ends) +
        " (the embedding and/or the loss counted as a layer) do not divide into pp*vp = " +
        std::to_string(virtual_stages) + " virtual stages");
  }
  const int64_t per_virtual = units / virtual_stages;
  if (per_virtual < 2) {
    return Status::Invalid(field + ": with vp = " + std::to_string(vp) +
                           " each virtual stage holds " + std::to_string(per_virtual) +
                           " layer, so the end one fewer would hold none");
  }
  return int(per_virtual);
}

std::string StageLayersText(const std::vector<int>& counts) {
  std::string text;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (r > 0) text += '/';
    text += std::to_string(counts[r]);
  }
  return text;
}

std::vector<std::pair<int, int>> InterleavedShortEnds(const ModelSpec& m, int pp, int vp) {
  std::vector<std::pair<int, int>> splits;
  for (const auto& [e, o] :
       {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
    const Result<int> per = ShortEndsVirtualStageLayers(m, pp, vp, e, o, "");
    if (!per.ok()) continue;
    const int short_rank = *per * vp - 1;
    splits.push_back({e ? short_rank : 0, o ? short_rank : 0});
  }
  return splits;
}

std::vector<std::pair<int, int>> UnevenStageSplits(const ModelSpec& m, int pp) {
  if (pp < 2) return {};
  const int64_t head_layers = (m.vocab + 12 * m.hidden - 1) / (12 * m.hidden);
  const int k = int(std::clamp<int64_t>(head_layers, 2, 8));
  std::set<std::pair<int, int>> splits;
  for (int first_off = 0; first_off <= k; ++first_off) {
    for (int last_off = 0; last_off <= k; ++last_off) {
      if ((m.layers + first_off + last_off) % pp != 0) continue;
      const int q = (m.layers + first_off + last_off) / pp;
      const int first = q - first_off, last = q - last_off;
      if (first < 1 || last < 1) continue;
      if (m.layers % pp == 0 && first == m.layers / pp && last == m.layers / pp) continue;
      splits.insert({first, last});
    }
  }
  return {splits.begin(), splits.end()};
}

// Megatron-LM's --account-for-embedding/loss-in-pipeline-split form (core/parallel.h): each set
// end is one layer short of q = (l + e + o) / pp, the layers of each rank between.
Status ParallelConfig::ValidateInterleavedEnds(const ModelSpec& m, const std::string& field) const {
  auto bad = [](const std::string& s) { return Status::Invalid(s); };
  if (schedule != ScheduleKind::kInterleaved) {
    return bad(field + ": uneven stages with vp > 1 need schedule=interleaved (" +
               ScheduleName(schedule) + " keeps the even split)");
  }
  PTDP_ASSIGN_OR_RETURN(
      const int per_virtual,
      ShortEndsVirtualStageLayers(m, pp, vp, first_stage_layers > 0, last_stage_layers > 0, field));
  const int64_t short_rank = int64_t(per_virtual) * vp - 1;  // one fewer than a rank between
  for (const auto& [name, value] :
       {std::pair<std::string, int>{"first_stage_layers", first_stage_layers},
        {"last_stage_layers", last_stage_layers}}) {
    if (value > 0 && value != short_rank) {
      return bad(name + ": with vp = " + std::to_string(vp) +
                 " the end stage holds one layer fewer than each rank between (" +
                 std::to_string(short_rank + 1) + "), so it must be " + std::to_string(short_rank) +
                 ", got " + std::to_string(value));
    }
  }
  return Status::Ok();
}

Status ParallelConfig::ValidateStageLayers(const ModelSpec& m) const {
  auto bad = [](const std::string& s) { return Status::Invalid("layout.stage_layers: " + s); };
  if (first_stage_layers > 0 || last_stage_layers > 0) {
    return bad("excludes first_stage_layers and last_stage_layers (give one form of the split)");
  }
  if (vp > 1 && schedule != ScheduleKind::kInterleaved) {
    return bad("per-virtual-stage counts (vp = " + std::to_string(vp) +
               ") need schedule=interleaved, not " + ScheduleName(schedule));
  }
  if (pp < 2) return bad("per-stage counts need pp >= 2, got pp = " + std::to_string(pp));
  const int64_t stages = int64_t(pp) * vp;
  if (int64_t(stage_layers.size()) != stages) {
    return bad(std::to_string(stage_layers.size()) +
               " counts for pp*vp = " + std::to_string(stages) + " stages (one per virtual stage)");
  }
  int64_t sum = 0;
  for (size_t r = 0; r < stage_layers.size(); ++r) {
    // With vp > 1 the first virtual stage may hold only the embedding and the last only the
    // head (Megatron-Core's "E|..." and "...|L" layouts); every other stage holds layers.
    const bool end = vp > 1 && (r == 0 || int64_t(r) == stages - 1);
    if (stage_layers[r] < (end ? 0 : 1) || stage_layers[r] > kMaxLayers) {
      return bad("stage " + std::to_string(r) + " holds " + std::to_string(stage_layers[r]) +
                 " layers (at least " + (end ? "0" : "1") + ")");
    }
    sum += stage_layers[r];
  }
  if (sum != m.layers) {
    return bad("the counts sum to " + std::to_string(sum) + " but the model has " +
               std::to_string(m.layers) + " layers");
  }
  return Status::Ok();
}

Status ParallelConfig::ValidateStageSplit(const ModelSpec& m) const {
  auto bad = [](const std::string& s) { return Status::Invalid(s); };
  if (!stage_layers.empty()) return ValidateStageLayers(m);
  PTDP_RETURN_IF_ERROR(
      CheckRange("first_stage_layers", int64_t(first_stage_layers), 0, kMaxLayers));
  PTDP_RETURN_IF_ERROR(CheckRange("last_stage_layers", int64_t(last_stage_layers), 0, kMaxLayers));
  if (!Uneven()) {
    if (m.layers % (int64_t(pp) * vp) != 0) {
      return bad("pp: pp*vp = " + std::to_string(int64_t(pp) * vp) + " does not divide the " +
                 std::to_string(m.layers) + " layers");
    }
    return Status::Ok();
  }
  // Errors name the field that was set (the first one when both are).
  const std::string field = first_stage_layers > 0 ? "first_stage_layers" : "last_stage_layers";
  if (pp < 2) return bad(field + ": uneven stages need pp >= 2");
  if (vp != 1) return ValidateInterleavedEnds(m, field);
  const int64_t given = int64_t(first_stage_layers) + last_stage_layers;
  const int64_t middle_stages = pp - (first_stage_layers > 0) - (last_stage_layers > 0);
  const int64_t middle_layers = m.layers - given;
  const std::string split = "first_stage_layers + last_stage_layers = " + std::to_string(given);
  if (middle_stages == 0) {
    if (middle_layers != 0) {
      return bad("last_stage_layers: " + split + " but the model has " + std::to_string(m.layers) +
                 " layers and pp = 2 leaves no stage between");
    }
    return Status::Ok();
  }
  if (middle_layers < middle_stages) {
    return bad(field + ": " + split + " leaves " + std::to_string(middle_layers) + " of the " +
               std::to_string(m.layers) + " layers for " + std::to_string(middle_stages) +
               " other stages (at least one each)");
  }
  if (middle_layers % middle_stages != 0) {
    return bad(field + ": the other " + std::to_string(middle_stages) +
               " stages cannot share the " + std::to_string(middle_layers) +
               " remaining layers evenly");
  }
  return Status::Ok();
}

Status ParallelConfig::ValidateContextParallel(const ModelSpec& m) const {
  if (cp == 1) return Status::Ok();
  const std::string of = "cp: " + std::to_string(cp);
  if (m.seq_len % (2 * int64_t(cp)) != 0) {
    return Status::Invalid(of + " needs seq_len " + std::to_string(m.seq_len) +
                           " divisible by 2 cp = " + std::to_string(2 * int64_t(cp)) +
                           " (each rank holds two chunks of s / 2cp)");
  }
  if (!fused_attention) {
    return Status::Invalid(of + " needs fused_attention=on (the ring runs in the fused kernel)");
  }
  if (sequence_parallel && (m.seq_len / cp) % tp != 0) {
    return Status::Invalid("sequence_parallel: tp = " + std::to_string(tp) +
                           " does not divide the s / cp = " + std::to_string(m.seq_len / cp) +
                           " tokens of a context-parallel rank");
  }
  return Status::Ok();
}

Status ParallelConfig::ValidateExperts(const ModelSpec& m) const {
  if (moe_shared_expert_overlap) {
    const std::string what = "moe_shared_expert_overlap: ";
    if (!m.IsMoe() || !m.HasSharedExpert()) {
      return Status::Invalid(what +
                             "overlaps a shared expert with the dispatcher, so it needs a "
                             "mixture of experts with one (moe_shared_ffn_hidden > 0)");
    }
    if (moe_a2a_overlap) {  // Megatron-Core's TransformerConfig asserts it (d98e8a64)
      return Status::Invalid(what +
                             "not with moe_a2a_overlap, whose combined 1F1B already puts "
                             "the all-to-alls beside other compute");
    }
  }
  if (moe_a2a_overlap && ep < 2) {
    return Status::Invalid(
        "moe_a2a_overlap: overlaps the expert-parallel all-to-alls, so it needs ep > 1 (a "
        "mixture of experts)");
  }
  if (!m.IsMoe()) {
    if (moe_dispatcher != MoeDispatcher::kAllToAll) {
      return Status::Invalid("moe_dispatcher: " + std::string(MoeDispatcherName(moe_dispatcher)) +
                             " needs a mixture-of-experts model (moe_experts > 0)");
    }
    if (ep > 1 || etp > 0) {
      return Status::Invalid(
          (ep > 1 ? "ep: " + std::to_string(ep) : "etp: " + std::to_string(etp)) +
          " needs a mixture-of-experts model (moe_experts > 0)");
    }
    return Status::Ok();
  }
  if (m.moe_experts % ep != 0) {
    return Status::Invalid("ep: " + std::to_string(ep) + " does not divide the " +
                           std::to_string(m.moe_experts) + " experts");
  }
  const int et = ExpertTp();
  if (m.MoeFfnHidden() % et != 0) {
    return Status::Invalid("etp: " + std::to_string(et) + " does not divide moe_ffn_hidden " +
                           std::to_string(m.MoeFfnHidden()));
  }
  const int64_t stage = int64_t(tp) * cp * dp, split = int64_t(ep) * et;
  if (stage % split != 0) {
    return Status::Invalid("ep: ep*etp = " + std::to_string(split) +
                           " does not divide tp*cp*dp = " + std::to_string(stage) +
                           " (the expert layers fold their grid over a stage's ranks)");
  }
  if (m.DropsTokens() && moe_dispatcher != MoeDispatcher::kAllToAll) {
    // Megatron-Core's TransformerConfig refuses moe_expert_capacity_factor with any other.
    return Status::Invalid(std::string("moe_dispatcher: ") + MoeDispatcherName(moe_dispatcher) +
                           " is dropless; token dropping (model.moe_capacity_factor) runs on the "
                           "alltoall dispatcher");
  }
  if (tp > 1 && !sequence_parallel) {
    return Status::Invalid(
        "sequence_parallel: a mixture-of-experts model with tp > 1 needs it (Megatron-Core)");
  }
  if (SplitsBackward(schedule)) {
    return Status::Invalid(std::string("schedule: ") + ScheduleName(schedule) +
                           " splits the backward, which is not modelled for a mixture of experts");
  }
  return moe_a2a_overlap ? ValidateA2aOverlap(m) : Status::Ok();
}

Status ParallelConfig::ValidateA2aOverlap(const ModelSpec& m) const {
  // Megatron-Core's TransformerConfig.__post_init__ asserts the same (d98e8a64).
  const std::string what = "moe_a2a_overlap: ";
  if (pp > 1 ? schedule != ScheduleKind::kInterleaved : schedule != ScheduleKind::k1F1B) {
    return Status::Invalid(what + "runs the combined 1F1B, which needs " +
                           (pp > 1 ? "the interleaved schedule with pp > 1" : "1f1b with pp = 1") +
                           ", not " + ScheduleName(schedule));
  }
  if (recompute == Recompute::kFull) {
    return Status::Invalid(what + "needs recompute none or selective, not full");
  }
  if (pp == 2 && Microbatches() % 2 != 0) {
    // Megatron-Core sends and receives a pair's messages in one batch; ptdp's order for pp = 2 and
    // odd m (the order of m + 1, one microbatch left out) leaves sends that the receives between
    // the same two ranks would take out of order (schedule::Validate).
    return Status::Invalid(what + "pp = 2 with an odd microbatch count m = " +
                           std::to_string(Microbatches()) + " is not modelled");
  }
  if (m.mtp_layers > 1) {
    return Status::Invalid(what +
                           "takes at most one multi-token prediction depth, not mtp_layers " +
                           std::to_string(m.mtp_layers));
  }
  if (!IsHalf(precision)) {
    return Status::Invalid(what + "needs 16-bit compute (bf16, fp16 or fp8), not " +
                           PrecisionName(precision));
  }
  return Status::Ok();
}

Status ParallelConfig::Validate(const ModelSpec& m) const {
  auto bad = [](const std::string& s) { return Status::Invalid(s); };
  PTDP_RETURN_IF_ERROR(CheckRange("tp", int64_t(tp), 1, kMaxTp));
  PTDP_RETURN_IF_ERROR(CheckRange("pp", int64_t(pp), 1, kMaxPp));
  PTDP_RETURN_IF_ERROR(CheckRange("dp", int64_t(dp), 1, kMaxDp));
  PTDP_RETURN_IF_ERROR(CheckRange("optimizer_instances", int64_t(optimizer_instances), 1, kMaxDp));
  PTDP_RETURN_IF_ERROR(CheckRange("cp", int64_t(cp), 1, kMaxCp));
  PTDP_RETURN_IF_ERROR(CheckRange("ep", int64_t(ep), 1, kMaxEp));
  PTDP_RETURN_IF_ERROR(CheckRange("etp", int64_t(etp), 0, kMaxTp));
  PTDP_RETURN_IF_ERROR(CheckRange("mbs", int64_t(mbs), 1, kMaxMbs));
  PTDP_RETURN_IF_ERROR(CheckRange("vp", int64_t(vp), 1, kMaxVp));
  PTDP_RETURN_IF_ERROR(CheckRange("global_batch", global_batch, 1, kMaxGlobalBatch));
  // Products in int64 (the fields are int): pp = vp = 65536 once wrapped pp*vp to 0 and divided
  // by it.
  PTDP_RETURN_IF_ERROR(CheckedProduct({pp, vp}, "pp*vp").status());
  PTDP_ASSIGN_OR_RETURN(const int64_t world, CheckedProduct({tp, cp, pp, dp}, "tp*cp*pp*dp"));
  if (world > kMaxWorldSize) {
    return bad("tp*cp*pp*dp: " + std::to_string(world) + " GPUs is outside [1, " +
               std::to_string(kMaxWorldSize) + "]");
  }
  PTDP_RETURN_IF_ERROR(m.Validate());
  // The largest activation a stage can hold is about layers * mbs * s * max(a s, ffn, V) * 64
  // bytes; refusing it here keeps every size the planner derives from the layout in 64 bits.
  const int64_t widest = std::max({int64_t(m.heads) * m.seq_len, m.Fc1Out(), m.vocab});
  auto act = CheckedProduct({int64_t(m.layers), mbs, m.seq_len, widest, 64},
                            "mbs: activation bytes of layers x mbs x seq_len x width x 64");
  if (!act.ok()) return act.status();
  if (m.heads % tp != 0) {
    return bad("tp: " + std::to_string(tp) + " does not divide the " + std::to_string(m.heads) +
               " attention heads");
  }
  if (m.KvHeads() % tp != 0) {  // Megatron-LM splits the query groups over the tensor ranks
    return bad("tp: " + std::to_string(tp) + " does not divide the " + std::to_string(m.KvHeads()) +
               " key/value heads (query groups)");
  }
  // A mixture of experts has no dense MLP but on its leading dense layers.
  if ((!m.IsMoe() || m.HasDenseLayers()) && m.FfnHidden() % tp != 0) {
    return bad("tp: " + std::to_string(tp) + " does not divide ffn_hidden " +
               std::to_string(m.FfnHidden()));
  }
  if (m.moe_shared_ffn_hidden % tp != 0) {  // split over the tensor group as a dense MLP
    return bad("tp: " + std::to_string(tp) + " does not divide moe_shared_ffn_hidden " +
               std::to_string(m.moe_shared_ffn_hidden));
  }
  PTDP_RETURN_IF_ERROR(ValidateStageSplit(m));
  if (global_batch % (int64_t(mbs) * dp) != 0) {
    return bad("mbs: mbs*dp = " + std::to_string(int64_t(mbs) * dp) +
               " does not divide the global batch " + std::to_string(global_batch));
  }
  if (sequence_parallel && tp < 2) {
    return bad("sequence_parallel: needs tp > 1 (with tp = 1 there is no sequence to split)");
  }
  if (sequence_parallel && m.seq_len % tp != 0) {
    return bad("sequence_parallel: tp = " + std::to_string(tp) + " does not divide seq_len " +
               std::to_string(m.seq_len));
  }
  // Windows are priced in the fused kernel's work (the unfused sequence scores every pair and
  // masks); not with the ring of context parallelism nor inside the combined 1F1B's phases.
  if (m.window_size > 0 && (!fused_attention || cp > 1 || moe_a2a_overlap)) {
    return bad(
        "fused_attention: sliding-window attention (model window_size) is modelled with "
        "fused_attention=on, cp = 1 and no moe_a2a_overlap only");
  }
  PTDP_RETURN_IF_ERROR(ValidateContextParallel(m));
  PTDP_RETURN_IF_ERROR(ValidateExperts(m));
  if (m.mtp_layers > 0 && (cp > 1 || SplitsBackward(schedule))) {
    return bad(cp > 1 ? "cp: multi-token prediction (mtp_layers) with context parallelism is not "
                        "modelled (Megatron-Core does not run it)"
                      : std::string("schedule: ") + ScheduleName(schedule) +
                            " splits the backward, which is not modelled with multi-token "
                            "prediction (mtp_layers)");
  }
  if (grad_reduce_bf16 && !Bf16GradsAllowed(precision)) {
    return bad(std::string("grad_reduce_bf16: needs precision bf16 or fp8, not ") +
               PrecisionName(precision));
  }
  if (optimizer_state_bf16 && (!Bf16GradsAllowed(precision) || !distributed_optimizer)) {
    return bad(!distributed_optimizer
                   ? std::string("optimizer_state_bf16: needs distributed_optimizer (Megatron-Core "
                                 "keeps 16-bit optimizer state only in its distributed optimizer)")
                   : std::string("optimizer_state_bf16: needs precision bf16 or fp8, not ") +
                         PrecisionName(precision));
  }
  PTDP_RETURN_IF_ERROR(ValidateRecomputeModules(*this, m));
  PTDP_RETURN_IF_ERROR(ValidateFsdp(*this, m));
  PTDP_RETURN_IF_ERROR(ValidateOptimizerInstances(*this, m));
  const int64_t micro = Microbatches();
  if (schedule == ScheduleKind::kInterleaved) {
    if (vp < 2) return bad("vp: the interleaved schedule needs vp >= 2 chunks per rank");
    if (pp < 2) return bad("pp: the interleaved schedule needs pp >= 2");
    if (micro < pp) {
      return bad("mbs: the interleaved schedule needs the microbatch count m = " +
                 std::to_string(micro) + " to be at least pp = " + std::to_string(pp));
    }
  } else if (schedule == ScheduleKind::kZbV) {
    if (vp != 2) {
      return bad("vp: the zb-v schedule places exactly 2 chunks per rank in a V, got vp = " +
                 std::to_string(vp));
    }
    if (micro < 2 * int64_t(pp) - 1) {
      return bad("mbs: the zb-v schedule needs the microbatch count m = " + std::to_string(micro) +
                 " to be at least 2 pp - 1 = " + std::to_string(2 * int64_t(pp) - 1) +
                 " (rank 0's warm-up runs 2 pp - 1 forwards of its first chunk)");
    }
  } else if (vp != 1) {
    return bad(std::string("vp: ") + std::to_string(vp) +
               " chunks per rank needs schedule=interleaved or zb-v, not " +
               ScheduleName(schedule));
  }
  return Status::Ok();
}

std::string ParallelConfig::ToString() const {
  std::ostringstream os;
  os << "tp=" << tp << ",pp=" << pp << ",dp=" << dp;
  if (cp > 1) os << ",cp=" << cp;  // the layouts without it read as they always have
  if (ep > 1) os << ",ep=" << ep;  // likewise
  if (etp > 0 && etp != tp) os << ",etp=" << etp;
  os << ",mbs=" << mbs << ",vp=" << vp << ",schedule=" << ScheduleName(schedule)
     << ",recompute=" << RecomputeName(recompute);
  if (recompute_modules != 0)
    os << ",recompute_modules=" << RecomputeModulesText(recompute_modules);
  os << ",scatter_gather=" << (scatter_gather ? "on" : "off");
  if (sequence_parallel) os << ",sequence_parallel=on";
  if (distributed_optimizer) os << ",distributed_optimizer=on";
  if (fsdp) os << ",fsdp=on";
  if (optimizer_instances > 1) os << ",optimizer_instances=" << optimizer_instances;
  if (grad_accumulation_fusion) os << ",grad_accumulation_fusion=on";
  if (grad_reduce_bf16) os << ",grad_reduce_bf16=on";
  if (optimizer_state_bf16) os << ",optimizer_state_bf16=on";
  if (moe_a2a_overlap) os << ",moe_a2a_overlap=on";
  if (moe_dispatcher != MoeDispatcher::kAllToAll) {
    os << ",moe_dispatcher=" << MoeDispatcherName(moe_dispatcher);
  }
  if (moe_shared_expert_overlap) os << ",moe_shared_expert_overlap=on";
  if (fused_attention) os << ",fused_attention=on";
  if (precision != Precision::kFp32) os << ",precision=" << PrecisionName(precision);
  if (first_stage_layers > 0) os << ",first_stage_layers=" << first_stage_layers;
  if (last_stage_layers > 0) os << ",last_stage_layers=" << last_stage_layers;
  if (!stage_layers.empty()) os << ",stage_layers=" << StageLayersText(stage_layers);
  return os.str();
}

}  // namespace ptdp
