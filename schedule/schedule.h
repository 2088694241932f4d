// Pipeline schedules as data: generators that emit the compute order of each pipeline rank
// (GPipe, 1F1B / PipeDream-Flush, Megatron-LM's interleaved 1F1B, the zero-bubble ZB-H1 and
// ZB-H2 with the backward split into input- and weight-gradient halves), the lowering pass that
// inserts point-to-point messages and the end-of-batch gradient reduction, and Validate(), a dry
// run that proves a Program well formed and free of deadlock. docs/ir.md states the semantics.
//
// Ordering contract of a lowered Program (what makes it deadlock-free for an executor that runs
// each rank's list in order with NON-BLOCKING sends (MPI_Isend) and BLOCKING receives (MPI_Recv)):
//   - RecvAct(mb, c) sits immediately before the Forward(mb, c) that consumes it, and
//     RecvGrad(mb, c) immediately before Backward(mb, c) (or BackwardInput(mb, c));
//   - SendAct(mb, c) sits immediately after Forward(mb, c), SendGrad(mb, c) immediately after
//     Backward(mb, c) (or BackwardInput(mb, c)); BackwardWeight sends and receives nothing;
//   - except for a paired forward (Instr::paired) and the backward after it, one step: both
//     receives sit immediately before the forward, both sends immediately after the backward;
//   - ReduceGrads then OptimizerStep end every rank's list.
// Validate() replays exactly that execution model (a send completes when posted, a receive blocks
// until its matching send has been posted) and fails if some rank can never proceed.
//
// Chunks in send/recv instructions are LOCAL to the rank that executes them. A message crosses the
// boundary between virtual stages k and k+1 (k = chunk * pp + pp_rank, or ZB-V's V: core/parallel.h
// StageOfChunk): the activation goes from the holder of k to the holder of k+1 (interleaved:
// (rank k % pp, chunk k / pp) to (rank (k+1) % pp, chunk (k+1) / pp), so chunk c on rank pp-1
// sends to chunk c+1 on rank 0); gradients go the other way. Where both stages sit on one rank
// (the turn of a V on rank pp-1) there is no message (LocalBoundary).
// MessageKey() gives a send and its matching receive the same key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/interleaved_order.h"
#include "core/model.h"
#include "core/parallel.h"
#include "core/program.h"
#include "core/status.h"

namespace ptdp::schedule {

// Which (kind, pp, m, vp) a generator accepts; the message names the field and the reason.
//   gpipe, 1f1b, zb-h1, zb-h2:  pp >= 1, m >= 1, vp == 1 (the zero-bubble closed forms hold from
//                 m >= p for ZB-H1 and m >= 2p - 1 for ZB-H2; fewer microbatches still give a
//                 valid, deadlock-free Program)
//   interleaved:  pp >= 2, vp >= 2, m >= pp; microbatches go through the chunks in groups of
//                 `microbatch_group` (0: DefaultMicrobatchGroup, core/interleaved_order.h), which
//                 must lie in [pp, m] and leave a last group that is empty or at least pp, as
//                 Megatron-Core requires of
//                 --microbatch-group-size-per-virtual-pipeline-stage; the order is then
//                 Megatron-Core's. pp = 2 takes groups of 2 only: for odd m its Program is the
//                 order for m + 1 with the extra microbatch dropped (docs/design-notes.md)
//   zb-v:         pp >= 1, vp == 2 (the V), m >= 2 pp - 1 (rank 0's warm-up, core/zbv_order.h)
//   other kinds:  microbatch_group == 0
//   every kind:   microbatches x vp x pp <= kMaxScheduleCells (the program's size)
Status CheckScheduleShape(ScheduleKind kind, int pp, int64_t microbatches, int vp,
                          int64_t microbatch_group = 0);
inline constexpr int64_t kMaxScheduleCells = int64_t(1) << 21;

// Compute order only (kForward / kBackward, or kBackwardInput / kBackwardWeight for the
// zero-bubble kinds; recompute = false), per pipeline rank.
// The interleaved kind takes its microbatch group (0: DefaultMicrobatchGroup); see
// CheckScheduleShape.
Result<Program> GenerateSchedule(ScheduleKind kind, int pp, int64_t microbatches, int vp,
                                 int64_t microbatch_group = 0);

// Megatron-Core's combined 1F1B (ParallelConfig::moe_a2a_overlap; get_pp_rank_microbatches and
// combined_1f1b.py at d98e8a64) made of a 1f1b or interleaved compute order: each rank runs one
// more warm-up forward, then every later forward paired (Instr::paired) with the backward that
// follows it, then the remaining backwards. The forwards and the backwards keep their orders.
// An error names the kind when it is neither 1f1b nor interleaved.
Status PairForA2aOverlap(Program* compute);

// Lowering: inserts SendAct/RecvAct/SendGrad/RecvGrad around the compute instructions per the
// ordering contract above (a paired forward and its backward: both receives before the pair, both
// sends after it) (bytes = message_bytes each), sets `recompute` on every kBackward and
// kBackwardInput when asked, and appends kReduceGrads and kOptimizerStep to every rank.
// REQUIRES: `compute` holds only compute instructions (IsCompute).
Result<Program> Lower(const Program& compute, Bytes message_bytes, bool recompute);
// The same lowering one instruction at a time: emit(rank, instr) for each instruction of Lower's
// program, rank by rank, each rank's in order, without building it (the planner's replay compiles
// them as they come). Lower's error when `compute` holds a non-compute instruction.
template <typename Emit>
Status LowerEach(const Program& compute, Bytes message_bytes, bool recompute, Emit&& emit);
// LowerEach's error for instruction i of `rank`.
Status LowerError(const Program& compute, int rank, size_t i);

// What BuildProgram lowers a layout's compute order with: PipelineMessageBytes(model, cfg) per
// message and recomputation when cfg.recompute is full or selective. (The simulator's cached
// replay, simulator/pipeline_replay.h, lowers a shape once and reads these per layout.)
struct Lowering {
  Bytes message_bytes = 0;
  bool recompute = false;
};
Lowering LoweringOf(const ModelSpec& model, const ParallelConfig& cfg);

// Generate + Lower for one layout: message bytes = PipelineMessageBytes(model, cfg) (core/ledger.h:
// the layout's precision decides the element size), recompute when cfg.recompute is full or
// selective (the chunk's CostTable entry says what). Checks cfg.Validate(model) first.
Result<Program> BuildProgram(const ModelSpec& model, const ParallelConfig& cfg);

// Ok when `p` is exactly the Program BuildProgram(model, cfg) gives: the same header
// (kind, pp, vp, microbatches) and, rank by rank, the same instructions (message bytes and
// recompute flags included). A plan file carries its Program; the simulator and the runtime both
// execute it only after this check, so neither can run a schedule its layout does not describe.
// The error names the first disagreement, e.g.
//   "rank 1, instruction 7 is 'F3' but layout tp=2,pp=2,... (4-byte activations) gives 'B2'".
Status CheckProgramMatchesLayout(const Program& p, const ModelSpec& model,
                                 const ParallelConfig& cfg);

// Proves: ranks are numbered 0..pp-1; every instruction is in range (microbatch, chunk, peer);
// every forward and backward of each (mb, chunk) appears exactly once per rank, each backward
// after its forward (a split backward: one BackwardInput after the forward, then one
// BackwardWeight after it, never mixed with a whole Backward); each send has exactly one matching
// receive (same microbatch, matching chunk, same bytes, peers pointing at each other) and vice
// versa; each forward that needs an input is preceded by its receive, each backward likewise;
// between each ordered pair of ranks, messages are received in the order they are sent (NCCL
// matches by order, not by tag); the dry run finishes (no deadlock). Errors name the rank, the
// instruction's index and its text ("rank 2, instruction 7 (RA3.1<1:64)").
Status Validate(const Program& p);

// Virtual stage of chunk `chunk` on `pp_rank` for this program (core/parallel.h StageOfChunk:
// chunk * pp + pp_rank, or the V of zb-v), and the rank that holds a stage.
int VirtualStageOf(const Program& p, int pp_rank, int chunk);
int RankOfStage(const Program& p, int stage);
// Whether virtual stages `stage` and `stage + 1` sit on the same rank (the turn of a V): the
// activation and the gradient between them are handed over inside the rank, with no message, so
// the rank's own order must run the lower stage's forward first and the upper stage's backward
// input half first.
bool LocalBoundary(const Program& p, int stage);
// The key shared by a send and its matching receive: distinct for distinct messages of one
// iteration (0 <= key < 2 * microbatches * pp * vp). Usable as a message tag.
// REQUIRES: `in` is a send or receive on rank `pp_rank` of `p`.
int64_t MessageKey(const Program& p, int pp_rank, const Instr& in);

// Peak number of microbatches whose activations a rank keeps at once (forwards done, backward not
// yet done; for a split backward, its W not yet done, since W needs the layer inputs), counting
// each (mb, chunk) as one, per pipeline rank; from the compute order alone.
std::vector<int> PeakStashedMicrobatches(const Program& p);

// The Figure-4 style picture: one line per rank, the compute order with microbatch numbers
// (chunks shown as mb.chunk), forwards and backwards told apart by F/B (BI/W when split).
std::string ScheduleDiagram(const Program& p);

template <typename Emit>
Status LowerEach(const Program& compute, Bytes message_bytes, bool recompute, Emit&& emit) {
  if (message_bytes < 0) return Status::Invalid("message bytes: must be >= 0");
  const int last_vs = compute.pp * compute.vp - 1;
  for (size_t r = 0; r < compute.ranks.size(); ++r) {
    const int rank = static_cast<int>(r);
    const auto& src = compute.ranks[r].instrs;
    for (size_t i = 0; i < src.size(); ++i) {
      Instr c = src[i];
      if (!IsCompute(c.op)) return LowerError(compute, rank, i);
      if (c.op == Op::kBackwardWeight) {  // no message: the weight gradient stays on the rank
        emit(rank, c);
        continue;
      }
      // A neighbouring stage on the same rank (the turn of a V) hands over without a message.
      const int vs = VirtualStageOf(compute, rank, c.chunk);
      const int below = vs > 0 ? RankOfStage(compute, vs - 1) : rank;
      const int above = vs < last_vs ? RankOfStage(compute, vs + 1) : rank;
      Instr msg;
      msg.microbatch = c.microbatch;
      msg.chunk = c.chunk;
      msg.bytes = message_bytes;
      if (c.op == Op::kForward && c.paired) {  // the combined step: both inputs, both outputs
        if (i + 1 >= src.size() || src[i + 1].op != Op::kBackward) {
          return Status::Invalid("rank " + std::to_string(rank) + ", instruction " +
                                 std::to_string(i) + " (" + InstrToText(c, compute.vp > 1) +
                                 "): a paired forward must be followed by a backward");
        }
        Instr b = src[++i];
        b.recompute = recompute;
        const int bvs = VirtualStageOf(compute, rank, b.chunk);
        const int b_below = bvs > 0 ? RankOfStage(compute, bvs - 1) : rank;
        const int b_above = bvs < last_vs ? RankOfStage(compute, bvs + 1) : rank;
        Instr bmsg = msg;
        bmsg.microbatch = b.microbatch;
        bmsg.chunk = b.chunk;
        if (below != rank) msg.op = Op::kRecvAct, msg.peer = below, emit(rank, msg);
        if (b_above != rank) bmsg.op = Op::kRecvGrad, bmsg.peer = b_above, emit(rank, bmsg);
        emit(rank, c);
        emit(rank, b);
        if (above != rank) msg.op = Op::kSendAct, msg.peer = above, emit(rank, msg);
        if (b_below != rank) bmsg.op = Op::kSendGrad, bmsg.peer = b_below, emit(rank, bmsg);
      } else if (c.op == Op::kForward) {
        if (below != rank) msg.op = Op::kRecvAct, msg.peer = below, emit(rank, msg);
        emit(rank, c);
        if (above != rank) msg.op = Op::kSendAct, msg.peer = above, emit(rank, msg);
      } else {
        c.recompute = recompute;
        if (above != rank) msg.op = Op::kRecvGrad, msg.peer = above, emit(rank, msg);
        emit(rank, c);
        if (below != rank) msg.op = Op::kSendGrad, msg.peer = below, emit(rank, msg);
      }
    }
    Instr reduce;
    reduce.op = Op::kReduceGrads;
    reduce.microbatch = -1;
    emit(rank, reduce);
    Instr step;
    step.op = Op::kOptimizerStep;
    step.microbatch = -1;
    emit(rank, step);
  }
  return Status::Ok();
}

}  // namespace ptdp::schedule
