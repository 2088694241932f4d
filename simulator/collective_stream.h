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
#include <deque>
#include <vector>

#include "costmodel/cost_table.h"
#include "simulator/engine.h"
#include "simulator/network.h"

namespace ptdp::sim {

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

  static int64_t FlowTag(int rank) { return -int64_t(rank) - 1; }
  static int RankOfTag(int64_t tag) { return static_cast<int>(-tag - 1); }

  // Queues `fraction` of each of `list` (in order, latency included), ready at `ready`.
  void Enqueue(EventQueue& q, Network& net, int r,
               const std::vector<costmodel::CollectiveCost>& list, double fraction,
               Nanoseconds ready);
  // Queues a plain delay of `ns` (a table without collective costs), ready at `ready`.
  void EnqueueDelay(EventQueue& q, Network& net, int r, Nanoseconds ns, Nanoseconds ready);
  // One of Kinds' events, or the end of a flow tagged FlowTag(r). Returns the rank.
  int OnEvent(EventQueue& q, Network& net, const Event& e);
  int OnFlowDone(EventQueue& q, Network& net, int64_t tag);
  // Nothing running or queued on rank r's stream.
  bool Idle(int r) const { return !st_[r].running && st_[r].jobs.empty(); }

 private:
  struct Job {
    Nanoseconds ready = 0, latency = 0, intra = 0;
    double nic_bytes = 0, nic_Bps = 0;
  };
  struct Stream {
    std::deque<Job> jobs;
    bool running = false;
    int parts_left = 0;  // of the running job: its intra-node time and its flow
    Job current;
  };
  void Pump(EventQueue& q, Network& net, int r);
  void PartDone(EventQueue& q, Network& net, int r);

  std::vector<Stream> st_;
  int nic_egress_, nic_ingress_;
  Kinds kinds_;
};

}  // namespace ptdp::sim
