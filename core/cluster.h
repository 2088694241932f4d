// Clusters: a hardware profile (a built-in preset, embedded from profiles/*.json at build time, or
// a profile JSON file) and a node count. A cluster JSON file names its profile:
//   {"name": "my-cluster", "profile": "selene" | "path/to/profile.json", "gpus_per_node": 8,
//    "nodes": 4}
// ("name" optional; gpus_per_node defaults to the profile's).
#pragma once

#include <string>
#include <vector>

#include "core/hardware.h"
#include "core/status.h"

namespace ptdp {

struct EmbeddedProfile {
  const char* name;
  const char* json;
};
// Generated from profiles/*.json (core/CMakeLists.txt).
const std::vector<EmbeddedProfile>& EmbeddedProfiles();

// A preset name or a path to a profile JSON file.
Result<HardwareProfile> LoadProfile(const std::string& name_or_path);

// `name_or_path`: a preset, a profile file or a cluster file. `gpus` (> 0) sets the node count
// (gpus / gpus_per_node, which must divide; fewer GPUs than one node make one partial node);
// `nodes` (> 0) sets it directly; with neither, a cluster file's "nodes" is used, else one node.
Result<ClusterSpec> LoadCluster(const std::string& name_or_path, int gpus = 0, int nodes = 0);

}  // namespace ptdp
