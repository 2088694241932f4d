// The sizes the search tries for context and expert parallelism (planner/search.h).
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

}  // namespace ptdp::planner
