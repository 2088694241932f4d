// The Program interpreter on the event engine (contract in simulator/simulator.h).
#include "simulator/simulator.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

#include "schedule/schedule.h"
#include "simulator/collective_stream.h"
#include "simulator/engine.h"
#include "simulator/network.h"

namespace ptdp::sim {
namespace {

enum EventKind : uint32_t {
  kFlowDone = 0,        // a = flow id, b = version (network.h)
  kComputeDone = 1,     // a = rank
  kLatencyDone = 2,     // a = message key: the transfer enters its link
  kArrive = 3,          // a = message key: the receiver holds the message
  kCollectiveDone = 4,  // a = rank
  kCollWake = 5,        // a = rank: collective_stream.h's events
  kCollLatency = 6,
  kCollIntra = 7,
};

// One pipeline message, indexed by schedule::MessageKey. Its destination, link and bytes come
// from the send instruction (src, send_instr).
struct Message {
  Nanoseconds sent_ns = -1;    // when the sender issued it
  Nanoseconds arrive_ns = -1;  // when the receiver holds it (-1: not yet)
  int32_t src = -1;            // sending rank
  int32_t send_instr = -1;     // index of the send in the sender's list
  int32_t waiter = -1;         // rank blocked on it
};

struct RankState {
  size_t pc = 0;
  Nanoseconds wait_since = 0;
  bool reduce_waiting = false;  // blocked in reduce-grads until its collective stream is idle
  // Megatron-LM waits for its pipeline sends (p2p requests' wait()) before the schedule returns,
  // so a reduction that is not overlapped starts once the rank's sends have arrived: it never
  // shares the NIC with the rank's own last gradient sends.
  int sends_in_flight = 0;
  bool reduce_after_sends = false;  // blocked at reduce-grads until sends_in_flight is 0
  Nanoseconds reduce_start = 0;
  Bytes live_bytes = 0;
  int live = 0;
  bool started = false;  // a compute instruction has run (RankStats::start_ns is set)
  std::vector<int64_t> backwards_left;  // per chunk, for the overlapped all-reduce
  // What the backward after a paired forward (Instr::paired) is shortened by: its share of the
  // combined step's saving.
  Nanoseconds pair_discount = 0;
};

class Interpreter {
 public:
  Interpreter(const Program& p, const costmodel::CostTable& c, const SimOptions& o)
      // Ports: [0, pp) NVLink egress, [pp, 2pp) NVLink ingress, then the same for the NICs.
      : p_(p),
        c_(c),
        o_(o),
        net_(4 * p.pp, kFlowDone),
        coll_(p.pp, 2 * p.pp, 3 * p.pp, {kCollWake, kCollLatency, kCollIntra}) {}

  Result<SimResult> Run();

 private:
  void Issue(int r);
  // The rank's next instructions are read when its compute ends: fetch them into the cache now
  // (64 ranks interleave, which defeats the hardware's stream prefetcher).
  static void Prefetch(const std::vector<Instr>& ins, size_t pc) {
    if (pc + 2 < ins.size()) {
      __builtin_prefetch(&ins[pc]);
      __builtin_prefetch(&ins[pc + 2]);
    }
  }
  void SendMessage(int r, const Instr& in, size_t index);
  // A pipeline message enters its link: NVLink ports, or the NICs for a link between nodes.
  void StartTransfer(int64_t key);
  // Reduce-grads ends once the rank's collective stream is idle: then the embedding all-reduce.
  void FinishReduce(int r);
  // schedule::MessageKey, inline.
  int64_t Key(int r, const Instr& in) const {
    const int64_t vs = StageOfChunk(p_.kind, p_.pp, r, in.chunk);
    const bool up = in.op == Op::kSendAct || in.op == Op::kRecvGrad;  // boundary above vs
    const bool grad = in.op == Op::kSendGrad || in.op == Op::kRecvGrad;
    return ((int64_t(in.microbatch) * v_stages_ + (up ? vs : vs - 1)) << 1) | (grad ? 1 : 0);
  }
  // Link of a send: activations go r -> r+1 over link r (pp-1: the wrap to rank 0); gradients
  // come back over the same link in the other direction. In a V the messages of chunk 1 go the
  // other way round, between the same neighbours: link min(r, peer) either way.
  int LinkOf(int r, const Instr& send) const {
    if (VShaped(p_.kind)) return std::min(r, send.peer);
    return send.op == Op::kSendAct ? r : send.peer;
  }
  void Record(int r, Stream s, const Instr& in, Nanoseconds start, Nanoseconds end) {
    if (o_.record_timeline) res_.timeline.events.push_back(TimelineEvent{r, s, in, start, end});
  }
  void Counter(int r, Nanoseconds t, Bytes live) {
    if (o_.record_timeline) {
      res_.timeline.counters.push_back(
          TimelineCounter{r, "activation_GiB", t, BytesToGiB(double(live))});
    }
  }
  Nanoseconds At(const std::vector<Seconds>& v, int r) const { return RankNs(v, r); }
  Nanoseconds GatherNs(int r) const { return sim::GatherNs(c_, r); }
  Nanoseconds ReduceNs(int r) const { return sim::ReduceNs(c_, r); }
  Nanoseconds ExposedGatherNs(int r) const;
  // What `hidden` ns of overlapped data-parallel communication cost the compute beside it.
  Nanoseconds SlowdownNs(Nanoseconds hidden) const {
    return ToNanoseconds(ToSeconds(hidden) *
                         costmodel::OverlapStretch(c_.overlap_compute_slowdown));
  }

  const Program& p_;
  const costmodel::CostTable& c_;
  const SimOptions& o_;
  EventQueue q_;
  Network net_;
  CollectiveStreams coll_;
  SimResult res_;
  std::vector<RankState> st_;
  std::vector<Message> msg_;
  // Per rank * vp + chunk: forward, whole backward, its weight-gradient part, recomputation;
  // per link: latency.
  std::vector<Nanoseconds> fwd_ns_, bwd_ns_, wgt_ns_, rc_ns_, latency_ns_;
  Nanoseconds gather_ns_ = 0;
  int64_t v_stages_ = 1;
  // The gradient reduction runs in buckets beside the last backwards (SimOptions or the table's
  // software overlap).
  bool overlap_reduce_ = false;
};

// Replays the weights' all-gather in dp_buckets x vp buckets, back to back on the collective
// stream from the iteration's start, against the first forward of chunk 0 cut into as many
// pieces, each of which needs its bucket: the forward's end minus its length is what shows.
Nanoseconds Interpreter::ExposedGatherNs(int r) const {
  const int64_t k = std::max(1, c_.dp_buckets) * int64_t(p_.vp);
  const Nanoseconds gather = GatherNs(r), forward = fwd_ns_[size_t(r) * p_.vp];
  Nanoseconds gathered = 0, computed = 0;
  for (int64_t b = 0; b < k; ++b) {
    gathered += gather / k + (b < gather % k ? 1 : 0);
    const Nanoseconds piece = forward / k + (b < forward % k ? 1 : 0);
    computed = std::max(computed, gathered) + piece;
  }
  return computed - forward;
}

void Interpreter::SendMessage(int r, const Instr& in, size_t index) {
  const int64_t key = Key(r, in);
  Message& m = msg_[key];
  m.src = r;
  m.sent_ns = q_.now();
  m.send_instr = static_cast<int32_t>(index);
  ++st_[r].sends_in_flight;
  const int link = LinkOf(r, in);
  const double bw =
      link < static_cast<int>(c_.p2p_link.size()) ? c_.p2p_link[link].bandwidth_Bps : 0;
  const Nanoseconds lat = link < static_cast<int>(latency_ns_.size()) ? latency_ns_[link] : 0;
  if (in.bytes <= 0 || bw == std::numeric_limits<double>::infinity()) {
    q_.Schedule(q_.now() + lat + (in.bytes > 0 ? gather_ns_ : 0), Priority::kArrival, kArrive, key);
  } else {
    q_.Schedule(q_.now() + lat, Priority::kTransfer, kLatencyDone, key);
  }
}

void Interpreter::StartTransfer(int64_t key) {
  const Message& m = msg_[key];
  const Instr& send = p_.ranks[m.src].instrs[m.send_instr];
  const costmodel::LinkCost& link = c_.p2p_link[LinkOf(m.src, send)];
  const int base = link.inter_node ? 2 * p_.pp : 0;
  net_.StartFlow(q_, base + m.src, base + p_.pp + send.peer, link.bandwidth_Bps, double(send.bytes),
                 key);
}

void Interpreter::FinishReduce(int r) {
  RankState& s = st_[r];
  s.reduce_waiting = false;
  // The overlapped reduction's hidden part slowed the backwards beside it (the software profile's
  // overlap_compute_slowdown): what the wait did not show of ReduceNs was hidden. A gather that is
  // not overlapped ran after the reduction on the same stream, inside the wait.
  Nanoseconds slowdown = 0;
  if (overlap_reduce_) {
    const Nanoseconds waited = q_.now() - s.reduce_start;
    const Nanoseconds exposed =
        std::max<Nanoseconds>(0, waited - (c_.overlap_param_gather ? 0 : GatherNs(r)));
    slowdown = SlowdownNs(std::max<Nanoseconds>(0, ReduceNs(r) - exposed));
  }
  const Nanoseconds end = q_.now() + slowdown + At(c_.embedding_allreduce, r);
  res_.ranks[r].allreduce_ns += end - s.reduce_start;
  Record(r, Stream::kCollective, p_.ranks[r].instrs[s.pc], s.reduce_start, end);
  ++s.pc;
  q_.Schedule(end, Priority::kArrival, kCollectiveDone, r);
}

void Interpreter::Issue(int r) {
  RankState& s = st_[r];
  RankStats& rs = res_.ranks[r];
  const auto& ins = p_.ranks[r].instrs;
  const Nanoseconds now = q_.now();
  while (s.pc < ins.size()) {
    const Instr& in = ins[s.pc];
    const int cc = r * p_.vp + in.chunk;
    switch (in.op) {
      case Op::kForward: {
        Nanoseconds dur = fwd_ns_[cc];
        if (in.paired && s.pc + 1 < ins.size()) {
          // The combined step (the lowering puts its backward next): CostTable::PairSaving,
          // split over the two in proportion to their times.
          const Instr& b = ins[s.pc + 1];
          const size_t bc = size_t(r) * p_.vp + b.chunk;
          const double backward = double(bwd_ns_[bc] + (b.recompute ? rc_ns_[bc] : 0));
          const Nanoseconds saving = ToNanoseconds(c_.PairSaving(c_.chunks[cc], c_.chunks[bc]));
          const Nanoseconds mine =
              dur + backward > 0 ? Nanoseconds(double(saving) * dur / (dur + backward)) : 0;
          dur -= mine;
          s.pair_discount = saving - mine;
        }
        const Nanoseconds end = now + dur;
        if (!s.started) rs.start_ns = now, s.started = true;
        s.live_bytes += c_.chunks[cc].stash_bytes;
        ++s.live;
        rs.peak_stashed = std::max(rs.peak_stashed, s.live);
        Counter(r, now, s.live_bytes);
        rs.compute_ns += end - now;
        Record(r, Stream::kCompute, in, now, end);
        ++s.pc;
        Prefetch(ins, s.pc);
        q_.Schedule(end, Priority::kCompute, kComputeDone, r);
        return;
      }
      case Op::kBackward:
      case Op::kBackwardInput:
      case Op::kBackwardWeight: {
        // A split backward: BI runs the backward less its weight-gradient GEMMs (and the
        // recomputation), W those GEMMs; the stash is freed by the whole backward or by W, which
        // needs the layer inputs, and the chunk's gradients are final after its last one.
        const Nanoseconds work = in.op == Op::kBackward        ? bwd_ns_[cc]
                                 : in.op == Op::kBackwardInput ? bwd_ns_[cc] - wgt_ns_[cc]
                                                               : wgt_ns_[cc];
        const Nanoseconds dur = work + (in.recompute ? rc_ns_[cc] : 0) - s.pair_discount;
        s.pair_discount = 0;
        const Nanoseconds end = now + dur;
        rs.compute_ns += dur;
        rs.flush_ns = std::max(rs.flush_ns, end);
        Record(r, Stream::kCompute, in, now, end);
        const bool frees = in.op != Op::kBackwardInput;
        if (frees) {
          s.live_bytes -= c_.chunks[cc].stash_bytes;
          --s.live;
          Counter(r, end, s.live_bytes);
        }
        if (frees && overlap_reduce_ && --s.backwards_left[in.chunk] == 0) {
          // The chunk's gradients are final as its last backward progresses: its share of the
          // reduction goes out in buckets, serialized on the collective stream.
          coll_.EnqueueChunkReduction(q_, net_, c_, r, p_.vp, now, dur);
        }
        ++s.pc;
        Prefetch(ins, s.pc);
        q_.Schedule(end, Priority::kCompute, kComputeDone, r);
        return;
      }
      case Op::kSendAct:
      case Op::kSendGrad:
        SendMessage(r, in, s.pc);
        ++s.pc;
        continue;
      case Op::kRecvAct:
      case Op::kRecvGrad: {
        Message& m = msg_[Key(r, in)];
        if (m.arrive_ns < 0) {
          m.waiter = r;
          s.wait_since = now;
          return;
        }
        const Nanoseconds waited = m.waiter == r ? now - s.wait_since : 0;
        rs.recv_wait_ns += waited;
        m.waiter = -1;
        rs.p2p_ns += m.arrive_ns - m.sent_ns;
        if (o_.record_timeline && m.src >= 0) {
          Record(r, Stream::kRecv, in, m.sent_ns, m.arrive_ns);
          res_.timeline.events.back().wait_ns = waited;
          Instr send = p_.ranks[m.src].instrs[m.send_instr];
          res_.timeline.events.push_back(
              TimelineEvent{m.src, Stream::kSend, send, m.sent_ns, m.arrive_ns});
        }
        ++s.pc;
        continue;
      }
      case Op::kReduceGrads: {
        // Overlapped: wait for the buckets still queued or in flight; else run the reduction now.
        // The weights' all-gather unless it is overlapped with the next iteration (the optimizer
        // step pays what shows of it). Then the embedding all-reduce.
        if (!overlap_reduce_ && s.sends_in_flight > 0) {
          s.reduce_after_sends = true;  // the last arrival issues this rank again
          return;
        }
        if (!overlap_reduce_) coll_.EnqueueReduction(q_, net_, c_, r, 1.0, now);
        if (!c_.overlap_param_gather) coll_.EnqueueGather(q_, net_, c_, r, now);
        s.reduce_waiting = true;
        s.reduce_start = now;
        if (coll_.Idle(r)) FinishReduce(r);
        return;
      }
      case Op::kOptimizerStep: {
        // An overlapped all-gather of the updated weights ends behind the next iteration's first
        // forward; what it does not hide is paid here, once per iteration.
        const Nanoseconds exposed = c_.overlap_param_gather ? ExposedGatherNs(r) : 0;
        const Nanoseconds hidden = c_.overlap_param_gather ? GatherNs(r) - exposed : 0;
        const Nanoseconds end = now + At(c_.optimizer, r) + exposed + SlowdownNs(hidden);
        rs.optimizer_ns += end - now;
        Record(r, Stream::kCompute, in, now, end);
        res_.iteration_ns = std::max(res_.iteration_ns, end);
        ++s.pc;
        q_.Schedule(end, Priority::kCompute, kComputeDone, r);
        return;
      }
    }
  }
}

Result<SimResult> Interpreter::Run() {
  const int pp = p_.pp, vp = p_.vp;
  if (c_.pp != pp || c_.vp != vp) {
    return Status::Invalid("simulate: cost table is for pp=" + std::to_string(c_.pp) +
                           " vp=" + std::to_string(c_.vp) +
                           ", program for pp=" + std::to_string(pp) + " vp=" + std::to_string(vp));
  }
  if (VShaped(p_.kind) && vp != 2) {
    return Status::Invalid("simulate: a " + std::string(ScheduleName(p_.kind)) +
                           " program places 2 chunks per rank in a V, got vp = " +
                           std::to_string(vp) + "; validate the program");
  }
  if (static_cast<int>(c_.chunks.size()) != pp * vp) {
    return Status::Invalid("simulate: cost table has " + std::to_string(c_.chunks.size()) +
                           " chunk costs, expected pp * vp = " + std::to_string(pp * vp));
  }
  if (static_cast<int>(p_.ranks.size()) != pp)
    return Status::Invalid("simulate: program has a rank list per pp rank missing");
  const int n = pp * vp;
  v_stages_ = n;
  overlap_reduce_ = o_.overlap_dp_allreduce || c_.overlap_grad_reduce;
  // Every time enters the integer clock through a checked conversion: a non-finite or huge cost
  // (a profile's 1e-300 TFLOP/s, a 2^62-token sequence) is an error naming the figure, not an
  // overflowed event time. The bound keeps any sum of one figure per instruction inside int64.
  int64_t instrs = 0;
  for (const auto& rank : p_.ranks) instrs += static_cast<int64_t>(rank.instrs.size());
  const double max_ns = double(int64_t(1) << 62) / double(instrs + 2 * n + 8);
  auto to_ns = [&](Seconds t, const std::string& what) -> Result<Nanoseconds> {
    if (!(t >= 0) || !(t * 1e9 <= max_ns)) {
      char buf[160];
      std::snprintf(buf, sizeof buf, " is %g s, outside the simulator's range 0 .. %g s", t,
                    max_ns * 1e-9);
      return Status::Invalid("simulate: " + what + buf +
                             "; check the profile's throughputs (TFLOP/s, GB/s) and the model's "
                             "sizes");
    }
    return ToNanoseconds(t);
  };
  fwd_ns_.resize(n);
  bwd_ns_.resize(n);
  wgt_ns_.resize(n);
  rc_ns_.resize(n);
  for (int i = 0; i < n; ++i) {
    const std::string chunk = "chunk " + std::to_string(i);
    PTDP_ASSIGN_OR_RETURN(fwd_ns_[i], to_ns(c_.chunks[i].forward.Total(), chunk + " forward time"));
    PTDP_ASSIGN_OR_RETURN(bwd_ns_[i],
                          to_ns(c_.chunks[i].backward.Total(), chunk + " backward time"));
    PTDP_ASSIGN_OR_RETURN(wgt_ns_[i],
                          to_ns(c_.chunks[i].weight_grad.Total(), chunk + " weight-gradient time"));
    if (wgt_ns_[i] > bwd_ns_[i]) {
      return Status::Invalid("simulate: " + chunk +
                             " weight-gradient time is more than its whole backward time");
    }
    PTDP_ASSIGN_OR_RETURN(rc_ns_[i],
                          to_ns(c_.chunks[i].recompute.Total(), chunk + " recompute time"));
  }
  for (size_t i = 0; i < c_.p2p_link.size(); ++i) {
    PTDP_ASSIGN_OR_RETURN(
        const Nanoseconds lat,
        to_ns(c_.p2p_link[i].latency, "pipeline link " + std::to_string(i) + " latency"));
    latency_ns_.push_back(lat);
  }
  PTDP_ASSIGN_OR_RETURN(gather_ns_, to_ns(c_.p2p_allgather, "pipeline all-gather time"));
  // At() converts these per rank as the run goes; check them here, once.
  for (const auto& [v, what] : {std::pair{&c_.dp_allreduce, "data-parallel all-reduce time"},
                                std::pair{&c_.dp_param_gather, "parameter all-gather time"},
                                std::pair{&c_.embedding_allreduce, "embedding all-reduce time"},
                                std::pair{&c_.optimizer, "optimizer time"}}) {
    for (size_t r = 0; r < v->size(); ++r) {
      PTDP_RETURN_IF_ERROR(
          to_ns((*v)[r], std::string(what) + " of rank " + std::to_string(r)).status());
    }
  }
  if (!c_.dp_collectives.empty() && static_cast<int>(c_.dp_collectives.size()) != pp) {
    return Status::Invalid("simulate: cost table has data-parallel collectives for " +
                           std::to_string(c_.dp_collectives.size()) +
                           " ranks, expected pp = " + std::to_string(pp));
  }
  for (size_t r = 0; r < c_.dp_collectives.size(); ++r) {
    for (const costmodel::CollectiveCost& cc : c_.dp_collectives[r]) {
      const std::string what = "data-parallel collective of rank " + std::to_string(r);
      if (cc.nic_bytes > 0 && !(cc.nic_Bps > 0))
        return Status::Invalid("simulate: " + what + " has NIC bytes and no NIC bandwidth");
      for (Seconds t : {cc.latency, cc.intra, cc.NicTime()})
        PTDP_RETURN_IF_ERROR(to_ns(t, what + " time").status());
    }
  }
  for (int r = 0; r < pp; ++r) {
    const auto& ins = p_.ranks[r].instrs;
    for (size_t i = 0; i < ins.size(); ++i) {
      const Instr& in = ins[i];
      // Cheap bounds, so that a program that skipped Validate() fails cleanly here instead of
      // indexing out of range; ordering and matching are Validate()'s (a stuck rank is reported
      // after the run).
      const bool batch_op = in.op == Op::kReduceGrads || in.op == Op::kOptimizerStep;
      const bool message = in.op == Op::kSendAct || in.op == Op::kSendGrad ||
                           in.op == Op::kRecvAct || in.op == Op::kRecvGrad;
      if (!batch_op && (in.microbatch < 0 || in.microbatch >= p_.microbatches || in.chunk < 0 ||
                        in.chunk >= vp || (message && (in.peer < 0 || in.peer >= pp)))) {
        return Status::Invalid("simulate: rank " + std::to_string(r) + ", instruction " +
                               std::to_string(i) + " (" + InstrToText(in, vp > 1) +
                               "): microbatch, chunk or peer out of range; validate the program");
      }
      if (message) {
        const int64_t vs = StageOfChunk(p_.kind, pp, r, in.chunk);
        const bool up = in.op == Op::kSendAct || in.op == Op::kRecvGrad;
        if ((up && vs + 1 >= n) || (!up && vs == 0)) {
          return Status::Invalid("simulate: rank " + std::to_string(r) + ", instruction " +
                                 std::to_string(i) + " (" + InstrToText(in, vp > 1) +
                                 "): no neighbouring virtual stage; validate the program");
        }
      }
      if ((in.op == Op::kSendAct || in.op == Op::kSendGrad) && in.bytes > 0) {
        const int link = LinkOf(r, in);
        if (link < 0 || link >= static_cast<int>(c_.p2p_link.size()) ||
            !(c_.p2p_link[link].bandwidth_Bps > 0)) {
          return Status::Invalid("simulate: no bandwidth for the pipeline link from rank " +
                                 std::to_string(std::min(r, in.peer)) + " (cost table p2p_link[" +
                                 std::to_string(link) + "])");
        }
        const double bw = c_.p2p_link[link].bandwidth_Bps;
        if (bw != std::numeric_limits<double>::infinity()) {
          PTDP_RETURN_IF_ERROR(
              to_ns(double(in.bytes) / bw, "pipeline message time on link " + std::to_string(link))
                  .status());
        }
      }
    }
  }
  res_.ranks.assign(pp, RankStats());
  st_.assign(pp, RankState());
  for (int r = 0; r < pp; ++r) {
    st_[r].backwards_left.assign(vp, p_.microbatches);
  }
  msg_.assign(static_cast<size_t>(2 * p_.microbatches * pp * vp), Message());
  q_.Reserve(static_cast<size_t>(4 * pp + 64));
  if (o_.record_timeline) {
    res_.timeline.source = "simulator";
    res_.timeline.pp = pp;
    res_.timeline.vp = vp;
    res_.timeline.microbatches = p_.microbatches;
    res_.timeline.events.reserve(static_cast<size_t>(InstructionCount(p_)) * 2);
  }

  for (int r = 0; r < pp; ++r) Issue(r);
  while (!q_.Empty()) {
    const Event e = q_.Pop();
    switch (e.kind) {
      case kComputeDone:
      case kCollectiveDone:
        Issue(static_cast<int>(e.a));
        break;
      case kLatencyDone:
        StartTransfer(e.a);
        break;
      case kFlowDone:
        if (net_.OnFlowEvent(q_, e.a, e.b)) {
          const int64_t tag = net_.Tag(static_cast<int>(e.a));
          if (tag >= 0) {
            q_.Schedule(q_.now() + gather_ns_, Priority::kArrival, kArrive, tag);
          } else {
            const int r = coll_.OnFlowDone(q_, net_, tag);
            if (st_[r].reduce_waiting && coll_.Idle(r)) FinishReduce(r);
          }
        }
        break;
      case kCollWake:
      case kCollLatency:
      case kCollIntra: {
        const int r = coll_.OnEvent(q_, net_, e);
        if (st_[r].reduce_waiting && coll_.Idle(r)) FinishReduce(r);
        break;
      }
      case kArrive: {
        Message& m = msg_[e.a];
        m.arrive_ns = q_.now();
        if (m.waiter >= 0) Issue(m.waiter);
        RankState& sender = st_[m.src];
        if (--sender.sends_in_flight == 0 && sender.reduce_after_sends) {
          sender.reduce_after_sends = false;
          Issue(m.src);
        }
        break;
      }
    }
  }
  for (int r = 0; r < pp; ++r) {
    if (st_[r].pc < p_.ranks[r].instrs.size()) {
      const Instr& in = p_.ranks[r].instrs[st_[r].pc];
      return Status::Invalid("simulate: rank " + std::to_string(r) +
                             " blocked forever at instruction " + std::to_string(st_[r].pc) + " (" +
                             InstrToText(in, vp > 1) + "); validate the program first");
    }
  }
  Nanoseconds max_compute = 0;
  for (const RankStats& rs : res_.ranks) {
    res_.pipeline_ns = std::max(res_.pipeline_ns, rs.flush_ns);
    max_compute = std::max(max_compute, rs.compute_ns);
  }
  for (RankStats& rs : res_.ranks) {
    rs.idle_ns = res_.pipeline_ns - rs.compute_ns;
    rs.span_idle_ns = rs.flush_ns - rs.start_ns - rs.compute_ns;
    rs.bubble_fraction = rs.compute_ns > 0 ? double(rs.idle_ns) / double(rs.compute_ns) : 0;
  }
  const double idle = double(res_.pipeline_ns - max_compute);
  res_.bubble_fraction = max_compute > 0 ? idle / double(max_compute) : 0;
  res_.bubble_fraction_of_total = res_.pipeline_ns > 0 ? idle / double(res_.pipeline_ns) : 0;
  res_.iteration_ns = std::max(res_.iteration_ns, res_.pipeline_ns);
  res_.events = q_.processed();
  return std::move(res_);
}

}  // namespace

Result<SimResult> Simulate(const Program& program, const costmodel::CostTable& costs,
                           const SimOptions& options) {
  Interpreter it(program, costs, options);
  return it.Run();
}

costmodel::CostTable UniformCosts(int pp, int vp, Seconds forward_s, Seconds backward_s,
                                  Bytes stash_bytes, Seconds weight_grad_s) {
  costmodel::CostTable c;
  c.pp = pp;
  c.vp = vp;
  c.chunks.resize(static_cast<size_t>(pp) * vp);
  for (auto& ch : c.chunks) {
    ch.forward.gemm = forward_s;
    ch.backward.gemm = backward_s;
    ch.weight_grad.gemm = weight_grad_s;
    ch.stash_bytes = stash_bytes;
  }
  c.p2p_link.assign(pp, costmodel::LinkCost{0, std::numeric_limits<double>::infinity(), false});
  c.dp_allreduce.assign(pp, 0);
  c.embedding_allreduce.assign(pp, 0);
  c.optimizer.assign(pp, 0);
  return c;
}

}  // namespace ptdp::sim
