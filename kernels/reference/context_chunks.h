// Context parallelism's split of a sequence (layout.cp; docs/context_parallel.md): s tokens in
// 2 cp chunks of s / 2cp, and cp rank r holds chunks r and 2cp - 1 - r, in that order, as its
// s / cp local positions. Causal attention's work is then the same on every rank (Megatron-Core's
// load balancing). One definition for the data, the embedding, dropout and the attention kernels.
// Header-only and usable from device code (PTDP_HOST_DEVICE).
// REQUIRES: s divisible by 2 cp (ParallelConfig::Validate refuses other plans).
#pragma once

#include <cstdint>

#include "kernels/reference/counter_rng.h"  // PTDP_HOST_DEVICE

namespace ptdp::kernels {

struct ContextChunks {
  int64_t s = 1;  // the whole sequence
  int cp = 1;
  int rank = 0;  // this rank's place in its context-parallel group

  PTDP_HOST_DEVICE int64_t Local() const { return s / cp; }
  PTDP_HOST_DEVICE int64_t Chunk() const { return s / (2 * cp); }
  // The global position of local position t (0 <= t < Local()).
  PTDP_HOST_DEVICE int64_t Position(int64_t t) const {
    if (cp == 1) return t;
    const int64_t chunk = Chunk(), which = t < chunk ? rank : 2 * cp - 1 - rank;
    return which * chunk + t % chunk;
  }
  // The rank holding global position g, and g's local position there.
  PTDP_HOST_DEVICE int Owner(int64_t g) const {
    if (cp == 1) return 0;
    const int64_t which = g / Chunk();
    return static_cast<int>(which < cp ? which : 2 * cp - 1 - which);
  }
  PTDP_HOST_DEVICE int64_t LocalOf(int64_t g) const {
    if (cp == 1) return g;
    const int64_t chunk = Chunk(), which = g / chunk;
    return (which < cp ? 0 : chunk) + g % chunk;
  }
};

}  // namespace ptdp::kernels
