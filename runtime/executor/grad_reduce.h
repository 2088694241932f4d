// The data-parallel gradient reduction's plan: which instruction of a rank's Program completes each
// local chunk's gradients for the step, and the buckets an arena range is reduced in. Pure
// functions (tested on hand-made Programs); the trainer's use is in grad_reduce.cc.
#pragma once

#include <cstdint>
#include <vector>

#include "core/program.h"
#include "runtime/model/params.h"  // ElementRange

namespace ptdp::runtime {

// For each of `chunks` local chunks, the index in `instrs` of the instruction after which the
// chunk's gradients are final for the step: its last kBackward, kBackwardInput or kBackwardWeight
// (a split backward's W always follows its B, so the last is a kBackward or a kBackwardWeight);
// -1 for a chunk with none. REQUIRES: every instruction's chunk is in [0, chunks) or it has none.
std::vector<int> LastGradientInstr(const std::vector<Instr>& instrs, int chunks);

// The buckets `range` is all-reduced in, in ascending order: cut at every multiple of `bucket`
// (arena offsets, so that a range reduced on its own is cut where the whole arena's reduction cuts
// it) and with the `held` ranges left out. REQUIRES: bucket >= 1.
std::vector<ElementRange> GradBuckets(ElementRange range, int64_t bucket,
                                      const std::vector<ElementRange>& held = {});

}  // namespace ptdp::runtime
