// Lowering: point-to-point messages around compute, gradient reduction at the end; and
// BuildProgram.
#include <algorithm>
#include <string>

#include "core/ledger.h"
#include "core/shapes.h"
#include "schedule/schedule.h"

namespace ptdp::schedule {

int VirtualStageOf(const Program& p, int pp_rank, int chunk) {
  return StageOfChunk(p.kind, p.pp, pp_rank, chunk);
}

int RankOfStage(const Program& p, int stage) {
  return HolderOfStage(p.kind, p.pp, stage).pp_rank;
}

bool LocalBoundary(const Program& p, int stage) {
  return RankOfStage(p, stage) == RankOfStage(p, stage + 1);
}

int64_t MessageKey(const Program& p, int pp_rank, const Instr& in) {
  const int64_t V = int64_t(p.pp) * p.vp;
  const int64_t vs = VirtualStageOf(p, pp_rank, in.chunk);
  int64_t boundary = 0;  // the lower virtual stage of the boundary the message crosses
  bool grad = false;
  switch (in.op) {
    case Op::kSendAct:
      boundary = vs;
      break;
    case Op::kRecvAct:
      boundary = vs - 1;
      break;
    case Op::kSendGrad:
      boundary = vs - 1;
      grad = true;
      break;
    case Op::kRecvGrad:
      boundary = vs;
      grad = true;
      break;
    default:
      PTDP_CHECK_MSG(false, "MessageKey of a non-message instruction");
  }
  return ((int64_t(in.microbatch) * V + boundary) * 2) + (grad ? 1 : 0);
}

Result<Program> Lower(const Program& compute, Bytes message_bytes, bool recompute) {
  Program out;
  out.kind = compute.kind;
  out.pp = compute.pp;
  out.vp = compute.vp;
  out.microbatches = compute.microbatches;
  out.ranks.resize(compute.ranks.size());
  for (size_t r = 0; r < compute.ranks.size(); ++r) {
    out.ranks[r].pp_rank = compute.ranks[r].pp_rank;
    out.ranks[r].instrs.reserve(compute.ranks[r].instrs.size() * 2 + 2);
  }
  PTDP_RETURN_IF_ERROR(LowerEach(compute, message_bytes, recompute, [&](int rank, const Instr& in) {
    out.ranks[size_t(rank)].instrs.push_back(in);
  }));
  return out;
}

Status LowerError(const Program& compute, int rank, size_t i) {
  return Status::Invalid("lower: rank " + std::to_string(rank) + ", instruction " +
                         std::to_string(i) + " (" +
                         InstrToText(compute.ranks[size_t(rank)].instrs[i]) +
                         "): only forward/backward may be lowered");
}

Lowering LoweringOf(const ModelSpec& model, const ParallelConfig& cfg) {
  return Lowering{PipelineMessageBytes(model, cfg), cfg.recompute != Recompute::kNone};
}

Result<Program> BuildProgram(const ModelSpec& model, const ParallelConfig& cfg) {
  PTDP_RETURN_IF_ERROR(cfg.Validate(model));
  PTDP_ASSIGN_OR_RETURN(Program compute,
                        GenerateSchedule(cfg.schedule, cfg.pp, cfg.Microbatches(), cfg.vp));
  if (cfg.moe_a2a_overlap) PTDP_RETURN_IF_ERROR(PairForA2aOverlap(&compute));
  const Lowering lowering = LoweringOf(model, cfg);
  PTDP_ASSIGN_OR_RETURN(Program program,
                        Lower(compute, lowering.message_bytes, lowering.recompute));
  for (RankProgram& r : program.ranks) {
    for (int c = 0; c < cfg.vp; ++c)
      r.layers.push_back(ChunkLayers(model, cfg, r.pp_rank, c).size());
  }
  return program;
}

namespace {

std::string LayerListText(const std::vector<int>& layers) {
  std::string s;
  for (int n : layers) {
    if (!s.empty()) s += ',';
    s += std::to_string(n);
  }
  return "'" + s + "'";
}

std::string HeaderText(const Program& p) {
  return std::string("kind=") + ScheduleName(p.kind) + " pp=" + std::to_string(p.pp) +
         " vp=" + std::to_string(p.vp) + " microbatches=" + std::to_string(p.microbatches);
}

}  // namespace

Status CheckProgramMatchesLayout(const Program& p, const ModelSpec& model,
                                 const ParallelConfig& cfg) {
  PTDP_ASSIGN_OR_RETURN(Program want, BuildProgram(model, cfg));
  const std::string layout = "layout " + cfg.ToString() + " (" +
                             std::to_string(ComputeBytes(cfg.precision)) + "-byte activations)";
  if (p.kind != want.kind || p.pp != want.pp || p.vp != want.vp ||
      p.microbatches != want.microbatches || p.ranks.size() != want.ranks.size()) {
    return Status::Invalid("header is '" + HeaderText(p) + "' with " +
                           std::to_string(p.ranks.size()) + " ranks but " + layout + " gives '" +
                           HeaderText(want) + "'");
  }
  const bool wc = want.vp > 1;
  for (size_t r = 0; r < want.ranks.size(); ++r) {
    const std::vector<Instr>& have = p.ranks[r].instrs;
    const std::vector<Instr>& need = want.ranks[r].instrs;
    if (p.ranks[r].pp_rank != want.ranks[r].pp_rank) {
      return Status::Invalid("rank list " + std::to_string(r) + " says pp_rank " +
                             std::to_string(p.ranks[r].pp_rank));
    }
    // A Program that states its layers (every one BuildProgram makes) must state the layout's;
    // plan files written before they were stated carry none, and run as their layout places them.
    if (!p.ranks[r].layers.empty() && p.ranks[r].layers != want.ranks[r].layers) {
      return Status::Invalid("rank " + std::to_string(r) + " states layers " +
                             LayerListText(p.ranks[r].layers) + " but " + layout + " gives " +
                             LayerListText(want.ranks[r].layers));
    }
    const std::string where = "rank " + std::to_string(r) + ", instruction ";
    for (size_t i = 0; i < std::max(have.size(), need.size()); ++i) {
      if (i < have.size() && i < need.size() && have[i] == need[i]) continue;
      auto text = [&](const std::vector<Instr>& v, const char* none) {
        return i < v.size() ? std::string("'").append(InstrToText(v[i], wc)).append("'")
                            : std::string(none);
      };
      return Status::Invalid(where + std::to_string(i) + " is " + text(have, "missing") + " but " +
                             layout + " gives " + text(need, "nothing more"));
    }
  }
  return Status::Ok();
}

std::vector<int> PeakStashedMicrobatches(const Program& p) {
  std::vector<int> peak(p.ranks.size(), 0);
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    int live = 0;
    for (const Instr& in : p.ranks[r].instrs) {
      if (in.op == Op::kForward) peak[r] = std::max(peak[r], ++live);
      // A split backward keeps the inputs its W needs until the W.
      if (in.op == Op::kBackward || in.op == Op::kBackwardWeight) --live;
    }
  }
  return peak;
}

std::string ScheduleDiagram(const Program& p) {
  std::string s;
  size_t width = std::to_string(p.ranks.size()).size();
  for (const RankProgram& r : p.ranks) {
    std::string label = std::to_string(r.pp_rank);
    s += "rank " + std::string(width - label.size(), ' ') + label + " |";
    for (const Instr& in : r.instrs) {
      if (!IsCompute(in.op)) continue;
      s += ' ';
      s += InstrToText(in, p.vp > 1);
    }
    s += "\n";
  }
  return s;
}

}  // namespace ptdp::schedule
