// A prediction and a measurement of the same Program, instruction by instruction (`ptdp compare`):
// the simulator's Timeline (ptdp simulate --trace) beside the runtime's (ptdp train --trace).
// Instructions are matched by (pipeline rank, op, microbatch, chunk, peer); per rank and op kind
// the summed durations, the step time and each rank's bubble are put side by side, and the
// instructions that diverge most are listed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/timeline.h"

namespace ptdp {

struct OpKindTimes {
  int32_t pp_rank = 0;
  Op op = Op::kForward;
  int64_t count = 0;  // matched instructions
  Seconds predicted_s = 0, measured_s = 0;
};

struct InstrTimes {
  int32_t pp_rank = 0;
  Instr instr;
  Seconds predicted_s = 0, measured_s = 0;
};

struct TimelineComparison {
  Seconds predicted_step_s = 0, measured_step_s = 0;  // latest end over all events
  // Per pipeline rank: idle share of the compute stream between time 0 and the rank's last
  // compute instruction's end (the rank's bubble as a share of its busy span).
  std::vector<double> predicted_bubble, measured_bubble;
  // Per pipeline rank: seconds stood blocked in receives waiting for the sender (the events'
  // wait_ns), reported apart from the receives' durations, which are the transfers.
  std::vector<double> predicted_wait_s, measured_wait_s;
  std::vector<OpKindTimes> by_kind;   // ordered by (rank, op)
  std::vector<InstrTimes> divergent;  // the `top` largest |measured - predicted|, largest first
  int64_t matched = 0, only_predicted = 0, only_measured = 0;
  // Median over matched instructions of |measured - predicted| / measured (0 when none matched).
  double median_relative_error = 0;
  // The same over the compute stream's forward, backward and optimizer-step instructions only,
  // the work the cost model's compute figures price (messages are priced by the link figures).
  double median_relative_error_compute = 0;
};

// REQUIRES nothing of the inputs beyond what TimelineFromChromeTrace checks; a different pp or vp
// is an error naming both.
Result<TimelineComparison> CompareTimelines(const Timeline& predicted, const Timeline& measured,
                                            int top);

// The report `ptdp compare` prints: step time, bubble per rank, per-kind table, divergent list.
std::string ComparisonText(const TimelineComparison& c);

}  // namespace ptdp
