// RankGrid: global rank <-> (tp, dp, pp) coordinates, and every process group derived from it.
//
// Order "tp-dp-pp" (the default, Megatron-LM's): tensor ranks are innermost, then data, then
// pipeline, so rank = tp_rank + tp * (dp_rank + dp * pp_rank) and a tensor group is a run of
// consecutive ranks (inside one node when tp <= GPUs per node). Worked example, 16 GPUs with
// tp = 2, pp = 4 (so dp = 2), from megatron/core/parallel_state.py:
//   tensor groups   [0,1] [2,3] [4,5] ... [14,15]
//   data groups     [0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]
//   pipeline groups [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]
// Other orders ("tp-pp-dp", ...) are accepted: the first name is innermost.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/status.h"

namespace ptdp {

struct RankCoord {
  int tp = 0;
  int dp = 0;
  int pp = 0;
  bool operator==(const RankCoord&) const = default;
};

class RankGrid {
 public:
  // REQUIRES: tp, dp, pp >= 1; order is a permutation of "tp", "dp", "pp" joined by '-'.
  static Result<RankGrid> Create(int tp, int dp, int pp, const std::string& order = "tp-dp-pp");

  int tp() const { return size_[kTp]; }
  int dp() const { return size_[kDp]; }
  int pp() const { return size_[kPp]; }
  int WorldSize() const { return size_[0] * size_[1] * size_[2]; }
  const std::string& order() const { return order_; }

  int Rank(const RankCoord& c) const;
  RankCoord Coord(int rank) const;

  // The group `rank` belongs to, as sorted global ranks; index in the group = that coordinate.
  std::vector<int> TensorGroup(int rank) const;
  std::vector<int> DataGroup(int rank) const;
  std::vector<int> PipelineGroup(int rank) const;  // ordered by pipeline stage
  // First and last pipeline stage of `rank`'s pipeline (one rank when pp == 1).
  std::vector<int> EmbeddingGroup(int rank) const;

  // Every group of a kind, in order of their smallest rank.
  std::vector<std::vector<int>> AllTensorGroups() const;
  std::vector<std::vector<int>> AllDataGroups() const;
  std::vector<std::vector<int>> AllPipelineGroups() const;

  // Node of a rank, with `gpus_per_node` consecutive ranks per node.
  static int NodeOf(int rank, int gpus_per_node) { return rank / gpus_per_node; }
  // Whether the given group spans more than one node.
  static bool CrossesNodes(const std::vector<int>& group, int gpus_per_node);
  // Distinct nodes a group spans.
  static int NodesSpanned(const std::vector<int>& group, int gpus_per_node);

 private:
  enum Dim { kTp = 0, kDp = 1, kPp = 2 };
  std::vector<int> GroupAlong(int rank, Dim d) const;
  std::vector<std::vector<int>> AllGroupsAlong(Dim d) const;

  std::array<int, 3> size_{1, 1, 1};              // indexed by Dim
  std::array<Dim, 3> order_dims_{kTp, kDp, kPp};  // innermost first
  std::array<int, 3> stride_{1, 1, 1};            // indexed by Dim
  std::string order_;
};

}  // namespace ptdp
