// Median-of-repeats timing with a wall clock: each sample runs an operation `iters` times and then
// synchronises, `iters` chosen so that a sample lasts about `sample_seconds`.
#pragma once

#include <functional>

#include "core/status.h"
#include "core/units.h"

namespace ptdp::profiler {

struct TimingOptions {
  double sample_seconds = 0.02;  // target duration of one sample
  int samples = 5;               // repeats; the median is reported
  int max_iters = 1000;          // cap on operations per sample
};

// Seconds per `op`, the median over samples. `sync` waits for queued work (device stream).
Result<Seconds> MedianSeconds(const std::function<Status()>& op,
                              const std::function<Status()>& sync, const TimingOptions& t);

// Seconds on a monotonic clock.
Seconds Now();

}  // namespace ptdp::profiler
