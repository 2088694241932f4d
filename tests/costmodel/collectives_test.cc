#include "costmodel/collectives.h"

#include <gtest/gtest.h>

#include "tests/costmodel/test_profile.h"

namespace ptdp::costmodel {
namespace {

// nccl-tests doc/PERFORMANCE.md.
TEST(Collectives, BusBandwidthFactors) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllGather, 8), 0.875);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kSendRecv, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllReduce, 1), 0.0);
}

TEST(Collectives, SpanOfGroups) {
  const GroupSpan tp = SpanOf({0, 1, 2, 3, 4, 5, 6, 7}, 8);
  EXPECT_EQ(tp.nodes, 1);
  EXPECT_FALSE(tp.inter_node());
  const GroupSpan dp = SpanOf({0, 8, 16}, 8);
  EXPECT_EQ(dp.nodes, 3);
  EXPECT_EQ(dp.members_per_node, 1);
  const GroupSpan dp2 = SpanOf({0, 2, 4, 6, 8, 10, 12, 14}, 8);
  EXPECT_EQ(dp2.nodes, 2);
  EXPECT_EQ(dp2.members_per_node, 4);
}

// 1 GB all-reduce over 8 GPUs of a node: 10 us + 1e9 * 1.75 / 200e9 = 8.76 ms.
TEST(Collectives, IntraNodeAllReduce) {
  const HardwareProfile hw = testing::RoundProfile();
  EXPECT_NEAR(CollectiveTime(hw, Collective::kAllReduce, 1000000000,
                             SpanOf({0, 1, 2, 3, 4, 5, 6, 7}, 8), 8),
              10e-6 + 1e9 * 1.75 / 200e9, 1e-12);
}

// Across 2 nodes with 1 member per node: the group gets 1/8 of the node's 160 GB/s = 20 GB/s;
// factor 2(2-1)/2 = 1: 20 us + 1e9 / 20e9 = 50.02 ms. With all 8 GPUs of each node in the group
// (16 ranks) the node's 160 GB/s applies: 20 us + 1e9 * 1.875 / 160e9.
TEST(Collectives, InterNodeGroupsShareTheNics) {
  const HardwareProfile hw = testing::RoundProfile();
  EXPECT_NEAR(CollectiveTime(hw, Collective::kAllReduce, 1000000000, SpanOf({0, 8}, 8), 8),
              20e-6 + 1e9 / 20e9, 1e-12);
  std::vector<int> all(16);
  for (int i = 0; i < 16; ++i) all[i] = i;
  EXPECT_NEAR(CollectiveTime(hw, Collective::kAllReduce, 1000000000, SpanOf(all, 8), 8),
              20e-6 + 1e9 * 1.875 / 160e9, 1e-12);
  // Point-to-point across nodes is per GPU: 20 GB/s.
  const LinkCost l = CollectiveLink(hw, Collective::kSendRecv, SpanOf({0, 8}, 8), 8);
  EXPECT_TRUE(l.inter_node);
  EXPECT_NEAR(l.bandwidth_Bps, 20e9, 1e-3);
  EXPECT_DOUBLE_EQ(CollectiveTime(hw, Collective::kAllReduce, 1000, SpanOf({3}, 8), 8), 0.0);
}

}  // namespace
}  // namespace ptdp::costmodel
