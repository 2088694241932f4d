// The compute order of interleaved 1F1B, shared by the generator (schedule/generators.cc) and the
// ledger's replay (core/ledger.cc): Megatron-Core's schedule table with microbatch groups of G
// (megatron/core/pipeline_parallel/schedules.py, get_schedule_table and get_pp_rank_microbatches).
//
// The table takes the microbatches in groups of G (the last one smaller when G does not divide
// m) and, within each group, every chunk in turn over the group's microbatches. A rank's k-th
// forward is table entry k; its k-th backward the same microbatch on chunk vp - 1 - chunk. Rank r
// runs min(m vp, 2 (pp - r - 1) + (vp - 1) G) warm-up forwards, then one forward and one backward
// per step, then the remaining backwards.
#pragma once

#include <cstdint>

namespace ptdp {

// The smallest G >= pp whose last group (m % G) is empty or at least pp: the group size ptdp
// generates with when none is given and --emit megatron passes to Megatron-Core (which refuses a
// last group of 1 .. pp - 1). pp when pp divides m.
int64_t DefaultMicrobatchGroup(int64_t microbatches, int pp);

struct InterleavedSlot {
  int64_t microbatch = 0;
  int chunk = 0;  // the forward's; the backward runs vp - 1 - chunk
};

struct InterleavedOrder {
  int64_t table_microbatches = 0;  // m, or m + 1 for pp = 2 with odd m (the extra one is dropped)
  int64_t microbatches = 0;        // m: slots of later microbatches are skipped
  int vp = 1;
  int64_t group = 1;

  int64_t Slots() const { return table_microbatches * vp; }
  // Table entry k, 0 <= k < Slots().
  InterleavedSlot Slot(int64_t k) const;
  int64_t Warmup(int pp, int pp_rank) const;
};

// The order the generator uses for (pp, m, vp) with group `group` (0: DefaultMicrobatchGroup).
// pp = 2 with odd m takes groups of 2 over m + 1 microbatches and drops the last: with a larger G
// rank 0's gradient and activation messages to rank 1 leave in an order rank 1 does not consume
// them in (docs/design-notes.md). REQUIRES: the shape passes schedule::CheckScheduleShape.
InterleavedOrder InterleavedOrderOf(int pp, int64_t microbatches, int vp, int64_t group = 0);

}  // namespace ptdp
