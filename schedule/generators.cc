// Compute-order generators: GPipe, 1F1B (PipeDream-Flush), Megatron-LM's interleaved 1F1B, the
// zero-bubble ZB-H1 and ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024) and ZB-V
// (core/zbv_order.h).
#include <algorithm>
#include <string>
#include <vector>

#include "core/interleaved_order.h"
#include "core/zbv_order.h"
#include "schedule/schedule.h"

namespace ptdp::schedule {

namespace {

// Megatron-Core's own checks on the group size: pp <= group <= m, and a last group that is empty
// or at least pp (a smaller one leaves its later chunks waiting on the pipeline, the
// "dependency bubbles" its error names).
Status CheckMicrobatchGroup(int pp, int64_t m, int64_t group) {
  if (pp == 2 && group > pp) {
    return Status::Invalid(
        "microbatch group: pp = 2 takes groups of 2 only, got " + std::to_string(group) +
        " (a larger group sends activations and gradients between the two ranks in an order a "
        "receive just before its use cannot follow; docs/design-notes.md)");
  }
  if (group < pp || group > m) {
    return Status::Invalid("microbatch group: must be between pp = " + std::to_string(pp) +
                           " and the " + std::to_string(m) + " microbatches, got " +
                           std::to_string(group));
  }
  const int64_t last = m % group;
  if (last != 0 && last < pp && pp != 2) {
    return Status::Invalid("microbatch group: " + std::to_string(m) +
                           " microbatches in groups of " + std::to_string(group) +
                           " leave a last group of " + std::to_string(last) +
                           ", fewer than pp = " + std::to_string(pp) +
                           " (Megatron-Core refuses it); the smallest group size that fits is " +
                           std::to_string(DefaultMicrobatchGroup(m, pp)));
  }
  return Status::Ok();
}

}  // namespace

Status CheckScheduleShape(ScheduleKind kind, int pp, int64_t m, int vp, int64_t group) {
  if (pp < 1) return Status::Invalid("pp: must be >= 1, got " + std::to_string(pp));
  if (m < 1) return Status::Invalid("microbatches: must be >= 1, got " + std::to_string(m));
  if (m > INT32_MAX / 4)
    return Status::Invalid("microbatches: too many (" + std::to_string(m) + ")");
  if (vp < 1) return Status::Invalid("vp: must be >= 1, got " + std::to_string(vp));
  // Bounded before anything is allocated: a lowered program holds about 6 instructions of 32
  // bytes per (microbatch, chunk, rank) cell, so the cap keeps it to a few hundred MiB. Each
  // factor is below 2^31, so the product of two fits int64; compare the third by division.
  const int64_t per_rank = m * int64_t(vp);
  if (per_rank > kMaxScheduleCells / pp) {
    return Status::Invalid("microbatches: " + std::to_string(m) + " microbatches x vp " +
                           std::to_string(vp) + " x pp " + std::to_string(pp) +
                           " is more than the " + std::to_string(kMaxScheduleCells) +
                           " pipeline cells a program may hold");
  }
  if (kind != ScheduleKind::kInterleaved && group != 0) {
    return Status::Invalid(std::string("microbatch group: only the interleaved schedule takes "
                                       "microbatches in groups, not ") +
                           ScheduleName(kind));
  }
  if (kind == ScheduleKind::kZbV) {
    if (vp != 2) {
      return Status::Invalid(
          "vp: the zb-v schedule places exactly 2 chunks per rank in a V, got "
          "vp = " +
          std::to_string(vp));
    }
    if (m < 2 * int64_t(pp) - 1) {
      return Status::Invalid("microbatches: the zb-v schedule needs at least 2 pp - 1 = " +
                             std::to_string(2 * int64_t(pp) - 1) +
                             " microbatches (rank 0's warm-up runs 2 pp - 1 forwards of its first "
                             "chunk), got " +
                             std::to_string(m));
    }
    return Status::Ok();
  }
  if (kind != ScheduleKind::kInterleaved) {
    if (vp != 1) {
      return Status::Invalid(std::string("vp: the ") + ScheduleName(kind) +
                             " schedule runs one model chunk per rank (vp = 1), got vp = " +
                             std::to_string(vp) + "; use --kind interleaved");
    }
    return Status::Ok();
  }
  if (vp < 2) {
    return Status::Invalid("vp: the interleaved schedule needs >= 2 model chunks per rank, got " +
                           std::to_string(vp));
  }
  if (pp < 2) {
    return Status::Invalid("pp: the interleaved schedule needs >= 2 pipeline ranks, got " +
                           std::to_string(pp));
  }
  if (m < pp) {
    return Status::Invalid(
        "microbatches: the interleaved schedule needs at least pp = " + std::to_string(pp) +
        " microbatches (as Megatron-Core), got " + std::to_string(m));
  }
  return group == 0 ? Status::Ok() : CheckMicrobatchGroup(pp, m, group);
}

namespace {

Instr Compute(Op op, int64_t mb, int chunk) {
  Instr in;
  in.op = op;
  in.microbatch = static_cast<int32_t>(mb);
  in.chunk = chunk;
  return in;
}

// GPipe: all forwards in microbatch order, then all backwards in the same order.
void GPipe(int64_t m, std::vector<Instr>* out) {
  for (int64_t i = 0; i < m; ++i) out->push_back(Compute(Op::kForward, i, 0));
  for (int64_t i = 0; i < m; ++i) out->push_back(Compute(Op::kBackward, i, 0));
}

// 1F1B: rank r runs min(pp - r - 1, m) warm-up forwards, then alternates one forward and one
// backward, then drains the remaining backwards (Narayanan et al. 2021, Figure 4 top).
void OneFOneB(int pp, int r, int64_t m, std::vector<Instr>* out) {
  int64_t warmup = std::min<int64_t>(pp - r - 1, m);
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) out->push_back(Compute(Op::kForward, f, 0));
  while (f < m) {
    out->push_back(Compute(Op::kForward, f++, 0));
    out->push_back(Compute(Op::kBackward, b++, 0));
  }
  while (b < m) out->push_back(Compute(Op::kBackward, b++, 0));
}

// ZB-H1 (Qi et al. 2024, section 3.1, Figure 3 top): 1F1B's warm-up and steady state with the
// backward split into B (input gradient, BI here) and W (weight gradient). Rank r keeps up to r
// W passes pending through the steady state and the cool-down (each B is followed by the oldest
// W once more than r are pending), and runs the pending ones at the end, where the later ranks'
// cool-down would otherwise leave them idle. At most p microbatches are in flight (forward done,
// W not yet) on every rank, 1F1B's peak; with T_W <= T_B <= T_F the bubble per rank is
// (p - 1)(T_F + T_B - T_W) when m >= p (the paper's Table 1).
void ZbH1(int pp, int r, int64_t m, std::vector<Instr>* out) {
  const int64_t warmup = std::min<int64_t>(pp - r - 1, m);
  int64_t f = 0, b = 0, w = 0;
  auto input_then_weight = [&] {
    out->push_back(Compute(Op::kBackwardInput, b++, 0));
    if (b - w > r) out->push_back(Compute(Op::kBackwardWeight, w++, 0));
  };
  for (; f < warmup; ++f) out->push_back(Compute(Op::kForward, f, 0));
  while (f < m) {
    out->push_back(Compute(Op::kForward, f++, 0));
    input_then_weight();
  }
  while (b < m) input_then_weight();
  while (w < m) out->push_back(Compute(Op::kBackwardWeight, w++, 0));
}

// ZB-H2 (Qi et al. 2024, section 3.1, Figure 3 bottom): rank r runs 2 (p - r - 1) + 1 warm-up
// forwards, which fill the time before its first B when F = B = W; then B and F alternate,
// with the oldest W before the F once 2p - 1 microbatches are in flight (the schedule's memory
// limit). When the forwards are done, each B is followed by up to two W passes while more than
// 2r are pending, so that rank r ends with 2r + 1 W passes after its last B: the tail each rank
// needs for the last B to reach rank 0 without idling anyone (the parallelogram of the paper).
// The bubble per rank, from its first forward to its last W, is (p - 1)(T_F + T_B - 2 T_W) when
// m >= 2p - 1 (0 when F = B = W; the paper's Table 1).
void ZbH2(int pp, int r, int64_t m, std::vector<Instr>* out) {
  const int64_t cap = 2 * int64_t(pp) - 1, keep = 2 * int64_t(r);
  int64_t f = 0, b = 0, w = 0;
  for (; f < std::min<int64_t>(m, 2 * (pp - r - 1) + 1); ++f)
    out->push_back(Compute(Op::kForward, f, 0));
  while (b < m) {
    out->push_back(Compute(Op::kBackwardInput, b++, 0));
    if (f < m) {
      if (f - w >= cap) out->push_back(Compute(Op::kBackwardWeight, w++, 0));
      out->push_back(Compute(Op::kForward, f++, 0));
      continue;
    }
    for (int k = 0; k < 2 && b - w > keep; ++k)
      out->push_back(Compute(Op::kBackwardWeight, w++, 0));
  }
  while (w < m) out->push_back(Compute(Op::kBackwardWeight, w++, 0));
}

// Megatron-Core's interleaved 1F1B (schedules.py, forward_backward_pipelining_with_interleaving,
// at the commit docs/design-notes.md names) in the order core/interleaved_order.h states; with
// groups of pp and m a multiple of pp this is the paper's order (Narayanan et al. 2021, Figure 4
// bottom). Slots of microbatches >= m (pp = 2 with odd m) are skipped: removing a whole
// microbatch from every rank removes only dependencies, so the order stays deadlock-free and in
// per-pair message order.
void Interleaved(int pp, int r, const InterleavedOrder& order, std::vector<Instr>* out) {
  auto run = [&](Op op, int64_t k) {
    const InterleavedSlot s = order.Slot(k);
    if (s.microbatch >= order.microbatches) return;
    out->push_back(
        Compute(op, s.microbatch, op == Op::kForward ? s.chunk : order.vp - 1 - s.chunk));
  };
  const int64_t total = order.Slots(), warmup = order.Warmup(pp, r);
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) run(Op::kForward, f);
  while (f < total) {
    run(Op::kForward, f++);
    run(Op::kBackward, b++);
  }
  for (; b < total; ++b) run(Op::kBackward, b);
}

}  // namespace

Result<Program> GenerateSchedule(ScheduleKind kind, int pp, int64_t m, int vp, int64_t group) {
  PTDP_RETURN_IF_ERROR(CheckScheduleShape(kind, pp, m, vp, group));
  const InterleavedOrder order = InterleavedOrderOf(pp, m, vp, group);
  Program p;
  p.kind = kind;
  p.pp = pp;
  p.vp = vp;
  p.microbatches = m;
  p.ranks.resize(pp);
  for (int r = 0; r < pp; ++r) {
    p.ranks[r].pp_rank = r;
    auto& out = p.ranks[r].instrs;
    out.reserve(static_cast<size_t>(3 * m * vp));
    switch (kind) {
      case ScheduleKind::kGPipe:
        GPipe(m, &out);
        break;
      case ScheduleKind::k1F1B:
        OneFOneB(pp, r, m, &out);
        break;
      case ScheduleKind::kInterleaved:
        Interleaved(pp, r, order, &out);
        break;
      case ScheduleKind::kZbH1:
        ZbH1(pp, r, m, &out);
        break;
      case ScheduleKind::kZbH2:
        ZbH2(pp, r, m, &out);
        break;
      case ScheduleKind::kZbV:  // core/zbv_order.h, shared with the ledger
        ZbVOrder(pp, r, m,
                 [&](Op op, int64_t mb, int chunk) { out.push_back(Compute(op, mb, chunk)); });
        break;
    }
  }
  return p;
}

Status PairForA2aOverlap(Program* compute) {
  if (compute->kind != ScheduleKind::k1F1B && compute->kind != ScheduleKind::kInterleaved) {
    return Status::Invalid(std::string("moe_a2a_overlap: the combined 1F1B is made of 1f1b or "
                                       "interleaved, not ") +
                           ScheduleName(compute->kind));
  }
  for (RankProgram& rank : compute->ranks) {
    std::vector<Instr> forwards, backwards;
    size_t warmup = 0;
    for (const Instr& in : rank.instrs) {
      if (in.op == Op::kForward) {
        if (backwards.empty()) ++warmup;
        forwards.push_back(in);
      } else {
        backwards.push_back(in);
      }
    }
    // The plain order's leading forwards are its warm-up and the first forward of its steady
    // state: with the pairs that forward runs alone too, the one more that makes each pair's
    // forward and backward independent.
    std::vector<Instr> out;
    out.reserve(rank.instrs.size());
    size_t b = 0;
    for (size_t f = 0; f < forwards.size(); ++f) {
      out.push_back(forwards[f]);
      if (f < warmup) continue;
      out.back().paired = true;
      out.push_back(backwards[b++]);
    }
    for (; b < backwards.size(); ++b) out.push_back(backwards[b]);
    rank.instrs = std::move(out);
  }
  return Status::Ok();
}

}  // namespace ptdp::schedule
