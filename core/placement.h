// Placement: whether the ranks of a job landed where the plan assumed. The plan puts
// `gpus_per_node` consecutive ranks on each node (RankGrid::NodeOf), so a tensor group of
// tp <= gpus_per_node ranks lies inside one node; `ptdp train` checks the hosts its ranks actually
// run on against that before it trains (docs/launch.md).
#pragma once

#include <string>
#include <vector>

#include "core/rank_grid.h"
#include "core/status.h"

namespace ptdp {

// `hosts[r]`: the host world rank r runs on (hosts.size() == grid.WorldSize()). Invalid (one line)
// when a tensor group that the plan keeps inside one node (RankGrid::CrossesNodes false for
// `gpus_per_node`) spans several hosts, naming the group's ranks and hosts; Ok when the plan
// itself spreads tensor groups over nodes (tp > gpus_per_node), or every group stays on one host.
Status CheckTensorGroupsOnOneHost(const RankGrid& grid, int gpus_per_node,
                                  const std::vector<std::string>& hosts);

// Ranks per host, in order of first appearance: "vm: 4" or "a: 2, b: 2". For the launch line.
std::string DescribeHosts(const std::vector<std::string>& hosts);

}  // namespace ptdp
