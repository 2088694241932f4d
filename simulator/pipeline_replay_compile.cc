// Compiling a shape's schedule into the fast replay's Steps (simulator/pipeline_replay.h).
#include "schedule/schedule.h"
#include "simulator/pipeline_replay_state.h"

namespace ptdp::sim::replay_internal {

// A shape's schedule (`compute`, compute instructions only), lowered as schedule::Lower lowers it
// and compiled into Steps as each lowered instruction comes (schedule::LowerEach: no Program of
// the lowered instructions is built); reduce-grads and the optimizer step run after the rank's
// last backward and are left out. Sets `instructions` to the lowered Program's count. False when
// Lower would fail.
bool Compile(const Program& compute, bool recompute, bool paired,
             std::vector<std::vector<Step>>* out, int64_t* instructions) {
  const Program& p = compute;  // kind, pp, vp and microbatches: the lowered Program's
  // The ranks' lists are refilled, not rebuilt: a shape's several megabytes of steps reuse the
  // last shape's buffers (fresh ones cost a page fault every 4 KiB).
  out->resize(p.ranks.size());
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    (*out)[r].clear();
    (*out)[r].reserve(3 * p.ranks[r].instrs.size());  // a receive and a send beside each
  }
  // Per rank * vp + chunk: stash-freeing backwards so far.
  std::vector<int64_t> frees(p.ranks.size() * size_t(p.vp), 0);
  int64_t count = 0;
  auto compile = [&](int rank, const Instr& in) {
    ++count;
    Step s;
    s.cc = rank * p.vp + in.chunk;
    s.recompute = in.recompute;
    s.paired = in.paired;
    if (in.op == Op::kBackward || in.op == Op::kBackwardWeight) {
      s.reduces = ++frees[size_t(s.cc)] == p.microbatches;
    }
    switch (in.op) {
      case Op::kForward:
        s.op = StepOp::kForward;
        break;
      case Op::kBackward:
        s.op = StepOp::kBackward;
        break;
      case Op::kBackwardInput:
        s.op = StepOp::kBackwardInput;
        break;
      case Op::kBackwardWeight:
        s.op = StepOp::kBackwardWeight;
        break;
      case Op::kSendAct:
      case Op::kSendGrad:
        s.op = StepOp::kSend;
        s.grad = in.op == Op::kSendGrad;
        // Interpreter::LinkOf: in a V chunk 1's messages cross between the same neighbours the
        // other way round.
        s.cc = VShaped(p.kind) ? std::min(rank, int(in.peer)) : s.grad ? in.peer : rank;
        s.peer = in.peer;
        s.key = int32_t(schedule::MessageKey(p, rank, in));
        break;
      case Op::kRecvAct:
      case Op::kRecvGrad:
        s.op = StepOp::kRecv;
        s.key = int32_t(schedule::MessageKey(p, rank, in));
        break;
      case Op::kReduceGrads:
      case Op::kOptimizerStep:
        return;
    }
    s.adjust = s.paired || (s.recompute && s.op != StepOp::kForward && s.op != StepOp::kSend &&
                            s.op != StepOp::kRecv);
    (*out)[size_t(rank)].push_back(s);
  };
  // Bytes of 1 stand in: a layout's own bytes are lowering.message_bytes, uniform per message.
  const bool ok = schedule::LowerEach(compute, 1, recompute, compile).ok();
  *instructions = count;
  // The walk takes a paired forward's backward from the next step, as the Interpreter does.
  for (std::vector<Step>& steps : *out) {
    for (size_t i = 0; paired && i < steps.size(); ++i) {
      if (!steps[i].paired) continue;
      if (i + 1 == steps.size() || steps[i + 1].op != StepOp::kBackward) return false;
      steps[i + 1].pair_backward = steps[i + 1].adjust = true;
    }
  }
  return ok;
}

}  // namespace ptdp::sim::replay_internal
