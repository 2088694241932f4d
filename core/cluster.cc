#include "core/cluster.h"

#include <filesystem>

#include "core/checked.h"
#include "core/json.h"
#include "core/parallel.h"

namespace ptdp {

namespace {

const EmbeddedProfile* FindPreset(const std::string& name) {
  for (const auto& p : EmbeddedProfiles()) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

std::string PresetList() {
  std::string s;
  for (const auto& p : EmbeddedProfiles()) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

Result<Json> ReadClusterJson(const std::string& name_or_path) {
  if (const EmbeddedProfile* p = FindPreset(name_or_path)) {
    auto j = ParseJson(p->json, std::string("built-in profile ") + p->name);
    if (!j.ok()) return Status::Internal(j.status().message());
    return j;
  }
  std::error_code ec;
  if (!std::filesystem::exists(name_or_path, ec)) {
    return Status::NotFound("--cluster: \"" + name_or_path + "\" is neither a built-in cluster (" +
                            PresetList() + ") nor an existing file");
  }
  return ReadJsonFile(name_or_path);
}

}  // namespace

Result<HardwareProfile> LoadProfile(const std::string& name_or_path) {
  PTDP_ASSIGN_OR_RETURN(Json j, ReadClusterJson(name_or_path));
  return HardwareProfileFromJson(j, FindPreset(name_or_path) ? name_or_path : name_or_path);
}

Result<ClusterSpec> LoadCluster(const std::string& name_or_path, int gpus, int nodes) {
  PTDP_ASSIGN_OR_RETURN(Json j, ReadClusterJson(name_or_path));
  ClusterSpec c;
  c.name = name_or_path;
  int64_t file_nodes = 0, file_gpn = 0;  // int64: 1e10 is refused by range, not by type
  if (j.is_object() && j.contains("profile")) {
    // A cluster file.
    JsonObjectReader r(j, name_or_path);
    std::string profile, name;
    r.Optional("name", &name);
    r.Required("profile", &profile);
    r.Optional("gpus_per_node", &file_gpn);
    r.Optional("nodes", &file_nodes);
    PTDP_RETURN_IF_ERROR(r.Finish());
    if (!name.empty()) c.name = name;
    if (FindPreset(profile) == nullptr && !std::filesystem::path(profile).is_absolute()) {
      // A relative profile path is relative to the cluster file.
      const auto rel = std::filesystem::path(name_or_path).parent_path() / profile;
      if (std::filesystem::exists(rel)) profile = rel.string();
    }
    auto hw = LoadProfile(profile);
    if (!hw.ok()) return hw.status().WithPrefix(r.PathOf("profile"));
    c.profile = std::move(hw).value();
    if (r.Has("gpus_per_node")) {
      PTDP_RETURN_IF_ERROR(CheckRange(r.PathOf("gpus_per_node"), int64_t(file_gpn), 1, 1024));
    }
    if (r.Has("nodes")) {
      PTDP_RETURN_IF_ERROR(CheckRange(r.PathOf("nodes"), int64_t(file_nodes), 1, kMaxWorldSize));
    }
  } else {
    PTDP_ASSIGN_OR_RETURN(c.profile, HardwareProfileFromJson(j, name_or_path));
  }
  c.gpus_per_node = file_gpn > 0 ? int(file_gpn) : int(c.profile.gpus_per_node.value);
  if (gpus != 0) PTDP_RETURN_IF_ERROR(CheckRange("--gpus", int64_t(gpus), 1, kMaxWorldSize));
  if (nodes != 0) PTDP_RETURN_IF_ERROR(CheckRange("--nodes", int64_t(nodes), 1, kMaxWorldSize));
  // 65536 nodes x 65536 GPUs once wrapped to "0 GPUs": form the total in checked int64.
  const int64_t node_count = gpus > 0 ? 1 : nodes > 0 ? nodes : (file_nodes > 0 ? file_nodes : 1);
  PTDP_ASSIGN_OR_RETURN(const int64_t total,
                        CheckedProduct({node_count, c.gpus_per_node}, "nodes x gpus_per_node"));
  if (total > kMaxWorldSize) {
    return Status::Invalid("nodes x gpus_per_node: " + std::to_string(total) +
                           " GPUs is outside [1, " + std::to_string(kMaxWorldSize) + "]");
  }
  if (gpus > 0 && nodes > 0 && int64_t(gpus) != int64_t(nodes) * c.gpus_per_node) {
    return Status::Invalid("--gpus " + std::to_string(gpus) + " differs from --nodes " +
                           std::to_string(nodes) + " x " + std::to_string(c.gpus_per_node) +
                           " GPUs per node");
  }
  if (gpus > 0) {
    if (gpus < c.gpus_per_node) {
      c.gpus_per_node = gpus;  // one partial node
      c.nodes = 1;
    } else if (gpus % c.gpus_per_node != 0) {
      return Status::Invalid("--gpus: " + std::to_string(gpus) + " is not a multiple of the " +
                             std::to_string(c.gpus_per_node) + " GPUs per node of " + c.name);
    } else {
      c.nodes = gpus / c.gpus_per_node;
    }
  } else if (nodes > 0) {
    c.nodes = nodes;
  } else {
    c.nodes = file_nodes > 0 ? int(file_nodes) : 1;
  }
  return c;
}

}  // namespace ptdp
