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

// What ReadSourced and the software profile's flags (core/software.cc) share: parent[key] is an
// object {"value": V, "source": "<non-empty>"}, read into *value and *source. `shape` is the form
// the error names when parent[key] is not an object, `noun` what the source must name.
template <typename V>
Status ReadValueWithSource(JsonObjectReader& parent, const std::string& key, V* value,
                           std::string* source, const char* shape, const char* noun) {
  const Json* v = parent.Child(key, true);
  PTDP_RETURN_IF_ERROR(parent.status());
  const std::string path = parent.PathOf(key);
  if (!v->is_object()) {
    return Status::Invalid(path + ": expected an object " + shape + ", got " + JsonTypeName(*v));
  }
  JsonObjectReader r(*v, path);
  r.Required("value", value);
  r.Required("source", source);
  PTDP_RETURN_IF_ERROR(r.Finish());
  if (source->empty()) {
    return Status::Invalid(path + ".source: must name where the " + noun + " comes from");
  }
  return Status::Ok();
}

}  // namespace ptdp
