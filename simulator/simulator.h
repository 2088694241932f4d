// The pipeline simulator: replays a lowered Program (schedule/) with the costs of a CostTable
// (costmodel/) on the event engine, one representative GPU per pipeline rank (the tp * dp GPUs of
// a pipeline rank run the same instruction list; the cost model has already divided their shared
// bandwidth into each link). docs/simulator.md describes the model.
//
// Execution model (the same the runtime follows, schedule/schedule.h): each rank issues its list in
// order. Forward, backward (whole or either half of a split one) and optimizer step occupy the
// rank's compute stream and the rank waits for them; a send starts its transfer and the rank moves
// on (non-blocking); a receive blocks until the message has arrived (transfer, then the receiver's
// scatter/gather all-gather); reduce-grads runs the data-parallel and embedding all-reduces on the
// collective stream and blocks. Transfers take the link's latency, then share the ports they cross
// (simulator/network.h).
//
// Thread-safety: Simulate() is a pure function of its arguments.
#pragma once

#include <cstdint>
#include <vector>

#include "core/program.h"
#include "core/status.h"
#include "core/timeline.h"
#include "costmodel/cost_table.h"

namespace ptdp::sim {

struct SimOptions {
  // Overlap the data-parallel gradient reduction with the last backwards, bucket by bucket
  // (CostTable::dp_buckets buckets per chunk, each ready as the chunk's last backward progresses),
  // also when the table's software profile does not (CostTable::overlap_grad_reduce). The
  // distributed optimizer's all-gather overlaps only where the table says so
  // (overlap_param_gather: behind the first forward, its exposed part paid after the optimizer).
  bool overlap_dp_allreduce = false;
  // Keep the Timeline (events and activation-memory counters); off for the planner's fast path.
  bool record_timeline = false;
};

struct RankStats {
  Nanoseconds compute_ns = 0;    // forward + backward (+ recompute) time
  Nanoseconds idle_ns = 0;       // compute stream idle between 0 and the pipeline flush
  Nanoseconds p2p_ns = 0;        // time this rank's receives spent in flight (transfer + gather)
  Nanoseconds recv_wait_ns = 0;  // time the rank stood blocked in receives
  Nanoseconds allreduce_ns = 0;  // reduce-grads time on the critical path (after the flush)
  Nanoseconds optimizer_ns = 0;
  Nanoseconds flush_ns = 0;  // end of this rank's last backward (or weight-gradient pass)
  Nanoseconds start_ns = 0;  // start of this rank's first compute instruction
  // Idle time of the compute stream between the rank's first compute and its flush:
  // flush_ns - start_ns - compute_ns. The zero-bubble paper's bubble (Qi et al. 2024, Table 1)
  // counts this span, since its schedules let the next iteration's first forwards start while
  // the later ranks still finish (optimizer post-validation), unlike idle_ns, which starts at 0.
  Nanoseconds span_idle_ns = 0;
  // (microbatch, chunk) pairs stashed at once, at the most. Memory in bytes is the ledger's
  // (core/ledger.h MemoryOf with the Program), not the simulator's.
  int peak_stashed = 0;
  double bubble_fraction = 0;  // idle_ns / compute_ns (the paper's definition, this rank)
};

struct SimResult {
  Nanoseconds iteration_ns = 0;  // end of the last optimizer step
  Nanoseconds pipeline_ns = 0;   // end of the last backward of any rank (the flush)
  // Bubble measured from the timeline over the busiest rank: (pipeline_ns - max compute) /
  // max compute (the paper's: idle over ideal compute, (p-1)/m for 1F1B), and the same idle
  // over pipeline_ns ((p-1)/(m+p-1) for 1F1B).
  double bubble_fraction = 0;
  double bubble_fraction_of_total = 0;
  std::vector<RankStats> ranks;
  int64_t events = 0;  // engine events processed
  Timeline timeline;   // filled when SimOptions::record_timeline
};

// REQUIRES: `program` validates (schedule::Validate); `costs` has pp, vp matching it and every
// per-rank vector sized pp. Returns kInvalidArgument when the sizes disagree or a link with
// bytes to carry has no bandwidth.
Result<SimResult> Simulate(const Program& program, const costmodel::CostTable& costs,
                           const SimOptions& options = SimOptions());

// A CostTable with the same shape and equal per-chunk costs (forward and backward times of the
// mean chunk, stash bytes kept per rank) and free communication (no p2p, gather, all-reduce):
// what `ptdp simulate --ideal` replays. The optimizer step is kept.
costmodel::CostTable IdealCosts(const costmodel::CostTable& c);

// A hand-made table for tests and `ptdp schedule`: every chunk takes forward_s / backward_s
// (the whole backward, of which weight_grad_s is the weight-gradient part that a split
// backward's W runs), stashes `stash_bytes`; communication free.
costmodel::CostTable UniformCosts(int pp, int vp, Seconds forward_s, Seconds backward_s,
                                  Bytes stash_bytes = 0, Seconds weight_grad_s = 0);

}  // namespace ptdp::sim
