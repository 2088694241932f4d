// The rule by which LtGemm keeps one of cuBLASLt's candidate algorithms, apart from the GPU so a
// host test can run it (tests/cuda/host_test.cc).
//
// times_ms[r][i] is candidate i's time in round r; rounds visit every candidate in turn, so a
// clock that ramps up or down during tuning (an idle H200 starts its first step at 345 MHz)
// touches every candidate alike instead of favouring the ones timed last. Each candidate's best
// round counts; the heuristic's first pick (index 0) stays unless another is faster by more than
// `margin` (a fraction): on an H200, tuning by one back-to-back pass per candidate swapped the
// first pick of gpt-1.3b's fc1 weight gradient for an algorithm 10% slower in the step
// (docs/cuda.md).
#pragma once

#include <cstddef>
#include <vector>

namespace ptdp::cublas {

// Index of the candidate to keep; a candidate with a negative time in any round (it failed) is
// never picked. 0 when nothing was timed.
inline size_t PickFastest(const std::vector<std::vector<float>>& times_ms, double margin) {
  if (times_ms.empty() || times_ms.front().empty()) return 0;
  const size_t n = times_ms.front().size();
  std::vector<float> best(n, -1.0f);
  std::vector<bool> failed(n, false);
  for (const std::vector<float>& round : times_ms) {
    for (size_t i = 0; i < n && i < round.size(); ++i) {
      if (round[i] < 0.0f) failed[i] = true;
      if (best[i] < 0.0f || round[i] < best[i]) best[i] = round[i];
    }
  }
  size_t pick = 0;
  for (size_t i = 1; i < n; ++i) {
    if (failed[i] || best[i] < 0.0f) continue;
    const float to_beat = failed[pick] ? -1.0f : best[pick];
    const double bar = pick == 0 ? to_beat * (1.0 - margin) : to_beat;
    if (to_beat < 0.0f || best[i] < bar) pick = i;
  }
  return pick;
}

}  // namespace ptdp::cublas
