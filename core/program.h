// The Program IR: the one representation of a pipeline schedule, interpreted by both the
// simulator (predicted Timeline) and the runtime (measured Timeline). For each pipeline rank an
// ordered list of instructions; the tp * dp ranks that share a pipeline rank run the same list.
// Tensor-parallel collectives live inside kForward / kBackward, as Megatron-LM's layers do.
// docs/ir.md describes the semantics and the invariants schedule::Validate() proves.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/parallel.h"
#include "core/status.h"
#include "core/units.h"

namespace ptdp {

enum class Op : uint8_t {
  kForward,        // forward of (microbatch, chunk)
  kBackward,       // backward of (microbatch, chunk); `recompute` redoes the forward first
  kSendAct,        // send the output activation of (microbatch, chunk) to `peer`
  kRecvAct,        // receive the input activation of (microbatch, chunk) from `peer`
  kSendGrad,       // send the input gradient of (microbatch, chunk) to `peer`
  kRecvGrad,       // receive the output gradient of (microbatch, chunk) from `peer`
  kReduceGrads,    // data-parallel gradient all-reduce (and the embedding all-reduce)
  kOptimizerStep,  // optimizer update of this rank's parameters
  // The backward split in two (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): the
  // input-gradient half (B in the paper; sends the input gradient, `recompute` redoes the forward
  // first) and the weight-gradient half (W), which any later point of the rank's list may run
  // with the inputs it needs kept. A (microbatch, chunk) has either one kBackward or one
  // kBackwardInput followed by one kBackwardWeight.
  kBackwardInput,
  kBackwardWeight,
};
// kBackward or kBackwardInput: the instruction that computes (and sends) the input gradient.
inline bool ComputesInputGrad(Op op) {
  return op == Op::kBackward || op == Op::kBackwardInput;
}
// kForward, kBackward, kBackwardInput or kBackwardWeight.
inline bool IsCompute(Op op) {
  return op == Op::kForward || op == Op::kBackward || op == Op::kBackwardInput ||
         op == Op::kBackwardWeight;
}
// IsCompute or the optimizer step: the instructions whose time is the GPU's arithmetic, which
// timeline comparison (core/timeline_compare.h) and calibration (costmodel/calibrate.h) judge.
inline bool IsComputeOrOptimizerStep(Op op) {
  return IsCompute(op) || op == Op::kOptimizerStep;
}

struct Instr {
  Op op = Op::kForward;
  int32_t microbatch = -1;  // -1 for batch-level ops (kReduceGrads, kOptimizerStep)
  int32_t chunk = 0;        // model chunk on this pipeline rank, 0 .. vp-1
  int32_t peer = -1;        // pipeline rank of the partner of a send/recv, -1 otherwise
  Bytes bytes = 0;          // payload of a send/recv per tensor rank
  bool recompute = false;   // on kBackward / kBackwardInput: activation recomputation
  // On kForward: runs as one combined step with the rank's next compute instruction, a kBackward
  // of another (microbatch, chunk), the two interleaved layer by layer so that the all-to-alls of
  // each hide behind the other's compute (ParallelConfig::moe_a2a_overlap). Both inputs are
  // received before the step, both outputs sent after it (schedule/schedule.h).
  bool paired = false;
  bool operator==(const Instr&) const = default;
};

struct RankProgram {
  int pp_rank = 0;
  // Transformer layers of each local chunk (vp entries), as core/shapes.h ChunkLayers places
  // them: what a forward or backward of the chunk runs. schedule::BuildProgram states it (uneven
  // stages make it differ by rank); empty in a compute-only or hand-made Program, or in a plan
  // file written before 2026-11-26, which does not state it.
  std::vector<int> layers;
  std::vector<Instr> instrs;
};

struct Program {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int pp = 1;
  int vp = 1;
  int64_t microbatches = 1;
  std::vector<RankProgram> ranks;  // indexed by pipeline rank
};

}  // namespace ptdp

// ---- Text and JSON forms (core/program.cc; docs/ir.md gives the grammar) ----
namespace ptdp {

const char* OpName(Op op);  // "forward", "backward", "send_act", ..., "backward_weight"
Result<Op> ParseOpName(const std::string& s);

// One instruction as a token. `with_chunk` prints the ".chunk" part (Programs with vp > 1).
//   F3 / F3.1          forward of microbatch 3 (chunk 1)
//   B3 / B3.1 / B3.1r  backward (r: with recomputation)
//   F3.1+              forward paired with the next backward (combined 1F1B, Instr::paired)
//   BI3 / BI3.1r       input-gradient half of a split backward;  W3 / W3.1  weight-gradient half
//   SA3.1>2:4096       send activation of (3, chunk 1) to pipeline rank 2, 4096 bytes
//   RA3.1<0:4096       receive activation from rank 0;  SG / RG: gradients, same shape
//   AR                 reduce grads;   OPT   optimizer step
std::string InstrToText(const Instr& in, bool with_chunk = true);
// Parses one token; `where` names it in errors ("rank 2, instruction 5").
Result<Instr> InstrFromText(const std::string& token, const std::string& where);

// Whole program: a header line, then one line per rank, its layers per chunk first when stated:
//   program kind=interleaved pp=4 vp=2 microbatches=8
//   rank 0: layers=3,3 F0.0 F1.0 ...
std::string ProgramToText(const Program& p);
Result<Program> ProgramFromText(const std::string& text);

// JSON: {"kind", "pp", "vp", "microbatches", "ranks": [{"pp_rank", "layers": [3, 3], "instrs":
// ["F0.0", ...]}]} (instructions in their text form, which is exact; "layers" only when stated).
OrderedJson ProgramToJson(const Program& p);
Result<Program> ProgramFromJson(const Json& j);

// Total instructions over all ranks.
int64_t InstructionCount(const Program& p);

}  // namespace ptdp
