#include "core/interleaved_order.h"

#include <algorithm>

namespace ptdp {

int64_t DefaultMicrobatchGroup(int64_t microbatches, int pp) {
  for (int64_t g = pp; g < microbatches; ++g) {
    if (microbatches % g == 0 || microbatches % g >= pp) return g;
  }
  return std::max<int64_t>(microbatches, pp);
}

InterleavedSlot InterleavedOrder::Slot(int64_t k) const {
  // Whole groups hold group * vp slots each; the last, smaller group (if any) follows them.
  const int64_t whole = table_microbatches / group, per_group = group * vp;
  if (k < whole * per_group) {
    const int64_t in_group = k % per_group;
    return {k / per_group * group + in_group % group, static_cast<int>(in_group / group)};
  }
  const int64_t last = table_microbatches - whole * group, in_group = k - whole * per_group;
  return {whole * group + in_group % last, static_cast<int>(in_group / last)};
}

int64_t InterleavedOrder::Warmup(int pp, int pp_rank) const {
  return std::min(Slots(), 2 * int64_t(pp - pp_rank - 1) + int64_t(vp - 1) * group);
}

InterleavedOrder InterleavedOrderOf(int pp, int64_t microbatches, int vp, int64_t group) {
  InterleavedOrder o;
  o.microbatches = microbatches;
  o.vp = vp;
  if (pp == 2 && microbatches % 2 != 0) {
    o.table_microbatches = microbatches + 1;
    o.group = 2;
    return o;
  }
  o.table_microbatches = microbatches;
  o.group = group != 0 ? group : DefaultMicrobatchGroup(microbatches, pp);
  return o;
}

}  // namespace ptdp
