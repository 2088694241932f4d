// Compute-order generators: GPipe, 1F1B (PipeDream-Flush) and Megatron-LM's interleaved 1F1B.
#include <algorithm>
#include <string>

#include "schedule/schedule.h"

namespace ptdp::schedule {

Status CheckScheduleShape(ScheduleKind kind, int pp, int64_t m, int vp) {
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
  if (m % pp != 0) {
    return Status::Invalid(
        "microbatches: the interleaved schedule (Megatron-LM's) needs a multiple of pp = " +
        std::to_string(pp) + " microbatches, got " + std::to_string(m));
  }
  return Status::Ok();
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

// Megatron-LM's interleaved 1F1B (schedules.py, forward_backward_pipelining_with_interleaving):
// the k-th forward of a rank is microbatch (k / (pp vp)) pp + k % pp of chunk (k / pp) % vp; the
// k-th backward the same microbatch of chunk vp - 1 - (k / pp) % vp. Rank r runs
// (pp - r - 1) * 2 + (vp - 1) * pp warm-up forwards (all of them when m == pp), then alternates.
void Interleaved(int pp, int r, int vp, int64_t m, std::vector<Instr>* out) {
  const int64_t total = m * vp;
  const int64_t group = int64_t(pp) * vp;
  auto mb_of = [&](int64_t k) { return (k / group) * pp + k % pp; };
  auto fchunk = [&](int64_t k) { return static_cast<int>((k % group) / pp); };
  auto bchunk = [&](int64_t k) { return vp - 1 - static_cast<int>((k % group) / pp); };
  int64_t warmup =
      (m == pp) ? total : std::min<int64_t>(total, int64_t(pp - r - 1) * 2 + int64_t(vp - 1) * pp);
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) out->push_back(Compute(Op::kForward, mb_of(f), fchunk(f)));
  while (f < total) {
    out->push_back(Compute(Op::kForward, mb_of(f), fchunk(f)));
    ++f;
    out->push_back(Compute(Op::kBackward, mb_of(b), bchunk(b)));
    ++b;
  }
  for (; b < total; ++b) out->push_back(Compute(Op::kBackward, mb_of(b), bchunk(b)));
}

}  // namespace

Result<Program> GenerateSchedule(ScheduleKind kind, int pp, int64_t m, int vp) {
  PTDP_RETURN_IF_ERROR(CheckScheduleShape(kind, pp, m, vp));
  Program p;
  p.kind = kind;
  p.pp = pp;
  p.vp = vp;
  p.microbatches = m;
  p.ranks.resize(pp);
  for (int r = 0; r < pp; ++r) {
    p.ranks[r].pp_rank = r;
    auto& out = p.ranks[r].instrs;
    out.reserve(static_cast<size_t>(2 * m * vp));
    switch (kind) {
      case ScheduleKind::kGPipe:
        GPipe(m, &out);
        break;
      case ScheduleKind::k1F1B:
        OneFOneB(pp, r, m, &out);
        break;
      case ScheduleKind::kInterleaved:
        Interleaved(pp, r, vp, m, &out);
        break;
    }
  }
  return p;
}

}  // namespace ptdp::schedule
