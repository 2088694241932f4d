// Sourced: a number with its provenance, the unit every profile fact is made of (hardware
// profiles, core/hardware.h; software profiles, core/software.h), and its strict JSON form
// {"value": <number>, "source": "<non-empty>"}.
#pragma once

#include <string>

#include "core/json.h"
#include "core/status.h"

namespace ptdp {

// A number with its provenance.
struct Sourced {
  double value = 0;
  std::string source;
};

// Reads parent[key] as {"value": <number in (0, hi], or [0, hi] with allow_zero>, "source":
// "<non-empty>"}; the error names the key path and the reason.
Status ReadSourced(JsonObjectReader& parent, const std::string& key, Sourced* out, double hi,
                   bool allow_zero = false);
OrderedJson SourcedJson(const Sourced& s);

}  // namespace ptdp
