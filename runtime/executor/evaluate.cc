// Evaluation on a validation set (Megatron-LM's --eval-interval / --eval-iters): the training
// Program's forwards and their activation messages, nothing else, on every rank in the Program's
// order. Dropping the backwards, the gradient messages and the step from each rank's list leaves
// every pair of ranks the same forward messages in the same order, so the replay stays free of
// deadlock (schedule/schedule.h's ordering contract) for every schedule, the V's local turn
// included. Each forward runs as under full recomputation (a layer keeps nothing but its input)
// and then frees all but the message it sends: evaluation never holds more than a training step.
#include "core/shapes.h"
#include "runtime/comm/agree.h"
#include "runtime/executor/trainer.h"
#include "runtime/executor/trainer_state.h"

namespace ptdp::runtime {

Result<double> Trainer::Evaluate(int64_t batches, SplitPart part) {
  TokenSet* set = part == SplitPart::kTest ? test_.get() : valid_.get();
  if (set == nullptr || part == SplitPart::kTrain) {
    return Status::Internal("Evaluate without validation or test data");
  }
  if (batches < 1) return Status::Internal("Evaluate of no batch");
  if (!live_.empty()) return Status::Internal("Evaluate with microbatch states still live");
  evaluating_ = set;
  const Status st = EvaluateBatches(batches);
  evaluating_ = nullptr;
  live_.clear();
  executed_.clear();
  PTDP_RETURN_IF_ERROR(st);
  // As Step's loss: the head rank's tensor rank 0 of every data and context rank reports its sum.
  const bool reports = coord_.pp == HeadRank(cfg_) && coord_.tp == 0;
  double loss_sum = 0;
  dev_->Copy(&loss_sum, loss_sum_.data(), sizeof(double));
  PTDP_ASSIGN_OR_RETURN(std::vector<double> all,
                        AllGatherDoubles(*world_, {reports ? loss_sum : 0.0}));
  double total = 0;
  for (double v : all) total += v;
  return total / (double(batches) * double(cfg_.global_batch) * double(model_.seq_len));
}

Status Trainer::EvaluateBatches(int64_t batches) {
  PTDP_RETURN_IF_ERROR(dev_->ops()->Fill(loss_sum_.ref(), 0.0));
  const std::vector<Instr>& instrs = program_.ranks[static_cast<size_t>(coord_.pp)].instrs;
  for (int64_t batch = 1; batch <= batches; ++batch) {
    for (size_t i = 0; i < instrs.size(); ++i) {
      const Instr& in = instrs[i];
      if (in.op != Op::kRecvAct && in.op != Op::kForward && in.op != Op::kSendAct) continue;
      Status st = Execute(in, batch);
      if (st.ok() && in.op == Op::kForward) st = ForgetAfterEvalForward(in.microbatch, in.chunk);
      if (st.ok() && in.op == Op::kSendAct) live_.erase(Key(in.microbatch, in.chunk));
      if (st.ok()) st = PollSends();
      if (!st.ok()) {
        return st.WithPrefix("rank " + std::to_string(world_->rank()) + ", evaluation batch " +
                             std::to_string(batch) + ", instruction " + std::to_string(i) + " (" +
                             InstrToText(in) + ")");
      }
    }
    PTDP_RETURN_IF_ERROR(WaitSends());
    live_.clear();  // states whose output a V's local turn consumed
  }
  return Status::Ok();
}

// All the forward kept for a backward goes; its output, the next stage's input (sent or taken by
// the local turn of a V), stays. The head's stage keeps nothing: the loss is in loss_sum_.
Status Trainer::ForgetAfterEvalForward(int mb, int chunk) {
  MbState* st = FindState(mb, chunk);
  if (st == nullptr) return Status::Internal("evaluation forward left no state");
  Tensor out = std::move(st->out);
  live_.erase(Key(mb, chunk));
  if (!out.empty()) NewState(mb, chunk)->out = std::move(out);
  return Status::Ok();
}

}  // namespace ptdp::runtime
