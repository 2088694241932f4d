// Validate(): static checks of every instruction, then a dry run of the execution model of
// schedule.h (non-blocking sends, blocking receives, each rank in order) that must finish, and the
// order of the messages between each pair of ranks.
#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "schedule/schedule.h"

namespace ptdp::schedule {
namespace {

bool IsMessage(Op op) {
  return op == Op::kSendAct || op == Op::kRecvAct || op == Op::kSendGrad || op == Op::kRecvGrad;
}

std::string Where(int rank, size_t i, const Instr& in, bool with_chunk) {
  return "rank " + std::to_string(rank) + ", instruction " + std::to_string(i) + " (" +
         InstrToText(in, with_chunk) + ")";
}

bool IsSend(Op op) {
  return op == Op::kSendAct || op == Op::kSendGrad;
}

// Messages between each ordered pair of ranks must be received in the order they are sent: NCCL
// (like any transport without tags) delivers a pair's messages in order, so matching by key alone
// would let two crossed messages swap their payloads. In a V a pair of neighbours carries one
// chunk's activations and the other chunk's gradients the same way, each in microbatch order but
// interleaved differently on the two sides; executors give a V's activations and gradients
// separate ordered channels (runtime: two pipeline communicators), so the order is checked per
// channel there. REQUIRES: sends and receives matched by key.
Status CheckPairOrder(const Program& p, bool wc) {
  // (sender, receiver, channel) -> indices of the sender's sends to the receiver, and of the
  // receiver's receives from the sender, each in program order.
  using Channel = std::tuple<int, int, int>;
  auto channel = [&](int from, int to, Op op) {
    const bool grad = op == Op::kSendGrad || op == Op::kRecvGrad;
    return Channel{from, to, VShaped(p.kind) && grad ? 1 : 0};
  };
  std::map<Channel, std::vector<size_t>> sent, received;
  for (int rank = 0; rank < p.pp; ++rank) {
    const auto& ins = p.ranks[rank].instrs;
    for (size_t i = 0; i < ins.size(); ++i) {
      if (!IsMessage(ins[i].op)) continue;
      if (IsSend(ins[i].op)) {
        sent[channel(rank, ins[i].peer, ins[i].op)].push_back(i);
      } else {
        received[channel(ins[i].peer, rank, ins[i].op)].push_back(i);
      }
    }
  }
  for (const auto& [pair, sends] : sent) {
    const auto [from, to, channel_index] = pair;
    (void)channel_index;
    const std::vector<size_t>& recvs = received[pair];
    for (size_t k = 0; k < std::min(sends.size(), recvs.size()); ++k) {
      const Instr& s = p.ranks[from].instrs[sends[k]];
      const Instr& r = p.ranks[to].instrs[recvs[k]];
      if (MessageKey(p, from, s) == MessageKey(p, to, r)) continue;
      return Status::Invalid(Where(to, recvs[k], r, wc) + ": receive number " +
                             std::to_string(k + 1) + " from rank " + std::to_string(from) +
                             ", but rank " + std::to_string(from) + "'s send number " +
                             std::to_string(k + 1) + " to rank " + std::to_string(to) + " is " +
                             InstrToText(s, wc) + " (instruction " + std::to_string(sends[k]) +
                             "): messages between two ranks arrive in the order they are sent "
                             "(NCCL matches by order, not by tag)");
    }
  }
  return Status::Ok();
}

}  // namespace

Status Validate(const Program& p) {
  if (p.pp < 1) return Status::Invalid("program: pp must be >= 1");
  if (p.vp < 1) return Status::Invalid("program: vp must be >= 1");
  if (VShaped(p.kind) && p.vp != 2) {
    return Status::Invalid(
        "program: a " + std::string(ScheduleName(p.kind)) +
        " program places 2 chunks per rank in a V, got vp = " + std::to_string(p.vp));
  }
  if (p.microbatches < 1 || p.microbatches > INT32_MAX / 4) {
    return Status::Invalid("program: microbatches must be in [1, 2^29)");
  }
  if (static_cast<int>(p.ranks.size()) != p.pp) {
    return Status::Invalid("program: " + std::to_string(p.ranks.size()) +
                           " rank lists for pp = " + std::to_string(p.pp));
  }
  const bool wc = p.vp > 1;
  const int64_t m = p.microbatches;
  const int64_t slots = m * p.vp;  // (mb, chunk) pairs per rank
  // Each rank runs a forward and a backward of every (mb, chunk) pair, so a rank list shorter than
  // 2 * slots is refused here, before the per-slot and per-message tables below are sized by m:
  // those stay within a small multiple of the instructions the program actually holds.
  for (int rank = 0; rank < p.pp; ++rank) {
    const size_t held = p.ranks[rank].instrs.size();
    if (static_cast<int64_t>(held) < 2 * slots) {
      return Status::Invalid("program: rank " + std::to_string(rank) + " holds " +
                             std::to_string(held) +
                             " instructions, fewer than the forward and "
                             "backward of its " +
                             std::to_string(m) + " microbatches x vp = " + std::to_string(p.vp) +
                             " chunks (" + std::to_string(2 * slots) + ")");
    }
  }
  // Bounded by the instructions now (each rank holds at least 2 * vp of them): no int overflow.
  const int V = p.pp * p.vp;
  const int64_t keys = 2 * m * V;
  bool lowered = false;
  for (const RankProgram& r : p.ranks) {
    for (const Instr& in : r.instrs) lowered = lowered || IsMessage(in.op);
  }

  // Static pass: ranges, neighbours, per-rank order of each (mb, chunk)'s instructions.
  // sends[key] / recvs[key]: rank * 2^32 + index + 1 of the one instruction, 0 if none.
  std::vector<int64_t> sends(lowered ? keys : 0, 0), recvs(lowered ? keys : 0, 0);
  for (int rank = 0; rank < p.pp; ++rank) {
    const RankProgram& rp = p.ranks[rank];
    if (rp.pp_rank != rank) {
      return Status::Invalid("program: rank list " + std::to_string(rank) + " says pp_rank " +
                             std::to_string(rp.pp_rank));
    }
    if (!rp.layers.empty() && static_cast<int>(rp.layers.size()) != p.vp) {
      return Status::Invalid("program: rank " + std::to_string(rank) + " states layers for " +
                             std::to_string(rp.layers.size()) +
                             " chunks, but vp = " + std::to_string(p.vp));
    }
    // Per (mb, chunk): bit 0 forward seen, 1 input gradient computed (backward or its BI half),
    // 2 act received, 3 grad received, 4 act sent, 5 grad sent, 6 split (BI seen), 7 W seen.
    std::vector<uint8_t> seen(static_cast<size_t>(slots), 0);
    bool reduced = false, stepped = false;
    for (size_t i = 0; i < rp.instrs.size(); ++i) {
      const Instr& in = rp.instrs[i];
      auto fail = [&](const std::string& why) {
        return Status::Invalid(Where(rank, i, in, wc) + ": " + why);
      };
      if (in.op == Op::kReduceGrads || in.op == Op::kOptimizerStep) {
        if (in.op == Op::kReduceGrads) {
          if (reduced) return fail("a second gradient reduction");
          reduced = true;
        } else {
          if (!reduced && lowered) return fail("optimizer step before the gradient reduction");
          if (stepped) return fail("a second optimizer step");
          stepped = true;
        }
        continue;
      }
      if (reduced) return fail("instruction after the gradient reduction");
      if (in.op == Op::kForward && in.paired) {  // the combined step's backward comes next
        size_t j = i + 1;
        while (j < rp.instrs.size() && IsMessage(rp.instrs[j].op)) ++j;
        if (j == rp.instrs.size() || rp.instrs[j].op != Op::kBackward) {
          return fail("a paired forward is not followed by a backward");
        }
      }
      if (in.microbatch < 0 || in.microbatch >= m) {
        return fail("microbatch out of range [0, " + std::to_string(m) + ")");
      }
      if (in.chunk < 0 || in.chunk >= p.vp)
        return fail("chunk out of range [0, " + std::to_string(p.vp) + ")");
      const int vs = VirtualStageOf(p, rank, in.chunk);
      uint8_t& s = seen[static_cast<size_t>(int64_t(in.microbatch) * p.vp + in.chunk)];
      if (IsMessage(in.op)) {
        if (in.bytes < 0) return fail("negative byte count");
        int want_peer = -1;
        switch (in.op) {
          case Op::kSendAct:
            if (vs == V - 1) return fail("the last virtual stage has no activation to send");
            if (!(s & 1)) return fail("sends the activation before its forward");
            if (s & 16) return fail("sends the activation twice");
            s |= 16;
            want_peer = RankOfStage(p, vs + 1);
            break;
          case Op::kRecvAct:
            if (vs == 0) return fail("the first virtual stage receives no activation");
            if (s & 4) return fail("receives the activation twice");
            if (s & 1) return fail("receives the activation after its forward");
            s |= 4;
            want_peer = RankOfStage(p, vs - 1);
            break;
          case Op::kSendGrad:
            if (vs == 0) return fail("the first virtual stage has no input gradient to send");
            if (!(s & 2)) return fail("sends the gradient before its backward");
            if (s & 32) return fail("sends the gradient twice");
            s |= 32;
            want_peer = RankOfStage(p, vs - 1);
            break;
          default:  // kRecvGrad
            if (vs == V - 1) return fail("the last virtual stage receives no gradient");
            if (s & 8) return fail("receives the gradient twice");
            if (s & 2) return fail("receives the gradient after its backward");
            s |= 8;
            want_peer = RankOfStage(p, vs + 1);
            break;
        }
        if (want_peer == rank) {
          return fail("virtual stages " + std::to_string(vs) + " and its neighbour share this " +
                      "rank: they hand over without a message");
        }
        if (in.peer != want_peer) {
          return fail("peer should be rank " + std::to_string(want_peer) + " (virtual stage " +
                      std::to_string(vs) + ")");
        }
        const int64_t key = MessageKey(p, rank, in);
        const int64_t tag = (int64_t(rank) << 32) + int64_t(i) + 1;
        const bool is_send = in.op == Op::kSendAct || in.op == Op::kSendGrad;
        auto& slot = is_send ? sends[key] : recvs[key];
        if (slot != 0) return fail("duplicate message");
        slot = tag;
        continue;
      }
      if (in.peer != -1 || in.bytes != 0) return fail("a compute instruction has no peer or bytes");
      // The (mb, chunk) on this rank holding virtual stage `stage` (the other side of a local
      // boundary).
      auto local = [&](int stage) -> uint8_t {
        const int chunk = HolderOfStage(p.kind, p.pp, stage).chunk;
        return seen[static_cast<size_t>(int64_t(in.microbatch) * p.vp + chunk)];
      };
      if (in.op == Op::kForward) {
        if (s & 1) return fail("a second forward of the same microbatch and chunk");
        if (lowered && vs > 0 && LocalBoundary(p, vs - 1) && !(local(vs - 1) & 1))
          return fail("forward before the forward of virtual stage " + std::to_string(vs - 1) +
                      " on this rank, which hands it its input");
        if (lowered && vs > 0 && !LocalBoundary(p, vs - 1) && !(s & 4))
          return fail("forward before its input activation is received");
        s |= 1;
      } else if (in.op == Op::kBackwardWeight) {
        if (in.recompute) return fail("a weight-gradient pass recomputes nothing");
        if (!(s & 64)) return fail("weight gradient before its input-gradient pass (BI)");
        if (s & 128) return fail("a second weight gradient of the same microbatch and chunk");
        s |= 128;
      } else {
        if (!(s & 1)) return fail("backward before its forward");
        if (s & 2) return fail("a second backward of the same microbatch and chunk");
        if (lowered && vs < V - 1 && LocalBoundary(p, vs) && !(local(vs + 1) & 2))
          return fail("backward before the input gradient of virtual stage " +
                      std::to_string(vs + 1) + " on this rank, which is its output gradient");
        if (lowered && vs < V - 1 && !LocalBoundary(p, vs) && !(s & 8))
          return fail("backward before its output gradient is received");
        s |= in.op == Op::kBackwardInput ? 2 | 64 : 2;
      }
    }
    for (int64_t k = 0; k < slots; ++k) {
      const uint8_t s = seen[k];
      const char* lacks = !(s & 1) ? "forward" : !(s & 2) ? "backward" : nullptr;
      if (lacks == nullptr && (s & 64) && !(s & 128)) lacks = "weight gradient (W)";
      if (lacks != nullptr) {
        return Status::Invalid("rank " + std::to_string(rank) + ": microbatch " +
                               std::to_string(k / p.vp) + " chunk " + std::to_string(k % p.vp) +
                               " lacks its " + lacks);
      }
    }
  }
  // Every send has exactly one matching receive with the same bytes, and vice versa.
  auto at = [&](int64_t tag) {
    const int rank = static_cast<int>(tag >> 32);
    const size_t i = static_cast<size_t>((tag & 0xffffffffLL) - 1);
    return std::pair<int, size_t>(rank, i);
  };
  for (int64_t key = 0; key < static_cast<int64_t>(sends.size()); ++key) {
    if (sends[key] == 0 && recvs[key] == 0) continue;
    if (recvs[key] == 0) {
      auto [r, i] = at(sends[key]);
      return Status::Invalid(Where(r, i, p.ranks[r].instrs[i], wc) +
                             ": no matching receive on rank " +
                             std::to_string(p.ranks[r].instrs[i].peer));
    }
    if (sends[key] == 0) {
      auto [r, i] = at(recvs[key]);
      return Status::Invalid(Where(r, i, p.ranks[r].instrs[i], wc) + ": no matching send on rank " +
                             std::to_string(p.ranks[r].instrs[i].peer));
    }
    auto [sr, si] = at(sends[key]);
    auto [rr, ri] = at(recvs[key]);
    if (p.ranks[sr].instrs[si].bytes != p.ranks[rr].instrs[ri].bytes) {
      return Status::Invalid(Where(rr, ri, p.ranks[rr].instrs[ri], wc) + ": " +
                             std::to_string(p.ranks[rr].instrs[ri].bytes) +
                             " bytes but the send (" + Where(sr, si, p.ranks[sr].instrs[si], wc) +
                             ") has " + std::to_string(p.ranks[sr].instrs[si].bytes));
    }
  }

  // Dry run. Lowered: a send posts its key, a receive waits for it. Compute-only: a
  // forward/backward posts the key of the message it would send and waits for the one it would
  // receive.
  std::vector<uint8_t> posted(static_cast<size_t>(keys), 0);
  std::vector<int> waiter(static_cast<size_t>(keys), -1);
  std::vector<size_t> pc(p.pp, 0);
  std::vector<int> runnable;
  for (int r = p.pp - 1; r >= 0; --r) runnable.push_back(r);
  auto post = [&](int64_t key) {
    posted[key] = 1;
    if (waiter[key] >= 0) {
      runnable.push_back(waiter[key]);
      waiter[key] = -1;
    }
  };
  while (!runnable.empty()) {
    const int r = runnable.back();
    runnable.pop_back();
    const auto& ins = p.ranks[r].instrs;
    while (pc[r] < ins.size()) {
      const Instr& in = ins[pc[r]];
      int64_t wait_key = -1, post_key = -1;
      if (lowered) {
        if (in.op == Op::kRecvAct || in.op == Op::kRecvGrad) wait_key = MessageKey(p, r, in);
        if (in.op == Op::kSendAct || in.op == Op::kSendGrad) post_key = MessageKey(p, r, in);
      } else if (in.op == Op::kForward || ComputesInputGrad(in.op)) {
        const int vs = VirtualStageOf(p, r, in.chunk);
        Instr msg = in;
        if (in.op == Op::kForward) {
          msg.op = Op::kRecvAct;
          if (vs > 0) wait_key = MessageKey(p, r, msg);
          msg.op = Op::kSendAct;
          if (vs < V - 1) post_key = MessageKey(p, r, msg);
        } else {
          msg.op = Op::kRecvGrad;
          if (vs < V - 1) wait_key = MessageKey(p, r, msg);
          msg.op = Op::kSendGrad;
          if (vs > 0) post_key = MessageKey(p, r, msg);
        }
      }
      if (wait_key >= 0 && !posted[wait_key]) {
        waiter[wait_key] = r;
        break;
      }
      if (post_key >= 0) post(post_key);
      ++pc[r];
    }
  }
  for (int r = 0; r < p.pp; ++r) {
    if (pc[r] < p.ranks[r].instrs.size()) {
      return Status::Invalid(
          Where(r, pc[r], p.ranks[r].instrs[pc[r]], wc) +
          ": deadlock: waits for a message its peer sends only after waiting itself");
    }
  }
  return lowered ? CheckPairOrder(p, wc) : Status::Ok();
}

}  // namespace ptdp::schedule
