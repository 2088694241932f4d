// Collective agreement on a Status, so that bad input found by any rank makes EVERY rank return
// the same error (and exit non-zero) instead of some ranks waiting forever in a collective.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/comm/communicator.h"

namespace ptdp::runtime {

// Collective over `comm`: returns the non-ok status of the lowest-ranked member that has one
// (message and code broadcast to all), or Ok when every member passes Ok.
Status AgreeStatus(Communicator& comm, const Status& local);
// Collective: every member's `values` (same length on all), concatenated in rank order; exact
// (doubles travel as raw bits).
Result<std::vector<double>> AllGatherDoubles(Communicator& comm, const std::vector<double>& values);
// Collective: every member's `text` (a host name, say; cut at kMaxGatheredText bytes), in rank
// order.
inline constexpr size_t kMaxGatheredText = 255;
Result<std::vector<std::string>> AllGatherStrings(Communicator& comm, const std::string& text);

}  // namespace ptdp::runtime
