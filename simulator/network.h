// Fluid model of transfers that share ports. Each transfer (a flow) crosses two ports: the egress
// of its source and the ingress of its destination (a GPU's NVLink ports, or its node's NICs as
// one pipeline stream sees them). A flow's rate is its link bandwidth divided by the larger of the
// two ports' active flow counts, so simultaneous transfers through one port slow each other down;
// every start or finish re-rates the flows on the ports it touches and reschedules their ends.
// Latency is not modelled here: the owner delays StartFlow by the link's latency.
//
// Thread-safety: none.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "simulator/engine.h"

namespace ptdp::sim {

// Nanoseconds a flow with `remaining` bytes takes at `rate` bytes per ns: rounded up to whole
// nanoseconds, a residue below a millionth of a byte counting as done. Network's own rule, shared
// with the replay that prices lone flows (pipeline_replay.h).
inline double FlowNanoseconds(double remaining, double rate) {
  return remaining <= 1e-6 ? 0.0 : std::ceil(remaining / rate - 1e-9);
}

class Network {
 public:
  // `done_kind` is the event kind this network schedules for its flows' ends (a = flow id,
  // b = version); the owner hands such events back through OnFlowEvent().
  Network(int num_ports, uint32_t done_kind);
  // As constructed with `num_ports`, keeping the buffers' capacity (a replay reuses its network).
  void Reset(int num_ports);

  // Starts a flow of `bytes` at q.now() from port `egress` to port `ingress` on a link of
  // `bandwidth_Bps`; `tag` is the owner's (returned by Tag()). Returns the flow id.
  // REQUIRES: bytes > 0, bandwidth_Bps > 0.
  int StartFlow(EventQueue& q, int egress, int ingress, double bandwidth_Bps, double bytes,
                int64_t tag);
  // Handles a `done_kind` event: true when the flow has finished now (then it is removed and its
  // ports' other flows re-rated); false for a stale event of a flow that was re-rated since.
  bool OnFlowEvent(EventQueue& q, int64_t flow, int32_t version);
  int64_t Tag(int flow) const { return flows_[flow].tag; }
  Nanoseconds StartNs(int flow) const { return flows_[flow].start_ns; }
  int ActiveFlows(int port) const { return static_cast<int>(ports_[port].size()); }

 private:
  struct Flow {
    int egress = 0, ingress = 0;
    double bandwidth_Bpns = 0;  // bytes per nanosecond of the link alone
    double remaining = 0;       // bytes
    double rate = 0;            // bytes per nanosecond now
    Nanoseconds last_ns = 0;    // when `remaining` was last brought up to date
    Nanoseconds start_ns = 0;
    uint32_t version = 0;  // bumped at every re-rate; older end events are stale
    int64_t tag = 0;
    bool active = false;
  };
  void Rerate(EventQueue& q, int port);
  void Update(EventQueue& q, int id);

  std::vector<Flow> flows_;
  std::vector<int> free_;                // reusable flow ids
  std::vector<std::vector<int>> ports_;  // active flow ids per port
  uint32_t done_kind_;
};

// Ring all-reduce of `bytes` over n ranks whose neighbours are joined by links of
// `bandwidth_Bps` and `latency_ns`, simulated step by step on the engine and the network above:
// 2(n-1) steps (reduce-scatter, all-gather), each rank sending bytes/n to the next and starting its
// next step when its previous chunk arrives. Returns the simulated time; the closed form is
// 2(n-1)/n * S/B + 2(n-1) * alpha. REQUIRES: n >= 1.
Nanoseconds SimulateRingAllReduce(int n, double bytes, double bandwidth_Bps,
                                  Nanoseconds latency_ns);

}  // namespace ptdp::sim
