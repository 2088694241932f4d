#include "runtime/backend/ops.h"

#include <algorithm>

#include "kernels/reference/context_chunks.h"

namespace ptdp::runtime {

Status ForEachDropoutRun(const DropoutSpec& drop, int64_t count, const DropoutRunCall& call) {
  if (drop.cp == 1) return call(0, count, drop.first);
  const kernels::ContextChunks chunks{drop.seq, drop.cp, drop.cp_rank};
  const int64_t w = drop.width, local = chunks.Local(), chunk = chunks.Chunk();
  for (int64_t i = 0; i < count;) {
    const int64_t row = drop.first_row + i / w, bi = row / local, t = row % local;
    const int64_t n = std::min(count - i, (chunk - t % chunk) * w - i % w);
    const uint64_t first =
        drop.first + static_cast<uint64_t>((bi * drop.seq + chunks.Position(t)) * w + i % w);
    PTDP_RETURN_IF_ERROR(call(i, n, first));
    i += n;
  }
  return Status::Ok();
}

}  // namespace ptdp::runtime
