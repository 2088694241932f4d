// The closed form of a pipeline's iteration (costmodel/estimate.h ClosedFormPipeline): the
// slowest rank's microbatch time times m, and the schedule's bubble.
#include <algorithm>

#include "costmodel/estimate.h"

namespace ptdp::costmodel {

std::vector<Seconds> StageMicrobatchTimes(const CostTable& t) {
  std::vector<Seconds> out(t.pp, 0.0);
  for (int r = 0; r < t.pp; ++r) {
    Seconds s = 0;
    for (int k = 0; k < t.vp; ++k) {
      const ChunkCost& cc = t.Chunk(r, k);
      s += cc.ForwardTime() + cc.BackwardTime();
    }
    if (t.pp > 1) s += 2.0 * t.vp * (t.p2p_link[r].Time(t.p2p_bytes) + t.p2p_allgather);
    out[r] = s;
  }
  return out;
}

namespace {

// ZB-V's idle time on rank 0, the rank that idles most (core/zbv_order.h), from the slowest rank's
// per-chunk times F, B (input half, p2p included) and W: 0 when F = B = W (the paper's zero
// bubble); otherwise (p - 1)(F + B - 2W) + (p - 2)(F - B), which tests/simulator/zbv_test.cc hold
// exact for W < B <= F with B <= 2W and which is an estimate elsewhere (the simulator re-scores the
// top layouts; docs/design-notes.md).
Seconds ZbVBubble(const CostTable& t, int slow, Seconds stage, Seconds weight) {
  if (t.pp < 2) return 0;
  Seconds forward = 0;
  for (int k = 0; k < t.vp; ++k) forward += t.Chunk(slow, k).ForwardTime();
  const Seconds f = forward / t.vp, w = weight / t.vp, b = (stage - weight) / t.vp - f;
  const double p = t.pp;
  return std::max(0.0, (p - 1) * (f + b - 2 * w) + (p - 2) * (f - b));
}

// The combined 1F1B (ParallelConfig::moe_a2a_overlap): each forward after a rank's warm-up runs
// paired with a backward and saves CostTable::PairSaving (a chunk's forward taken with its own
// backward: the chunks of a rank alike); the fill and the drain run alone. With P the paired
// microbatch time of the slowest rank so paired and T its time alone: m P for the steady state,
// (p - 1) / v of the slowest rank's unpaired time for the fill and the drain as without pairing,
// and (T - P) / v for the one more warm-up forward and the last backward, which run alone.
PipelineTime CombinedStepTime(const CostTable& t, const ParallelConfig& c,
                              const std::vector<Seconds>& per) {
  Seconds paired = 0, alone = 0;
  for (int r = 0; r < t.pp; ++r) {
    Seconds saving = 0;
    for (int k = 0; k < t.vp; ++k) saving += t.PairSaving(t.Chunk(r, k), t.Chunk(r, k));
    if (per[r] - saving > paired) paired = per[r] - saving, alone = per[r];
  }
  const Seconds tmax = *std::max_element(per.begin(), per.end());
  PipelineTime out;
  out.bubble = double(c.pp - 1) / double(c.vp) * tmax + (alone - paired) / double(c.vp);
  out.total = double(c.Microbatches()) * paired + out.bubble;
  return out;
}

}  // namespace

PipelineTime ClosedFormPipeline::Time(const CostTable& t, const ParallelConfig& c) const {
  const std::vector<Seconds> per = StageMicrobatchTimes(t);
  if (!t.a2a_pair_saving.empty()) return CombinedStepTime(t, c, per);
  const Seconds tmax = *std::max_element(per.begin(), per.end());
  PipelineTime out;
  const double m = double(c.Microbatches());
  const Seconds ideal = m * tmax;
  out.bubble = double(c.pp - 1) / (double(c.vp) * m) * ideal;
  if (SplitsBackward(c.schedule)) {
    // Qi et al. 2024, Table 1, with the slowest stage's times: T_F + T_B (the input half, p2p
    // included) is its microbatch time less T_W (its weight-gradient GEMMs); the bubble is
    // ZB-H1 (p - 1)(T_F + T_B - T_W), ZB-H2 (p - 1)(T_F + T_B - 2 T_W), at least 0.
    const int slow = int(std::max_element(per.begin(), per.end()) - per.begin());
    Seconds weight = 0;
    for (int k = 0; k < t.vp; ++k) weight += t.Chunk(slow, k).weight_grad.Total();
    const Seconds f_plus_b = tmax - weight;
    const Seconds idle =
        c.schedule == ScheduleKind::kZbH1 ? f_plus_b - weight : f_plus_b - 2 * weight;
    out.bubble = double(c.pp - 1) * std::max(0.0, idle);
    if (c.schedule == ScheduleKind::kZbV) out.bubble = ZbVBubble(t, slow, tmax, weight);
  }
  out.total = ideal + out.bubble;
  return out;
}

const char* ClosedFormBubbleName(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kZbH1:
      return "(p-1)(T_F+T_B-T_W)/(m T)";
    case ScheduleKind::kZbH2:
      return "(p-1)(T_F+T_B-2T_W)/(m T)";
    case ScheduleKind::kZbV:
      return "((p-1)(F+B-2W)+(p-2)(F-B))/(m T)";
    default:
      return "(p-1)/(v m)";
  }
}

}  // namespace ptdp::costmodel
