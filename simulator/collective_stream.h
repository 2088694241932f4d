// Each pipeline rank's collective stream: the data-parallel collectives of its gradients, run in
// order, one at a time. A collective (costmodel::CollectiveCost) waits its latency, then runs its
// intra-node phases (a fixed time: NVLink is not shared with the NICs) and its inter-node phase
// at once: a flow of its NIC bytes through the rank's NIC ports on the Network, where it shares
// the NIC with the pipeline messages that cross it. It ends when both have (the phases are
// pipelined, costmodel/collectives.h). With nothing else on the NIC it takes
// CollectiveCost::Time(), to the rounding of each part to whole nanoseconds.
//
// Thread-safety: none.
#pragma once

#include <cstdint>
#include <vector>

#include "costmodel/cost_table.h"
#include "simulator/engine.h"
#include "simulator/network.h"

namespace ptdp::sim {

// Per-rank times of a cost table in ns (0 past the end of `v`).
inline Nanoseconds RankNs(const std::vector<Seconds>& v, int r) {
  return r < static_cast<int>(v.size()) ? ToNanoseconds(v[size_t(r)]) : 0;
}
// The data-parallel time of rank r split into the distributed optimizer's all-gather of the
// weights and the gradient reduction (the rest).
inline Nanoseconds GatherNs(const costmodel::CostTable& c, int r) {
  return RankNs(c.dp_param_gather, r);
}
inline Nanoseconds ReduceNs(const costmodel::CostTable& c, int r) {
  return RankNs(c.dp_allreduce, r) - GatherNs(c, r);
}

class CollectiveStreams {
 public:
  // Event kinds this class schedules (a = rank) and hands back through OnEvent(); flows it starts
  // on `net` carry the tag FlowTag(rank) (negative, apart from message keys).
  struct Kinds {
    uint32_t wake;     // a queued collective may be ready
    uint32_t latency;  // the running collective's latency has passed
    uint32_t intra;    // the running collective's intra-node phases have ended
  };
  // Rank r's NIC ports on `net` are nic_egress + r and nic_ingress + r.
  CollectiveStreams(int ranks, int nic_egress, int nic_ingress, Kinds kinds);
  // As constructed with `ranks` and these ports, keeping the queues' capacity (a replay reuses
  // its streams).
  void Reset(int ranks, int nic_egress, int nic_ingress);

  static int64_t FlowTag(int rank) { return -int64_t(rank) - 1; }
  static int RankOfTag(int64_t tag) { return static_cast<int>(-tag - 1); }

  // Queues `fraction` of each of `list` (in order, latency included), ready at `ready`.
  void Enqueue(EventQueue& q, Network& net, int r,
               const std::vector<costmodel::CollectiveCost>& list, double fraction,
               Nanoseconds ready);
  // Queues a plain delay of `ns` (a table without collective costs), ready at `ready`.
  void EnqueueDelay(EventQueue& q, Network& net, int r, Nanoseconds ns, Nanoseconds ready);
  // Queues `fraction` of rank r's gradient reduction (the all-reduce, or the distributed
  // optimizer's reduce-scatter: c.dp_collectives[r].front(); a table without collective costs, its
  // reduction time as a delay), ready at `ready`.
  void EnqueueReduction(EventQueue& q, Network& net, const costmodel::CostTable& c, int r,
                        double fraction, Nanoseconds ready);
  // Queues the distributed optimizer's all-gather of rank r's weights, ready at `ready`.
  void EnqueueGather(EventQueue& q, Network& net, const costmodel::CostTable& c, int r,
                     Nanoseconds ready);
  // The overlapped reduction's share of one of the rank's `vp` chunks, as the chunk's last
  // backward (from `start`, `dur` ns) makes its gradients final: c.dp_buckets buckets, each ready
  // as the backward gets through its part. The simulator and the planner's replay
  // (pipeline_replay.h) both queue them here.
  void EnqueueChunkReduction(EventQueue& q, Network& net, const costmodel::CostTable& c, int r,
                             int vp, Nanoseconds start, Nanoseconds dur);
  // One of Kinds' events, or the end of a flow tagged FlowTag(r). Returns the rank.
  int OnEvent(EventQueue& q, Network& net, const Event& e);
  int OnFlowDone(EventQueue& q, Network& net, int64_t tag);
  // Nothing running or queued on rank r's stream.
  bool Idle(int r) const { return !st_[r].running && st_[r].next == st_[r].jobs.size(); }

  // The planner's replay (pipeline_replay.h): rank r's jobs run without events, their flows priced
  // as if alone on the rank's NIC ports (FlowNanoseconds, the Network's rule for a lone flow),
  // except the jobs whose index in the stream is in [net_first, net_last] or whose flow starts at
  // or after net_from: those run on the Network as above. A job starts at the later of its
  // ready time and the end of the job before, in either mode, so this is exact for every job whose
  // flow met no other flow; the replay checks that from Flows(r). Reset() turns it off (the
  // Interpreter never turns it on).
  // `veto(ctx, r, start, end)`, when set, runs a job on the Network too when it returns true for
  // the job's flow priced alone (the replay: the flow would meet a pipeline flow it knows of).
  using Veto = bool (*)(const void* ctx, int r, Nanoseconds start, Nanoseconds end);
  void RunAloneExcept(int r, int32_t net_first, int32_t net_last, Nanoseconds net_from,
                      Veto veto = nullptr, const void* veto_ctx = nullptr);
  // In that mode, true when a flow on rank r's NIC ports over [start, end] would meet one of the
  // stream's jobs run alone. The earliest such job and the ones after it are then run again, the
  // job on the Network, when it has not started by q.now() (they changed nothing outside the
  // stream): the replay calls this as it prices a pipeline message.
  bool Rejoin(EventQueue& q, Network& net, int r, Nanoseconds start, Nanoseconds end);
  // False when no flow of rank r's stream ends at or after `start` (Rejoin would be false): the
  // flows end in order, and a running one (end -1) is the last.
  bool MayMeet(int r, Nanoseconds start) const {
    const std::vector<FlowSpan>& f = st_[r].flows;
    return !f.empty() && (f.back().end < 0 || f.back().end >= start);
  }
  // In that mode, the NIC flow of each of rank r's jobs so far, in the stream's order (an
  // unfinished flow on the Network has end -1).
  struct FlowSpan {
    Nanoseconds start = 0, end = 0;
    int32_t job = 0;  // its index in the stream
    bool network = false;
  };
  const std::vector<FlowSpan>& Flows(int r) const { return st_[r].flows; }
  int64_t jobs_alone() const { return jobs_alone_; }

 private:
  struct Job {
    Nanoseconds ready = 0, latency = 0, intra = 0;
    double nic_bytes = 0, nic_Bps = 0;
    Nanoseconds done = 0;  // when it ended (alone mode)
  };
  struct Stream {
    std::vector<Job> jobs;  // queued from `next` on; the ones before have run
    size_t next = 0;
    // The time of a wake this stream has pending (-1: none), so that enqueueing a chunk's buckets
    // one by one schedules one wake for the job in front, not one per bucket (extra wakes did
    // nothing but fill the queue).
    Nanoseconds wake_at = -1;
    bool running = false;
    int parts_left = 0;  // of the running job: its intra-node time and its flow
    Job current;
    // RunAloneExcept's mode: off for the Interpreter.
    bool alone = false;
    int32_t net_first = 0, net_last = -1;
    Nanoseconds net_from = 0;
    Veto veto = nullptr;
    const void* veto_ctx = nullptr;
    Nanoseconds free_at = 0;  // when the last job (alone or not) ended
    std::vector<FlowSpan> flows;
  };
  // Queues `fraction` of `c` without starting it (Enqueue's step per collective).
  void Push(int r, const costmodel::CollectiveCost& c, double fraction, Nanoseconds ready);
  void Pump(EventQueue& q, Network& net, int r);
  void PartDone(EventQueue& q, Network& net, int r);
  // In alone mode: runs the next job without events when RunAloneExcept allows; false when the
  // job is to run on the Network (its ready time moved to when the stream is free).
  bool RunNextAlone(int r);

  std::vector<Stream> st_;
  int nic_egress_, nic_ingress_;
  Kinds kinds_;
  int64_t jobs_alone_ = 0;
};

}  // namespace ptdp::sim
