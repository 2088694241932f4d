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

}  // namespace ptdp::planner
