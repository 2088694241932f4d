// SVG Gantt picture of a Timeline, drawn like Figure 4 of Narayanan et al. 2021: one row per
// pipeline rank, time to the right, each forward and backward a box coloured by its microbatch
// (forwards light, backwards dark, the microbatch number written inside when it fits), idle time
// left as the row's bare background. Up to `max_rows` ranks are drawn one row each; beyond that a
// summary: the first and last ranks and evenly spaced ones between, with a note saying so.
#pragma once

#include <string>

#include "core/timeline.h"

namespace ptdp::sim {

struct GanttOptions {
  std::string title;
  int width_px = 1200;  // of the time axis
  int max_rows = 16;
  Nanoseconds axis_end_ns = 0;  // the time axis' end; 0: the timeline's own end (`ptdp compare`
                                // draws a prediction and a measurement on one axis)
};

// A standalone SVG 1.1 document (well-formed XML).
std::string GanttSvg(const Timeline& t, const GanttOptions& o = GanttOptions());

}  // namespace ptdp::sim
