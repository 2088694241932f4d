#include "costmodel/recompute_cost.h"

#include "core/experts.h"
#include "core/shapes.h"
#include "costmodel/gemm.h"
#include "costmodel/layer_cost.h"

namespace ptdp::costmodel {

ComputeBreakdown SelectiveRecomputeCost(const ModelSpec& m, const HardwareProfile& hw,
                                        const ParallelConfig& c, Seconds mlp_tp_comm,
                                        const MixtureForward& mixture) {
  ComputeBreakdown out;
  if (c.recompute != Recompute::kSelective) return out;
  const Precision pr = c.precision;
  const double e = ComputeBytes(pr), lin = LinearGemmScale(hw, pr);
  const int64_t tokens = int64_t(c.mbs) * m.seq_len, t = c.tp;
  if (c.Recomputes(kRecomputeCoreAttn)) {  // the fused kernel's forward, or the unfused sequence
    out = c.fused_attention ? ComputeBreakdown{FusedAttentionCost(m, hw, c.tp, c.mbs).forward.gemm}
                            : AttentionCoreForwardCost(m, hw, pr, c.tp, c.mbs);
  }
  if (c.Recomputes(kRecomputeMlaUpProj) && m.IsMla()) {
    const std::vector<LinearShape> g = MlaProjections(m, c.tp, tokens, c.sequence_parallel);
    // [q_down,] q_up or q, kv_down, kv_up: the up projections are the ones on the latents.
    for (size_t i = 0; i < g.size(); ++i) {
      const bool up = (m.mla_q_lora > 0 && i == 1) || i + 1 == g.size();
      if (up) out.gemm += lin * GemmTime(hw, g[i].rows, g[i].out, g[i].in);
    }
    const double qk = double(tokens) * double(m.QkWidth()) / double(t);
    out.memory += MemoryBoundTime(hw, 2 * e * 2 * qk, 2);
  }
  if (c.Recomputes(kRecomputeMlp) && !m.IsMoe()) {
    const int64_t h = m.hidden, fc1 = m.Fc1Out() / t, f = m.FfnHidden() / t;
    out.gemm += lin * (GemmTime(hw, tokens, fc1, h) + GemmTime(hw, tokens, h, f));
    const double rows = c.sequence_parallel ? double(tokens) / double(t) : double(tokens);
    const double norm = 2 * e * rows * double(h);
    const double act = (m.swiglu ? 3 : 2) * e * double(tokens) * double(f);
    // cast-transposes of fc1's and fc2's inputs: read 2, write the copy and its transpose.
    const double casts = pr == Precision::kFp8 ? 4.0 * double(tokens) * double(h + f) : 0.0;
    out.memory += MemoryBoundTime(hw, norm + act + casts, pr == Precision::kFp8 ? 4 : 2);
    out.tp_comm += mlp_tp_comm;
  }
  if (c.Recomputes(kRecomputeLayernorm) && m.IsMoe()) {  // the pre-MLP norm: read, write
    const double rows = c.sequence_parallel ? double(tokens) / double(t) : double(tokens);
    out.memory += MemoryBoundTime(hw, 2 * e * rows * double(m.hidden), 1);
  }
  if (c.Recomputes(kRecomputeMoeAct) && m.IsMoe()) {
    const double n = double(ExpertTokens(m, c)), f = double(m.MoeFfnHidden() / c.ExpertTp());
    out.memory += MemoryBoundTime(hw, 3 * e * n * f, 1);  // read gate and up, write the product
  }
  if (c.Recomputes(kRecomputeMoe) && m.IsMoe()) out = Add(Add(out, mixture.block), mixture.shared);
  if (c.Recomputes(kRecomputeSharedExperts) && m.IsMoe()) out = Add(out, mixture.shared);
  return out;
}

}  // namespace ptdp::costmodel
