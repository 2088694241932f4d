#include "profiler/timing.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace ptdp::profiler {

Seconds Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Result<Seconds> MedianSeconds(const std::function<Status()>& op,
                              const std::function<Status()>& sync, const TimingOptions& t) {
  // Warm-up, which also sizes a sample.
  Seconds start = Now();
  PTDP_RETURN_IF_ERROR(op());
  PTDP_RETURN_IF_ERROR(sync());
  const Seconds first = std::max(Now() - start, 1e-9);
  const int iters = std::clamp(static_cast<int>(t.sample_seconds / first), 1, t.max_iters);
  std::vector<Seconds> per_op;
  for (int s = 0; s < std::max(t.samples, 1); ++s) {
    start = Now();
    for (int i = 0; i < iters; ++i) PTDP_RETURN_IF_ERROR(op());
    PTDP_RETURN_IF_ERROR(sync());
    per_op.push_back((Now() - start) / iters);
  }
  std::sort(per_op.begin(), per_op.end());
  return per_op[per_op.size() / 2];
}

}  // namespace ptdp::profiler
