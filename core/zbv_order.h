// The compute order of one rank under ZB-V (Qi et al., "Pipeline Parallelism with Controllable
// Memory", NeurIPS 2024, the V-ZB schedule; sail-sg/zero-bubble-pipeline-parallelism's ZB-V), in
// one place: schedule/generators.cc emits it as a Program and core/ledger.cc replays it on byte
// counts, so the planner's memory and the Program's cannot disagree.
//
// Two chunks per rank in a V (core/parallel.h StageOfChunk): chunk 0 of rank r is stage r, chunk 1
// stage 2p - 1 - r. A microbatch's forward runs down the ranks on chunk 0, turns on rank p - 1 and
// comes back up on chunk 1 to the loss on rank 0; its backward retraces the V. Rank r runs:
//   1. 2 (p - r) - 1 forwards of chunk 0: the forwards that reach the turn before the first
//      microbatch comes back up to rank r;
//   2. r pairs (forward chunk 1, forward chunk 0): from here on a chunk-1 forward arrives every
//      other slot;
//   3. p - r triples (forward, B, W of chunk 1): the first backwards start at the loss (rank 0)
//      and come back down chunk 1, W filling the slot a chunk-0 forward would take;
//   4. steady state, until the forwards are done: (forward chunk 0,) B and W of chunk 0, forward,
//      B and W of chunk 1;
//   5. cool-down: r pairs (B chunk 0, B chunk 1), then p - r pairs (B, W of chunk 0), then the
//      W passes still pending, chunk 0's first.
// With F = B = W (per chunk) and free communication no rank idles from its first forward to its
// last W (the paper's zero bubble; tests/simulator), and at most 2p (microbatch, chunk) pairs are
// in flight on any rank (forward done, W not yet): p microbatches of a whole stage, 1F1B's peak.
// Needs m >= 2p - 1 (phase 1 of rank 0 runs 2p - 1 forwards); callers check it.
#pragma once

#include <cstdint>

#include "core/program.h"

namespace ptdp {

// Calls emit(op, microbatch, chunk) for each compute instruction of rank `r` (0 <= r < p) in
// order; op is Op::kForward, Op::kBackwardInput or Op::kBackwardWeight.
template <typename Emit>
void ZbVOrder(int p, int r, int64_t m, Emit&& emit) {
  int64_t f0 = 0, f1 = 0, b0 = 0, b1 = 0, w0 = 0, w1 = 0;
  auto forward = [&](int chunk) { emit(Op::kForward, chunk == 0 ? f0++ : f1++, chunk); };
  auto input = [&](int chunk) { emit(Op::kBackwardInput, chunk == 0 ? b0++ : b1++, chunk); };
  auto weight = [&](int chunk) { emit(Op::kBackwardWeight, chunk == 0 ? w0++ : w1++, chunk); };
  for (int i = 0; i < 2 * (p - r) - 1; ++i) forward(0);
  for (int i = 0; i < r; ++i) forward(1), forward(0);
  for (int i = 0; i < p - r; ++i) forward(1), input(1), weight(1);
  while (f1 < m) {
    if (f0 < m) forward(0);
    input(0), weight(0), forward(1), input(1), weight(1);
  }
  for (int i = 0; i < r; ++i) input(0), input(1);
  for (int i = 0; i < p - r; ++i) input(0), weight(0);
  while (w0 < m) weight(0);
  while (w1 < m) weight(1);
}

}  // namespace ptdp
