// The row layout of the fused QKV activation, with grouped-query attention (ModelSpec::kv_heads;
// Megatron-Core's query groups). A row holds the rank's kv = heads / group key/value heads, each
// with its `group` query heads: [kv][group + 2][d], the group's queries, then its key, then its
// value. With group 1 (multi-head attention) that is [heads][3][d], Megatron-LM's layout. The
// global QKV weight's rows follow the same order, so a contiguous row shard over the tensor
// group is a set of whole query groups, and every tensor split reads the same model.
// Header-only and usable from device code (PTDP_HOST_DEVICE).
#pragma once

#include <cstdint>

#include "kernels/reference/counter_rng.h"  // PTDP_HOST_DEVICE

namespace ptdp::kernels {

struct QkvLayout {
  int64_t heads = 1;  // query heads in the row
  int64_t d = 1;      // head dim
  int64_t group = 1;  // query heads per key/value head

  PTDP_HOST_DEVICE int64_t KvHeads() const { return heads / group; }
  PTDP_HOST_DEVICE int64_t Width() const { return (heads + 2 * KvHeads()) * d; }
  // Offsets within a row of query head hh, and of the key and value that head reads.
  PTDP_HOST_DEVICE int64_t Q(int64_t hh) const {
    return ((hh / group) * (group + 2) + hh % group) * d;
  }
  PTDP_HOST_DEVICE int64_t K(int64_t hh) const { return ((hh / group) * (group + 2) + group) * d; }
  PTDP_HOST_DEVICE int64_t V(int64_t hh) const { return K(hh) + d; }
  // Offset of key/value head g's key (its value follows at + d).
  PTDP_HOST_DEVICE int64_t KvOf(int64_t g) const { return (g * (group + 2) + group) * d; }
};

}  // namespace ptdp::kernels
