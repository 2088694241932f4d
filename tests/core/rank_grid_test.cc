#include "core/rank_grid.h"

#include <gtest/gtest.h>

namespace ptdp {
namespace {

using Groups = std::vector<std::vector<int>>;

// megatron/core/parallel_state.py's docstring: 16 GPUs, tp = 2, pp = 4 (so dp = 2), order tp-dp-pp.
TEST(RankGrid, MegatronSixteenGpuExample) {
  auto g = RankGrid::Create(/*tp=*/2, /*dp=*/2, /*pp=*/4).value();
  EXPECT_EQ(g.AllTensorGroups(),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.AllDataGroups(),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(g.AllPipelineGroups(),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(g.EmbeddingGroup(5), (std::vector<int>{1, 13}));
}

// Megatron's RankGenerator example: 8 GPUs, order tp-pp-dp, 2-2-2: dp groups
// [[0,4],[1,5],[2,6],[3,7]].
TEST(RankGrid, MegatronOrderTpPpDp) {
  auto g = RankGrid::Create(2, 2, 2, "tp-pp-dp").value();
  EXPECT_EQ(g.AllDataGroups(), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(g.AllPipelineGroups(), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
}

TEST(RankGrid, RoundTripsEveryRank) {
  auto g = RankGrid::Create(4, 3, 5).value();
  for (int r = 0; r < g.WorldSize(); ++r) EXPECT_EQ(g.Rank(g.Coord(r)), r);
  RankCoord c = g.Coord(4 * 3 * 2 + 4 * 1 + 3);
  EXPECT_EQ(c, (RankCoord{3, 1, 2}));
}

TEST(RankGrid, NodesOfGroups) {
  // The paper's 1T layout: t = 8 inside a DGX node, data group strides over nodes.
  auto g = RankGrid::Create(8, 6, 64).value();
  EXPECT_FALSE(RankGrid::CrossesNodes(g.TensorGroup(9), 8));
  EXPECT_EQ(RankGrid::NodesSpanned(g.DataGroup(0), 8), 6);
  EXPECT_EQ(RankGrid::NodesSpanned(g.PipelineGroup(0), 8), 64);
}

TEST(RankGrid, NodesSpannedSortedOrNot) {
  // Sorted (counted by node changes) and the same ranks shuffled (counted with a set) agree.
  EXPECT_EQ(RankGrid::NodesSpanned({0, 1, 7, 8, 9, 23}, 8), 3);
  EXPECT_EQ(RankGrid::NodesSpanned({23, 0, 9, 1, 8, 7}, 8), 3);
  EXPECT_EQ(RankGrid::NodesSpanned({16, 40}, 8), 2);
  EXPECT_EQ(RankGrid::NodesSpanned({5}, 8), 1);
  EXPECT_EQ(RankGrid::NodesSpanned({}, 8), 0);
}

TEST(RankGrid, RejectsBadOrder) {
  EXPECT_FALSE(RankGrid::Create(2, 2, 2, "tp-tp-pp").ok());
  EXPECT_FALSE(RankGrid::Create(0, 2, 2).ok());
  for (const char* bad : {"", "tp", "tp-dp", "tp-dp-pp-pp", "tp--dp-pp", "-tp-dp-pp", "tp-dp-px",
                          "tp-dp-pp-", "tp-dp-pp--"}) {
    EXPECT_FALSE(RankGrid::Create(2, 2, 2, bad).ok()) << bad;
  }
  EXPECT_EQ(RankGrid::Create(2, 3, 4, "pp-tp-dp")->Rank({1, 2, 3}), 3 + 1 * 4 + 2 * 8);
}

}  // namespace
}  // namespace ptdp
