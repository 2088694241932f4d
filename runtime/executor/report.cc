// Memory, timeline and monitor gathering (collective over the world).
#include <algorithm>
#include <unordered_map>

#include "core/ledger.h"
#include "runtime/comm/agree.h"
#include "runtime/executor/trainer.h"
#include "schedule/schedule.h"

namespace ptdp::runtime {

Result<std::vector<RankMemory>> Trainer::GatherMemory() {
  std::vector<double> mine = {double(coord_.pp), double(dev_->stats().peak_total)};
  for (Bytes b : dev_->stats().peak) mine.push_back(double(b));
  PTDP_ASSIGN_OR_RETURN(std::vector<double> all, AllGatherDoubles(*world_, mine));
  std::vector<RankMemory> out;
  const size_t w = mine.size();
  for (size_t r = 0; r * w < all.size(); ++r) {
    RankMemory m;
    m.rank = static_cast<int>(r);
    m.pp_rank = static_cast<int>(all[r * w]);
    m.peak_total = static_cast<Bytes>(all[r * w + 1]);
    for (int t = 0; t < kNumMemTags; ++t) m.peak[t] = static_cast<Bytes>(all[r * w + 2 + t]);
    out.push_back(m);
  }
  return out;
}

Result<Timeline> Trainer::GatherTimeline() {
  const bool reports = coord_.tp == 0 && coord_.dp == 0;
  constexpr size_t kW = 12;
  PTDP_ASSIGN_OR_RETURN(std::vector<double> counts,
                        AllGatherDoubles(*world_, {reports ? double(events_.size()) : 0.0}));
  size_t most = 0;
  for (double c : counts) most = std::max(most, static_cast<size_t>(c));
  std::vector<double> mine(most * kW, 0.0);
  if (reports) {
    for (size_t i = 0; i < events_.size(); ++i) {
      const TimelineEvent& e = events_[i];
      const double v[kW] = {double(static_cast<int>(e.instr.op)),
                            double(e.instr.microbatch),
                            double(e.instr.chunk),
                            double(e.instr.peer),
                            double(e.instr.bytes),
                            e.instr.recompute ? 1.0 : 0.0,
                            double(e.start_ns),
                            double(e.end_ns),
                            double(activation_bytes_[i]),
                            double(e.wait_ns),
                            double(grad_reduce_bytes_[i]),
                            double(grad_early_starts_[i])};
      std::copy(v, v + kW, mine.begin() + static_cast<std::ptrdiff_t>(i * kW));
    }
  }
  PTDP_ASSIGN_OR_RETURN(std::vector<double> all, AllGatherDoubles(*world_, mine));
  Timeline t = timeline_;
  if (world_->rank() != 0) return t;
  PTDP_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(cfg_.tp, cfg_.WeightReplicas(), cfg_.pp));
  for (size_t r = 0; r < counts.size(); ++r) {
    const RankCoord c = grid.Coord(static_cast<int>(r));
    for (size_t i = 0; i < static_cast<size_t>(counts[r]); ++i) {
      const double* v = all.data() + (r * most + i) * kW;
      TimelineEvent e;
      e.pp_rank = c.pp;
      e.instr.op = static_cast<Op>(static_cast<int>(v[0]));
      e.instr.microbatch = static_cast<int32_t>(v[1]);
      e.instr.chunk = static_cast<int32_t>(v[2]);
      e.instr.peer = static_cast<int32_t>(v[3]);
      e.instr.bytes = static_cast<Bytes>(v[4]);
      e.instr.recompute = v[5] != 0;
      e.stream = StreamOf(e.instr.op);
      e.start_ns = static_cast<Nanoseconds>(v[6]);
      e.end_ns = static_cast<Nanoseconds>(v[7]);
      e.wait_ns = static_cast<Nanoseconds>(v[9]);
      t.events.push_back(e);
      // Activation memory held after each instruction (the simulator emits the same counter).
      t.counters.push_back(TimelineCounter{c.pp, "activation_GiB", e.end_ns, BytesToGiB(v[8])});
      // With the overlapped reduction: the data-parallel buckets started and not yet seen complete
      // at each instruction's end (completion is seen at the boundary Tests, so this bounds each
      // bucket's end from above; on NCCL, whose requests report no completion, it is kReduceGrads's
      // end). The trace format has instruction intervals only; a counter leaves `ptdp compare`
      // and `ptdp calibrate` as they were (they read the instructions).
      if (opts_.overlap_grad_reduce) {
        t.counters.push_back(
            TimelineCounter{c.pp, "dp_grad_reduce_in_flight_MiB", e.end_ns, v[10] / (1 << 20)});
        // The buckets the instruction started while some of its chunk's gradients were still to
        // be written (after a layer's or the head's backward, not at the instruction's end).
        t.counters.push_back(
            TimelineCounter{c.pp, "dp_grad_buckets_started_early", e.end_ns, v[11]});
      }
    }
  }
  GiveSendsTheirTransfer(&t);
  return t;
}

// The simulator's send and receive of a message span one interval, its transfer. The runtime's
// send is the non-blocking issue (microseconds, whatever the message), so each send gets the
// transfer its receiver measured, from the send's issue on: like with like in `ptdp compare`.
// A send whose receive is not in the trace (none, on a complete one) keeps its issue time.
void Trainer::GiveSendsTheirTransfer(Timeline* t) const {
  std::unordered_map<int64_t, Nanoseconds> transfer;  // message key -> receive's interval
  for (const TimelineEvent& e : t->events) {
    if (e.instr.op == Op::kRecvAct || e.instr.op == Op::kRecvGrad)
      transfer[schedule::MessageKey(program_, e.pp_rank, e.instr)] = e.Duration();
  }
  for (TimelineEvent& e : t->events) {
    if (e.instr.op != Op::kSendAct && e.instr.op != Op::kSendGrad) continue;
    auto it = transfer.find(schedule::MessageKey(program_, e.pp_rank, e.instr));
    if (it != transfer.end()) e.end_ns = e.start_ns + it->second;
  }
}

// This step's instructions (events_, from the device marks) into `w` (the monitor's window, or the
// warm-up step's); `step_s` is the job's step time (its slowest rank's).
void Trainer::AddToWindow(double step_s, RankWindow* w) const {
  double first = -1, last = 0;
  for (const TimelineEvent& e : events_) {
    const double s = double(e.end_ns - e.start_ns) * 1e-9;
    switch (e.instr.op) {
      case Op::kForward:
      case Op::kBackward:
      case Op::kBackwardInput:
      case Op::kBackwardWeight:
        w->stage_compute_s += s;
        w->busy_s += s;
        if (first < 0) first = double(e.start_ns) * 1e-9;
        last = double(e.end_ns) * 1e-9;
        break;
      case Op::kOptimizerStep:
        w->busy_s += s;
        break;
      default:
        w->comm_s += s;
    }
  }
  if (first >= 0) w->span_s += last - first;
  w->wall_s += step_s;
  ++w->steps;
}

Result<MonitorReport> Trainer::GatherMonitor(double straggler_threshold) {
  if (window_.steps == 0 && warmup_window_.steps > 0) {  // a window of the warm-up step alone
    window_ = warmup_window_;
    window_first_step_ = warmup_step_;
  }
  warmup_window_ = RankWindow{};
  window_.rank = world_->rank();
  window_.coord = coord_;
  window_.expected_flops = PipelineRankFlops(model_, cfg_, coord_.pp);
  std::vector<double> mine(RankWindow::kWireSize);
  window_.ToWire(mine.data());
  PTDP_ASSIGN_OR_RETURN(std::vector<double> all, AllGatherDoubles(*world_, mine));
  std::vector<RankWindow> ranks;
  for (size_t r = 0; (r + 1) * RankWindow::kWireSize <= all.size(); ++r) {
    ranks.push_back(RankWindow::FromWire(all.data() + r * RankWindow::kWireSize));
  }
  const int64_t first = window_first_step_, last = first + window_.steps - 1;
  window_ = RankWindow{};
  window_first_step_ = 0;
  return AnalyseWindow(std::move(ranks), cfg_.pp, straggler_threshold, first, last);
}

}  // namespace ptdp::runtime
