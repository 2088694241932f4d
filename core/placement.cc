#include "core/placement.h"

#include <algorithm>

namespace ptdp {
namespace {

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

}  // namespace

Status CheckTensorGroupsOnOneHost(const RankGrid& grid, int gpus_per_node,
                                  const std::vector<std::string>& hosts) {
  if (hosts.size() != size_t(grid.WorldSize())) {
    return Status::Internal("placement: " + std::to_string(hosts.size()) + " host names for " +
                            std::to_string(grid.WorldSize()) + " ranks");
  }
  for (const std::vector<int>& group : grid.AllTensorGroups()) {
    // The plan spreads this group over nodes itself: its cost model priced the inter-node links.
    if (RankGrid::CrossesNodes(group, gpus_per_node)) continue;
    std::vector<std::string> distinct;
    for (int r : group) {
      const std::string& h = hosts[size_t(r)];
      if (std::find(distinct.begin(), distinct.end(), h) == distinct.end()) distinct.push_back(h);
    }
    if (distinct.size() == 1) continue;
    std::string ranks;
    for (size_t i = 0; i < group.size(); ++i) {
      if (i > 0) ranks += ',';
      ranks += std::to_string(group[i]);
    }
    return Status::Invalid("placement: tensor group of ranks " + ranks + " spans hosts " +
                           Join(distinct) + "; the plan keeps it inside one node (" +
                           std::to_string(gpus_per_node) +
                           " consecutive ranks per node: launch with ptdp launch, or one task "
                           "per GPU in rank order)");
  }
  return Status::Ok();
}

std::string DescribeHosts(const std::vector<std::string>& hosts) {
  std::vector<std::pair<std::string, int>> counts;
  for (const std::string& h : hosts) {
    auto it =
        std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == h; });
    if (it == counts.end())
      counts.emplace_back(h, 1);
    else
      ++it->second;
  }
  std::vector<std::string> parts;
  for (const auto& [h, n] : counts) parts.push_back(h + ": " + std::to_string(n));
  return Join(parts);
}

}  // namespace ptdp
