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
};

struct Instr {
  Op op = Op::kForward;
  int32_t microbatch = -1;  // -1 for batch-level ops (kReduceGrads, kOptimizerStep)
  int32_t chunk = 0;        // model chunk on this pipeline rank, 0 .. vp-1
  int32_t peer = -1;        // pipeline rank of the partner of a send/recv, -1 otherwise
  Bytes bytes = 0;          // payload of a send/recv per tensor rank
  bool recompute = false;   // on kBackward: activation recomputation
  bool operator==(const Instr&) const = default;
};

struct RankProgram {
  int pp_rank = 0;
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
