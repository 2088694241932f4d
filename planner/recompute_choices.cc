#include "planner/recompute_choices.h"

namespace ptdp::planner {

std::vector<RecomputeChoice> RecomputeChoices(const ModelSpec& m, const SearchOptions& o,
                                              Precision precision) {
  const FixedLayout& fx = o.fix;
  std::vector<RecomputeChoice> out;
  for (Recompute rc : {Recompute::kNone, Recompute::kFull, Recompute::kSelective}) {
    const bool selective = o.selective_recompute || o.recompute_modules;
    if (fx.recompute ? *fx.recompute != rc : rc == Recompute::kSelective && !selective) {
      continue;
    }
    if (rc != Recompute::kSelective) {
      out.push_back({rc, 0});
    } else if (fx.recompute_modules) {
      out.push_back({rc, *fx.recompute_modules});
    } else {
      if (o.selective_recompute || fx.recompute) out.push_back({rc, 0});
      const uint8_t have = (m.IsMla() ? kRecomputeMlaUpProj : 0) |
                           (!m.IsMoe() || m.HasDenseLayers() ? kRecomputeMlp : 0) |
                           (m.IsMoe() && precision != Precision::kFp8 ? kRecomputeMoeAct : 0) |
                           (m.IsMoe() && !m.IsMla() ? kRecomputeLayernorm : 0) |
                           (m.IsMoe() ? kRecomputeMoe : 0) |
                           (m.HasSharedExpert() ? kRecomputeSharedExperts : 0);
      const int subsumed = kRecomputeMoeAct | kRecomputeSharedExperts;
      for (int set = 1; o.recompute_modules && set <= have; ++set) {
        if ((set & have) != set) continue;
        if ((set & kRecomputeMoe) != 0 && (set & subsumed) != 0) continue;
        out.push_back({rc, uint8_t(set)});
      }
    }
  }
  return out;
}

uint8_t ModuleSet(const RecomputeChoice& rc) {
  return rc.modules == 0 ? uint8_t(kRecomputeCoreAttn) : rc.modules;
}

bool RecomputesMoreThanAFit(const RecomputeChoice& rc, const std::vector<uint8_t>& fitted) {
  if (rc.kind != Recompute::kSelective) return false;
  const uint8_t set = ModuleSet(rc);
  for (uint8_t f : fitted) {
    if ((f & set) == f && f != set) return true;
  }
  return false;
}

}  // namespace ptdp::planner
