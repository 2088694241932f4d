// The shapes and sizes the search tries: pipeline splits and schedules, context and expert
// parallelism (planner/search.h).
#include "planner/search.h"

namespace ptdp::planner {

std::vector<int> ContextParallelSizes(const ModelSpec& m, int gpus, const SearchOptions& o) {
  if (o.fix.cp) {  // none when it does not divide the GPUs: "no layout matches --fix"
    return gpus % *o.fix.cp == 0 ? std::vector<int>{*o.fix.cp} : std::vector<int>{};
  }
  std::vector<int> sizes = {1};
  if (!o.context_parallel) return sizes;
  for (int cp = 2; cp <= kMaxCp && gpus % cp == 0; cp *= 2) {
    if (m.seq_len % (2 * int64_t(cp)) != 0 || m.seq_len / cp < kMinContextShardTokens) break;
    sizes.push_back(cp);
  }
  return sizes;
}

std::vector<ExpertSplit> ExpertSplits(const ModelSpec& m, int tp, int cp, int dp,
                                      const FixedLayout& fx) {
  if (!m.IsMoe()) return {{fx.ep.value_or(1), 0}};  // a fixed ep > 1: Validate says why not
  // Megatron-Core's default etp is tp (stored as 0); 1 keeps each expert whole on its rank.
  std::vector<int> etps = fx.etp   ? std::vector<int>{*fx.etp}
                          : tp > 1 ? std::vector<int>{tp, 1}
                                   : std::vector<int>{1};
  const int64_t stage = int64_t(tp) * cp * dp;
  std::vector<ExpertSplit> out;
  for (int etp : etps) {
    if (fx.ep) {  // as fixed, even where it cannot be: Validate then says why
      out.push_back({*fx.ep, etp == tp ? 0 : etp});
      continue;
    }
    for (int ep = 1; ep <= m.moe_experts; ++ep) {
      if (m.moe_experts % ep != 0 || stage % (int64_t(ep) * etp) != 0) continue;
      out.push_back({ep, etp == tp ? 0 : etp});
    }
  }
  return out;
}

// With multi-token prediction the last virtual stage also runs its depths (a layer each and the
// output layer again): interleaved splits whose last virtual stage holds 2 or more layers fewer
// than the q of each stage between (down to none; at most the depths' layers and one for the
// output layer), the first q or q - 1, as per-virtual-stage
// counts (Megatron-Bridge's DeepSeek-V3 layout "Et|(tt|)*30mL": 1, 2 x 30, 0). One fewer at either
// end is InterleavedShortEnds'. None for a model without those depths.
std::vector<std::vector<int>> LightLastStageSplits(const ModelSpec& m, int p, int v) {
  std::vector<std::vector<int>> out;
  if (m.mtp_layers == 0) return out;
  const int stages = p * v;
  for (int first_off = 0; first_off <= 1; ++first_off) {
    // Up to the depths' layers and the output layer's worth fewer: lighter is not worth scoring.
    for (int last_off = 2; last_off <= m.mtp_layers + 2; ++last_off) {
      const int total = m.layers + first_off + last_off;
      const int q = total / stages;
      if (q < last_off || (first_off > 0 && q - first_off < 1)) break;
      if (total % stages != 0) continue;
      std::vector<int> counts(size_t(stages), q);
      counts.front() = q - first_off;
      counts.back() = q - last_off;
      out.push_back(std::move(counts));
    }
  }
  return out;
}

std::vector<PipelineShape> PipelineShapes(const ModelSpec& m, int p, const FixedLayout& fx) {
  std::vector<PipelineShape> shapes;
  if (fx.stage_layers) {          // fixed per-stage counts: the schedules of one chunk per rank
    if (fx.vp.value_or(1) > 1) {  // per-virtual-stage counts: interleaved (CheckFixedStageLayers)
      shapes.push_back({ScheduleKind::kInterleaved, *fx.vp, 0, 0, *fx.stage_layers});
      return shapes;
    }
    for (ScheduleKind kind :
         {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kZbH1, ScheduleKind::kZbH2}) {
      shapes.push_back({kind, 1, 0, 0, *fx.stage_layers});
    }
    return shapes;
  }
  // A fixed split is the only one (on p = 1 too, where Validate refuses an uneven one).
  const bool fixed = fx.first_stage_layers || fx.last_stage_layers;
  const int fixed_first = fx.first_stage_layers.value_or(0);
  const int fixed_last = fx.last_stage_layers.value_or(0);
  if (p == 1) {
    shapes.push_back({ScheduleKind::k1F1B, 1, fixed_first, fixed_last, {}});
    if (fx.schedule && *fx.schedule == ScheduleKind::kGPipe) {
      shapes.push_back({ScheduleKind::kGPipe, 1, fixed_first, fixed_last, {}});
    }
    if (fx.schedule && *fx.schedule == ScheduleKind::kInterleaved) {
      shapes.push_back(
          {ScheduleKind::kInterleaved, fx.vp.value_or(2), fixed_first, fixed_last, {}});
    }
    if (fx.schedule && SplitsBackward(*fx.schedule)) {
      shapes.push_back({*fx.schedule, VShaped(*fx.schedule) ? 2 : 1, fixed_first, fixed_last, {}});
    }
  } else {
    std::vector<std::pair<int, int>> splits = {{fixed_first, fixed_last}};
    if (!fixed) {
      for (const auto& s : UnevenStageSplits(m, p)) splits.push_back(s);
    }
    for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
      for (const auto& [first, last] : splits) shapes.push_back({kind, 1, first, last, {}});
    }
    const auto& [first, last] = splits.front();  // the even or the fixed split
    // The zero-bubble schedules (split backward), with the even (or the fixed) split.
    for (ScheduleKind kind : {ScheduleKind::kZbH1, ScheduleKind::kZbH2}) {
      shapes.push_back({kind, 1, first, last, {}});
    }
    shapes.push_back({ScheduleKind::kZbV, 2, first, last, {}});  // two chunks per rank in a V
    for (int v = 2; v * p <= m.layers; ++v) {
      shapes.push_back({ScheduleKind::kInterleaved, v, first, last, {}});
      if (fixed) continue;
      for (const auto& [f, l] : InterleavedShortEnds(m, p, v)) {
        shapes.push_back({ScheduleKind::kInterleaved, v, f, l, {}});
      }
      for (std::vector<int>& stages : LightLastStageSplits(m, p, v)) {
        shapes.push_back({ScheduleKind::kInterleaved, v, 0, 0, std::move(stages)});
      }
    }
  }
  return shapes;
}

}  // namespace ptdp::planner
