// The fast replay's compiled shape and per-replay state (simulator/pipeline_replay.h), shared by
// its source files. Internal to the simulator.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "core/program.h"
#include "core/units.h"
#include "costmodel/cost_table.h"
#include "simulator/collective_stream.h"
#include "simulator/engine.h"
#include "simulator/network.h"
#include "simulator/pipeline_replay.h"

namespace ptdp::sim {
namespace replay_internal {

// A lowered instruction as the walk needs it. Compute: `cc` = rank * vp + chunk. Messages: `key`
// (schedule::MessageKey); a send's `cc` is the link it crosses (Interpreter::LinkOf).
enum class StepOp : uint8_t { kForward, kBackward, kBackwardInput, kBackwardWeight, kSend, kRecv };
// Its flags share one byte: a Step stays 16 bytes (the walk reads millions of them).
struct Step {
  int32_t key = 0;
  int32_t cc = 0;
  int32_t peer = 0;  // a send's receiving rank
  StepOp op = StepOp::kForward;
  bool recompute : 1 = false;
  bool grad : 1 = false;  // a send of a gradient (the rank's second egress stream)
  // The chunk's last backward that frees a stash (whole or W): its gradients become final, and an
  // overlapped reduction queues the chunk's buckets (the Interpreter's backwards_left reaching 0).
  bool reduces : 1 = false;
  // A forward of the combined 1F1B's pair (Instr::paired): the next step is its backward (Compile
  // checks and marks it `pair_backward`), and the two share CostTable::PairSaving as the
  // Interpreter shares it (PipelineReplayer::PricePairs, once per layout).
  bool paired : 1 = false;
  bool pair_backward : 1 = false;
  // Any of the three above that change a compute step's time: a backward's recomputation, a
  // pair's forward or backward (the walk's one test on its common path).
  bool adjust : 1 = false;
};
static_assert(sizeof(Step) == 16);

// ReplayShared's events: Network's flow ends (a = flow, b = version), flow starts (a = key), and
// the collective streams' (collective_stream.h, a = rank).
enum : uint32_t { kFlowDone = 0, kFlowStart = 1, kCollWake = 2, kCollLatency = 3, kCollIntra = 4 };

// One flow's time on its ports, [start, end] in ns; `network`: run on the network model; `job`:
// a bucket's index in its rank's collective stream (-1: a pipeline message).
struct Interval {
  Nanoseconds start = 0, end = 0;
  bool network = false;
  int32_t job = -1;
};

constexpr Nanoseconds kNever = std::numeric_limits<Nanoseconds>::max();

// A shape's schedule (`compute`, compute instructions only), lowered as schedule::Lower lowers it
// and compiled into Steps (pipeline_replay_compile.cc); `instructions`: the lowered Program's
// count. False when Lower would fail or a paired forward's backward is not its next step
// (`paired`: the compute Program is the combined 1F1B's, PairForA2aOverlap).
bool Compile(const Program& compute, bool recompute, bool paired,
             std::vector<std::vector<Step>>* out, int64_t* instructions);

}  // namespace replay_internal

// A lowered schedule, compiled: what every layout of one (kind, pp, vp, microbatches, recompute)
// shape replays.
struct PipelineReplayer::Shape {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int pp = 0, vp = 0;
  int64_t microbatches = 0;
  bool recompute = false;
  bool paired = false;  // ParallelConfig::moe_a2a_overlap: the combined 1F1B's order
  std::vector<std::vector<replay_internal::Step>> ranks;
  int64_t keys = 0;          // 2 * microbatches * pp * vp message keys
  int64_t instructions = 0;  // of the whole lowered Program (the Interpreter's range bound)
  // The ports on which flows of this shape's earlier layouts shared (empty: none did). Layouts of
  // one shape differ in costs only and usually share alike: ReplayShared starts from these.
  std::vector<char> suspect;
  // For a table with buckets on the NICs (ReplayWithBuckets): per port, the first slot of the
  // activation and of the gradient stream on it whose flow ran on the network model in the last
  // such layout of this shape (empty: none yet). The next one starts from them: its buckets meet
  // the same messages, near the flush.
  std::vector<int32_t> cut_act, cut_grad;
  // Per rank, for the same tables: the jobs of its collective stream, [first, last] by index,
  // whose flows met a pipeline flow in the last such layout (first > last: none; empty: no layout
  // yet, every job runs on the network model). The next layout runs them on the network model
  // and the others alone (CollectiveStreams::RunAloneExcept).
  std::vector<int32_t> net_jobs_first, net_jobs_last;
  // Per port, for the same tables: two pipeline flows on it touched in one of this shape's
  // layouts (empty: none yet). An interleaved pipeline's ingress takes the activation from the
  // rank before and the gradient from the rank after at nearly the same time, anywhere in the
  // steady state, where the tail cut does not reach: the next layouts run every flow of those
  // ports on the network model from the start, not find the sharing again after a walk.
  std::vector<char> pipe_shared;
  bool Matches(const ParallelConfig& c, bool rc) const {
    return kind == c.schedule && pp == c.pp && vp == c.vp && microbatches == c.Microbatches() &&
           recompute == rc && paired == c.moe_a2a_overlap;
  }
};

// Per-replay state, kept between replays for its capacity.
struct PipelineReplayer::Scratch {
  // Per compute StepOp * pp * vp + rank * vp + chunk: the step's time; rc per rank * vp + chunk.
  std::vector<Nanoseconds> dur, rc;
  // The combined 1F1B's (Shape::paired): per rank and step, a paired forward's and its backward's
  // times (PricePairs; the other entries unused).
  std::vector<std::vector<Nanoseconds>> pair_dur;
  std::vector<Nanoseconds> latency, flow;  // per link; flow < 0: no flow (free link)
  // Per message key: arrival time (>= 0), -1 not sent yet, -2 - r rank r waiting on it.
  std::vector<Nanoseconds> arrive;
  std::vector<size_t> pc;
  std::vector<Nanoseconds> now, compute, flush;
  // Per rank: the earliest ready time of the collectives its walk has queued so far (kNever:
  // none). A flow that ends at or after it on one of the rank's ports may meet one of them.
  std::vector<Nanoseconds> buckets_from;
  std::vector<int> ready;
  std::vector<std::vector<replay_internal::Interval>> act_flows, grad_flows;  // per sending rank
  // Set while ReplayShared runs: the flows that touch a suspect port (egress r: r, ingress r:
  // pp + r, as the Interpreter numbers them) go through the simulator's own network model.
  EventQueue* queue = nullptr;
  Network* network = nullptr;
  // What those point to, kept from one round to the next for their buffers' capacity.
  EventQueue round_queue;
  Network round_network{0, replay_internal::kFlowDone};
  CollectiveStreams round_collectives{
      0,
      0,
      0,
      {replay_internal::kCollWake, replay_internal::kCollLatency, replay_internal::kCollIntra}};
  // Set while ReplayShared runs a table whose overlapped reduction crosses the NICs: each rank's
  // collective stream, which runs its buckets as flows on the same Network.
  CollectiveStreams* collectives = nullptr;
  const costmodel::CostTable* table = nullptr;
  std::vector<char> suspect;  // per port
  // Per port: flows that start on it at or after this time run on the network model (kNever:
  // none). What a replay with collective streams narrows instead of `suspect`: the buckets share
  // the NICs near the flush only, so the flows before stay alone.
  std::vector<Nanoseconds> from;
  std::vector<int32_t> cut_act, cut_grad;  // per port, as Shape's: slots from which flows join
  // Per rank, the bucket jobs this layout runs on the network model: by index (as Shape's) and
  // those whose flow starts at or after bucket_from (what the check adds, as `from` for a port's
  // pipeline flows: a delayed bucket delays the ones after it); and the jobs whose flows met a
  // pipeline flow in the last round (need_first > need_last: none).
  std::vector<int32_t> net_jobs_first, net_jobs_last, need_first, need_last;
  std::vector<Nanoseconds> bucket_from;
  std::vector<char> pipe_shared;  // per port: the check joined two pipeline flows (as Shape's)
  // Per (kind, pp, vp): how many of each port's last flows ran on the network model in the last
  // such layout with buckets on the NICs. A new shape of the same pipeline (other microbatch
  // count or recomputation) starts from there: its buckets meet as many messages before the
  // flush, so its first walk is usually its last (a wrong start costs a walk, never exactness:
  // more flows on the network model than needed run as they would alone).
  struct TailCut {
    ScheduleKind kind = ScheduleKind::k1F1B;
    int pp = 0, vp = 0;
    std::vector<int32_t> act, grad;                      // per port
    std::vector<int32_t> net_jobs_first, net_jobs_last;  // per rank, as Shape's
    std::vector<char> pipe_shared;                       // per port, as Shape's
  };
  std::vector<TailCut> tail_cuts;
  std::vector<std::vector<replay_internal::Interval>>
      bucket_flows;                                   // per rank: its collective stream's flows
  std::vector<int32_t> sender, receiver, link, slot;  // per message key; slot: in its stream
  std::vector<char> grad;                             // per message key: in grad_flows
};

}  // namespace ptdp::sim
