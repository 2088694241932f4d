#include "core/rank_grid.h"

#include <algorithm>
#include <set>
#include <string_view>

namespace ptdp {

Result<RankGrid> RankGrid::Create(int tp, int dp, int pp, const std::string& order) {
  if (tp < 1 || dp < 1 || pp < 1) return Status::Invalid("rank grid: sizes must be at least 1");
  RankGrid g;
  g.size_ = {tp, dp, pp};
  g.order_ = order;
  // The names between '-'s, read without a stream: the planner builds a grid for every layout it
  // prices. A trailing '-' leaves an empty last name, refused like any other empty one.
  std::vector<std::string_view> names;
  const std::string_view text(order);
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find('-', begin), text.size());
    names.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  if (!text.empty() && text.back() == '-') names.push_back({});
  auto count = [&](std::string_view name) { return std::count(names.begin(), names.end(), name); };
  if (names.size() != 3 || count("tp") != 1 || count("dp") != 1 || count("pp") != 1) {
    return Status::Invalid("order: '" + order + "' is not a permutation of tp-dp-pp");
  }
  int stride = 1;
  for (int i = 0; i < 3; ++i) {
    Dim d = names[i] == "tp" ? kTp : names[i] == "dp" ? kDp : kPp;
    g.order_dims_[i] = d;
    g.stride_[d] = stride;
    stride *= g.size_[d];
  }
  return g;
}

int RankGrid::Rank(const RankCoord& c) const {
  PTDP_CHECK(c.tp >= 0 && c.tp < tp() && c.dp >= 0 && c.dp < dp() && c.pp >= 0 && c.pp < pp());
  return c.tp * stride_[kTp] + c.dp * stride_[kDp] + c.pp * stride_[kPp];
}

RankCoord RankGrid::Coord(int rank) const {
  PTDP_CHECK(rank >= 0 && rank < WorldSize());
  RankCoord c;
  c.tp = rank / stride_[kTp] % size_[kTp];
  c.dp = rank / stride_[kDp] % size_[kDp];
  c.pp = rank / stride_[kPp] % size_[kPp];
  return c;
}

std::vector<int> RankGrid::GroupAlong(int rank, Dim d) const {
  RankCoord c = Coord(rank);
  std::vector<int> g;
  g.reserve(size_[d]);
  for (int i = 0; i < size_[d]; ++i) {
    RankCoord x = c;
    (d == kTp ? x.tp : d == kDp ? x.dp : x.pp) = i;
    g.push_back(Rank(x));
  }
  return g;
}

std::vector<std::vector<int>> RankGrid::AllGroupsAlong(Dim d) const {
  std::vector<std::vector<int>> all;
  std::vector<bool> done(WorldSize(), false);
  for (int r = 0; r < WorldSize(); ++r) {
    if (done[r]) continue;
    auto g = GroupAlong(r, d);
    for (int x : g) done[x] = true;
    all.push_back(std::move(g));
  }
  return all;
}

std::vector<int> RankGrid::TensorGroup(int rank) const {
  return GroupAlong(rank, kTp);
}
std::vector<int> RankGrid::DataGroup(int rank) const {
  return GroupAlong(rank, kDp);
}
std::vector<int> RankGrid::PipelineGroup(int rank) const {
  return GroupAlong(rank, kPp);
}

std::vector<int> RankGrid::EmbeddingGroup(int rank) const {
  auto g = PipelineGroup(rank);
  if (g.size() == 1) return g;
  return {g.front(), g.back()};
}

std::vector<std::vector<int>> RankGrid::AllTensorGroups() const {
  return AllGroupsAlong(kTp);
}
std::vector<std::vector<int>> RankGrid::AllDataGroups() const {
  return AllGroupsAlong(kDp);
}
std::vector<std::vector<int>> RankGrid::AllPipelineGroups() const {
  return AllGroupsAlong(kPp);
}

bool RankGrid::CrossesNodes(const std::vector<int>& group, int gpus_per_node) {
  return NodesSpanned(group, gpus_per_node) > 1;
}

int RankGrid::NodesSpanned(const std::vector<int>& group, int gpus_per_node) {
  // The grid's groups are sorted by rank, so their node ids never decrease and each new one
  // is a new node: counted without a set (the planner asks this for every layout it prices).
  if (std::is_sorted(group.begin(), group.end())) {
    int nodes = 0;
    for (size_t i = 0; i < group.size(); ++i) {
      if (i == 0 || NodeOf(group[i], gpus_per_node) != NodeOf(group[i - 1], gpus_per_node)) {
        ++nodes;
      }
    }
    return nodes;
  }
  std::set<int> nodes;
  for (int r : group) nodes.insert(NodeOf(r, gpus_per_node));
  return int(nodes.size());
}

}  // namespace ptdp
