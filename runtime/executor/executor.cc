// The Program interpreter: one handler per instruction. Each handler appends what it completed
// (the op and the (microbatch, chunk) of the state it acted on) to executed_, and the iteration
// compares that record with the Program: a handler that skips, repeats or acts on the wrong state
// is caught.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "runtime/comm/agree.h"
#include "runtime/executor/trainer.h"
#include "runtime/executor/trainer_state.h"
#include "schedule/schedule.h"

namespace ptdp::runtime {
namespace {

// Host nanoseconds since t0.
Nanoseconds SinceNs(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
      .count();
}

}  // namespace

Status CheckExecutedOrder(const std::vector<Instr>& program, const std::vector<ExecRecord>& done) {
  const size_t n = std::min(program.size(), done.size());
  for (size_t i = 0; i < n; ++i) {
    const Instr& in = program[i];
    const bool batch_level = in.op == Op::kReduceGrads || in.op == Op::kOptimizerStep;
    const ExecRecord want{in.op, batch_level ? -1 : in.microbatch, batch_level ? -1 : in.chunk};
    if (!(done[i] == want)) {
      return Status::Internal("executed order differs from the Program at instruction " +
                              std::to_string(i) + ": the Program has " + InstrToText(in) +
                              ", the executor completed " + OpName(done[i].op) + " (" +
                              std::to_string(done[i].microbatch) + ", " +
                              std::to_string(done[i].chunk) + ")");
    }
  }
  if (done.size() != program.size()) {
    return Status::Internal("executed " + std::to_string(done.size()) +
                            " instructions, the Program has " + std::to_string(program.size()));
  }
  return Status::Ok();
}

Trainer::MbState* Trainer::FindState(int mb, int chunk) {
  auto it = live_.find(Key(mb, chunk));
  return it == live_.end() ? nullptr : it->second.get();
}

Trainer::MbState* Trainer::NewState(int mb, int chunk) {
  auto& slot = live_[Key(mb, chunk)];
  if (!slot) {
    slot = std::make_unique<MbState>();
    slot->mb = mb;
    slot->chunk = chunk;
    slot->layers.resize(chunk_layers_[chunk].size());
  }
  return slot.get();
}

void Trainer::Record(Op op, const MbState& st) {
  executed_.push_back({op, st.mb, st.chunk});
}

Status Trainer::RunProgram(int64_t step) {
  const std::vector<Instr>& instrs = program_.ranks[static_cast<size_t>(coord_.pp)].instrs;
  executed_.clear();
  // The measured timeline: a device mark before the first instruction and after each (an event on
  // a GPU's stream, so an instruction's time is the device's, not the enqueueing's).
  dev_->ClearMarks();
  PTDP_RETURN_IF_ERROR(dev_->Mark());
  std::vector<Nanoseconds> waits(instrs.size(), 0), preps(instrs.size(), 0);
  for (size_t i = 0; i < instrs.size(); ++i) {
    const Instr& in = instrs[i];
    recv_wait_ns_ = 0;
    recv_prep_ns_ = 0;
    BeginChunkGradReduce(i);
    Status st = world_->rank() == opts_.slow_rank ? ExecuteSlowed(in, step) : Execute(in, step);
    if (!st.ok()) {
      return st.WithPrefix("rank " + std::to_string(world_->rank()) + ", step " +
                           std::to_string(step) + ", instruction " + std::to_string(i) + " (" +
                           InstrToText(in) + ")");
    }
    waits[i] = recv_wait_ns_;
    preps[i] = recv_prep_ns_;
    // Issued inside the instruction's interval, like a send's issue (grad_reduce.cc).
    PTDP_RETURN_IF_ERROR(StartChunkGradReduce(i));
    PTDP_RETURN_IF_ERROR(dev_->Mark());
    activation_bytes_.push_back(dev_->stats().current[static_cast<int>(MemTag::kActivations)]);
    // Sampled before this boundary's Test: what was in flight when the instruction ended.
    grad_reduce_bytes_.push_back(GradElementsInFlight() * Bytes(sizeof(float)));
    grad_early_starts_.push_back(buckets_started_early_);
    PTDP_RETURN_IF_ERROR(PollSends());
    PTDP_RETURN_IF_ERROR(PollGradReduce());
  }
  PTDP_ASSIGN_OR_RETURN(const std::vector<double> marks, dev_->MarkSeconds());
  if (marks.size() != instrs.size() + 1) {
    return Status::Internal("device marks: " + std::to_string(marks.size()) + " for " +
                            std::to_string(instrs.size()) + " instructions");
  }
  const auto ns = [](double s) { return static_cast<Nanoseconds>(std::llround(s * 1e9)); };
  // A receive's wait for its sender is not its time (the simulator's receive is the transfer):
  // the interval starts when the message could be received, the wait goes to wait_ns. Nor is the
  // host bookkeeping before it (the microbatch's state and input buffer for recv_act, the gradient
  // buffer for recv_grad): that is left as a gap before the interval, in neither.
  for (size_t i = 0; i < instrs.size(); ++i) {
    const Nanoseconds end = std::max(ns(marks[i]), ns(marks[i + 1]));
    const Nanoseconds start = std::min(end, ns(marks[i]) + preps[i] + waits[i]);
    const Nanoseconds wait = std::min(waits[i], start - ns(marks[i]));
    events_.push_back(
        TimelineEvent{coord_.pp, StreamOf(instrs[i].op), instrs[i], start, end, wait});
  }
  PTDP_RETURN_IF_ERROR(CheckExecutedOrder(instrs, executed_));
  if (!live_.empty()) {
    return Status::Internal(std::to_string(live_.size()) +
                            " microbatch states left at the end of the iteration");
  }
  if (!grad_buckets_.empty()) {
    return Status::Internal(std::to_string(grad_buckets_.size()) +
                            " gradient buckets still in flight at the end of the iteration");
  }
  return Status::Ok();
}

Status Trainer::RecvBoundary(const Instr& in, TensorRef full) {
  const int64_t n = dims_.R() * dims_.h;
  const bool sg = ScatterGathers();
  const int64_t count = sg ? n / cfg_.tp : n;
  const Bytes bytes = count * DTypeBytes(types_.act);
  if (in.bytes != bytes) {
    return Status::Internal("program message of " + std::to_string(in.bytes) +
                            " bytes, runtime moves " + std::to_string(bytes));
  }
  const int tag = static_cast<int>(schedule::MessageKey(program_, coord_.pp, in));
  char* base = static_cast<char*>(full.data);
  void* mine = sg ? base + int64_t(coord_.tp) * count * DTypeBytes(types_.act) : base;
  const auto t0 = std::chrono::steady_clock::now();
  PTDP_ASSIGN_OR_RETURN(const bool waited, PipeFor(in.op)->WaitForMessage(in.peer, tag));
  if (waited) recv_wait_ns_ = SinceNs(t0);
  PTDP_RETURN_IF_ERROR(PipeFor(in.op)->Recv(mine, count, types_.act, in.peer, tag));
  if (sg) PTDP_RETURN_IF_ERROR(tp_->AllGather(mine, full.data, count, types_.act));
  return Status::Ok();
}

Status Trainer::SendBoundary(const Instr& in, Tensor buf) {
  const int64_t n = dims_.R() * dims_.h;
  PTDP_CHECK(buf.count() == n);
  const bool sg = ScatterGathers();
  const int64_t count = sg ? n / cfg_.tp : n;
  const int tag = static_cast<int>(schedule::MessageKey(program_, coord_.pp, in));
  const char* base = static_cast<const char*>(buf.data());
  const void* mine = sg ? base + int64_t(coord_.tp) * count * DTypeBytes(types_.act) : base;
  auto p = std::make_unique<Pending>();
  PTDP_ASSIGN_OR_RETURN(p->req, PipeFor(in.op)->ISend(mine, count, types_.act, in.peer, tag));
  p->buf = std::move(buf);
  pending_.push_back(std::move(p));
  return Status::Ok();
}

Status Trainer::PollSends() {
  for (size_t i = 0; i < pending_.size();) {
    PTDP_ASSIGN_OR_RETURN(bool done, pending_[i]->req->Test());
    if (done) {
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  return Status::Ok();
}

Status Trainer::WaitSends() {
  for (auto& p : pending_) PTDP_RETURN_IF_ERROR(p->req->Wait());
  pending_.clear();
  return Status::Ok();
}

// The test-only straggler: each forward and backward is followed by a sleep of (factor - 1) times
// its own duration, so the rank computes `factor` times slower whatever else the CPU runs (a busy
// wait would take a core from the ranks sharing it and slow them too, unlike a slow GPU).
Status Trainer::ExecuteSlowed(const Instr& in, int64_t step) {
  if (!IsCompute(in.op)) return Execute(in, step);
  PTDP_RETURN_IF_ERROR(dev_->Synchronize());
  const auto t0 = std::chrono::steady_clock::now();
  PTDP_RETURN_IF_ERROR(Execute(in, step));
  PTDP_RETURN_IF_ERROR(dev_->Synchronize());
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
  std::this_thread::sleep_for(took * (opts_.slow_factor - 1));
  return Status::Ok();
}

Status Trainer::Execute(const Instr& in, int64_t step) {
  const int mb = in.microbatch, chunk = in.chunk;
  switch (in.op) {
    case Op::kRecvAct: {
      const auto t0 = std::chrono::steady_clock::now();
      MbState* st = NewState(mb, chunk);
      PTDP_RETURN_IF_ERROR(AllocLayerInput(Ctx(mb, step), &st->layers[0]));
      recv_prep_ns_ = SinceNs(t0);
      PTDP_RETURN_IF_ERROR(RecvBoundary(in, st->layers[0].x.ref()));
      Record(in.op, *st);
      return Status::Ok();
    }
    case Op::kForward:
      return Forward(mb, chunk, step);  // records itself
    case Op::kSendAct: {
      MbState* st = FindState(mb, chunk);
      if (st == nullptr || st->out.empty()) {
        return Status::Internal("send_act with no forward output");
      }
      PTDP_RETURN_IF_ERROR(SendBoundary(in, std::move(st->out)));
      Record(in.op, *st);
      return Status::Ok();
    }
    case Op::kRecvGrad: {
      MbState* st = FindState(mb, chunk);
      if (st == nullptr) return Status::Internal("recv_grad for a microbatch with no forward");
      const auto t0 = std::chrono::steady_clock::now();
      PTDP_ASSIGN_OR_RETURN(
          st->dout, Tensor::Make(dev_.get(), dims_.R() * dims_.h, types_.act, MemTag::kWorkspace));
      recv_prep_ns_ = SinceNs(t0);
      PTDP_RETURN_IF_ERROR(RecvBoundary(in, st->dout.ref()));
      Record(in.op, *st);
      return Status::Ok();
    }
    case Op::kBackward:
      return Backward(mb, chunk, in.recompute, step);  // records itself
    case Op::kSendGrad: {
      MbState* st = FindState(mb, chunk);
      if (st == nullptr || st->dgrad.empty()) {
        return Status::Internal("send_grad with no input gradient");
      }
      Tensor g = std::move(st->dgrad);
      Record(in.op, *st);
      if (!st->weight_half_pending) live_.erase(Key(st->mb, st->chunk));
      return SendBoundary(in, std::move(g));
    }
    case Op::kReduceGrads:
      PTDP_RETURN_IF_ERROR(ReduceGrads());
      executed_.push_back({in.op, -1, -1});
      return Status::Ok();
    case Op::kOptimizerStep:
      PTDP_RETURN_IF_ERROR(OptimizerStep(step));
      executed_.push_back({in.op, -1, -1});
      return Status::Ok();
    case Op::kBackwardInput:
      return Backward(mb, chunk, in.recompute, step, /*split=*/true);  // records itself
    case Op::kBackwardWeight:
      return BackwardWeight(mb, chunk, step);  // records itself
  }
  return Status::Internal("unknown instruction");
}

}  // namespace ptdp::runtime
