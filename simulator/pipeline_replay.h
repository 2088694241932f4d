// The planner's fast exact replay: what sim::SimulatedPipelineTime returns, to the nanosecond,
// without the event queue, so that `ptdp plan` can replay every feasible layout.
//
// Why it is exact: until the flush, the Interpreter (simulator.cc) is a dependency graph. A rank
// runs its list in order; a compute instruction ends a fixed time after it starts; a send is
// non-blocking; a receive resumes the rank at max(now, arrival). The only coupling that is not a
// max-plus dependency is the network's port sharing (network.h), which re-rates a flow while
// another flow holds one of its ports. So the replay walks each rank's list as far as its
// receives allow (a work list, no clock), prices each flow as if it were alone on its two ports,
// and then checks that it was: every flow's [start, end] against the other flows on the sender's
// egress and the receiver's ingress (touching counts as sharing). The ports where two flows did
// share become suspect, and the walk runs again with the flows that touch a suspect port on the
// simulator's own Network (an EventQueue of their starts and ends only) and the others alone, then
// checks the ports not suspect again (ReplayShared). An overlapped gradient reduction whose buckets
// cross the NICs runs as in the Interpreter: the ranks' collective streams (collective_stream.h,
// queued by the same functions) on that Network, the pipeline's flows alone until one touches
// another flow on its port, from which time on that port's flows join the network model
// (ReplayWithBuckets, docs/simulator.md). When a cost is outside the range the
// Interpreter accepts, or the walk gets stuck, it hands the layout to Simulate itself, whose answer
// (or error) it returns. tests/simulator/pipeline_replay_test.cc holds both to the same numbers
// over a grid of layouts, the contended ones included.
//
// Why it is fast: no event per instruction; reduce-grads and the optimizer step (after the flush,
// not in the pipeline time) are skipped; the lowered schedule of a (schedule, pp, vp, microbatches,
// recompute, combined 1F1B) shape is built once and reused by the layouts that share it (they
// differ in costs and message bytes only), as are its suspect ports, and the buffers are reused
// from one replay to the next.
//
// Thread-safety: none; one PipelineReplayer per thread (MakeReplayRefiner gives each caller its
// own).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/hardware.h"
#include "core/model.h"
#include "core/parallel.h"
#include "core/status.h"
#include "costmodel/cost_table.h"
#include "costmodel/estimate.h"

namespace ptdp::sim {
namespace replay_internal {
struct Interval;
}  // namespace replay_internal

class PipelineReplayer {
 public:
  PipelineReplayer();
  ~PipelineReplayer();
  PipelineReplayer(const PipelineReplayer&) = delete;
  PipelineReplayer& operator=(const PipelineReplayer&) = delete;

  // SimulatedPipelineTime(m, cluster, c, t), bit for bit (errors included).
  Result<costmodel::PipelineTime> Time(const ModelSpec& m, const ClusterSpec& cluster,
                                       const ParallelConfig& c, const costmodel::CostTable& t);

  int64_t replays() const { return replays_; }
  // Replays run with the network model on some ports (flows shared a port in them, or in an
  // earlier layout of their shape, or an overlapped reduction's buckets cross the NICs).
  int64_t shared() const { return shared_; }
  // Walks of shared-port replays, each with the network model on the ports suspect so far.
  int64_t shared_rounds() const { return rounds_; }
  // Replays handed to Simulate: a cost out of range, or a stuck walk.
  int64_t fallbacks() const { return fallbacks_; }
  // Events the shared-port walks processed (flow starts and ends, the collective streams').
  int64_t events() const { return events_; }
  // New shapes that started from another shape's tail cut (pipeline_replay_state.h, TailCut).
  int64_t tail_cut_starts() const { return tail_cut_starts_; }
  // Flows that joined the network model during a walk because they end after a collective their
  // sender or receiver had queued (MeetsQueuedBuckets), not from an earlier check.
  int64_t bucket_joins() const { return bucket_joins_; }
  // Ports whose flows all ran on the network model from a layout's first walk, because two
  // pipeline flows touched on them in an earlier layout of the shape (Shape::pipe_shared).
  int64_t pipe_shared_starts() const { return pipe_shared_starts_; }
  // Jobs of the overlapped reduction's collective streams run without events, their flows alone
  // on the NICs (CollectiveStreams::RunAloneExcept; the check holds them to it).
  int64_t buckets_alone() const;

 private:
  struct Shape;
  struct Scratch;
  bool Convert(const costmodel::CostTable& t, Bytes bytes);
  void Reset();
  bool Replay(const costmodel::CostTable& t, Bytes bytes, costmodel::PipelineTime* out);
  bool ReplayShared(const costmodel::CostTable& t, Bytes bytes, Nanoseconds gather,
                    costmodel::PipelineTime* out);
  bool ReplayWithBuckets(const costmodel::CostTable& t, Bytes bytes, Nanoseconds gather,
                         costmodel::PipelineTime* out);
  bool ReplayRound(const costmodel::CostTable& t, Bytes bytes, Nanoseconds gather);
  bool MarkShared();
  bool MarkTouching();
  bool JoinPair(int port, const replay_internal::Interval& before,
                const replay_internal::Interval& f);
  void NoteNeed(int r, int32_t job);
  void StartFromTailCut();
  void KeepTailCut();
  bool FromSlot(bool grad, int r, int peer, int32_t slot) const;
  bool MeetsQueuedBuckets(int r, int peer, Nanoseconds end);
  void WalkReady(Nanoseconds gather);
  void Walk(int r, Nanoseconds gather);
  void PricePairs(const costmodel::CostTable& t);
  void Deliver(int64_t key, Nanoseconds arrival);
  bool MeetsBuckets(int r, int peer, Nanoseconds start, Nanoseconds end);
  static bool MeetsMessages(const void* self, int r, Nanoseconds start, Nanoseconds end);
  bool Outcome(costmodel::PipelineTime* out) const;
  std::unique_ptr<Shape> shape_;  // the last shape's lowered, compiled schedule
  std::unique_ptr<Scratch> scratch_;
  int64_t replays_ = 0, shared_ = 0, rounds_ = 0, fallbacks_ = 0, events_ = 0;
  int64_t tail_cut_starts_ = 0, bucket_joins_ = 0, pipe_shared_starts_ = 0;
};

// A planner::Refiner factory (planner/search.h SearchOptions::make_refiner): each call returns a
// refiner that owns its own PipelineReplayer, for one thread.
std::function<Result<costmodel::PipelineTime>(const ModelSpec&, const ClusterSpec&,
                                              const ParallelConfig&, const costmodel::CostTable&)>
MakeReplayRefiner();

}  // namespace ptdp::sim
