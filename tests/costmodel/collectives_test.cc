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
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kSendRecv, 1), 0.0);  // a group of one: nothing
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

// Across 2 nodes with 1 member per node: the group gets its member's NIC, 1/8 of the node's
// 160 GB/s = 20 GB/s; factor 2(2-1)/2 = 1: 20 us + 1e9 / 20e9 = 50.02 ms. With all 8 GPUs of each
// node in the group (16 ranks) the ring crosses on all 8 NICs, 1.875 x 1e9 / 8 each at 20 GB/s
// (the node's 160), faster than its NVLink hops (1.875 x 1e9 / 200e9): 20 us + 1e9 x 1.875 / 160e9.
TEST(Collectives, InterNodeGroupsShareTheNics) {
  const HardwareProfile hw = testing::RoundProfile();
  EXPECT_NEAR(CollectiveTime(hw, Collective::kAllReduce, 1000000000, SpanOf({0, 8}, 8), 8),
              20e-6 + 1e9 / 20e9, 1e-12);
  std::vector<int> all(16);
  for (int i = 0; i < 16; ++i) all[i] = i;
  EXPECT_NEAR(CollectiveTime(hw, Collective::kAllReduce, 1000000000, SpanOf(all, 8), 8),
              20e-6 + 1e9 * 1.875 / 160e9, 1e-12);
  // Point-to-point across nodes is per GPU: 20 GB/s.
  const LinkCost l = SendRecvLink(hw, true, 1000);
  EXPECT_TRUE(l.inter_node);
  EXPECT_NEAR(l.bandwidth_Bps, 20e9, 1e-3);
  EXPECT_DOUBLE_EQ(CollectiveTime(hw, Collective::kAllReduce, 1000, SpanOf({3}, 8), 8), 0.0);
}

// Groups of one kind that share a node share its NICs: with g members per node a group's
// inter-node phase runs over g NICs of 1/8 of the node's 160 GB/s each. Four members per node over
// 2 nodes (an all-reduce of 1 GB): intra-node reduce-scatter + all-gather over 4, 2 x 0.75 x 1e9 /
// 200e9 = 7.5 ms; each 2.5e8 shard all-reduced between the 2 nodes, 1 x 2.5e8 / 20e9 = 12.5 ms;
// latencies 10 + 20 + 10 us. Twice the members per node halve the NIC time (8 NICs carry it).
TEST(Collectives, HierarchicalPhasesAndNicShare) {
  HardwareProfile hw = testing::RoundProfile();
  hw.inter_node.algorithm = kHierarchical;
  const GroupSpan four = SpanOf({0, 1, 2, 3, 8, 9, 10, 11}, 8);
  const CollectiveCost ar = PlanCollective(hw, Collective::kAllReduce, 1000000000, four, 8);
  EXPECT_NEAR(ar.intra, 7.5e-3, 1e-12);
  EXPECT_NEAR(ar.nic_bytes, 2.5e8, 1e-3);
  EXPECT_NEAR(ar.nic_Bps, 20e9, 1e-3);
  EXPECT_NEAR(ar.Time(), 40e-6 + 12.5e-3, 1e-12);
  // Reduce-scatter: the intra-node reduce-scatter, then the shard's reduce-scatter across nodes
  // (factor 1/2): 10 + 20 us + max(0.75 x 1e9 / 200e9, 0.5 x 2.5e8 / 20e9) = 30 us + 6.25 ms.
  const CollectiveCost rs = PlanCollective(hw, Collective::kReduceScatter, 1000000000, four, 8);
  EXPECT_NEAR(rs.Time(), 30e-6 + 6.25e-3, 1e-12);
  // All 8 GPUs of 2 nodes: reduce-scatter and all-gather over 8 (2 x 0.875 x 1e9 / 200e9 = 8.75 ms)
  // pipelined with each 1.25e8 shard all-reduced between the 2 nodes (6.25 ms): 40 us + 8.75 ms,
  // where the ring takes 20 us + 11.72 ms.
  std::vector<int> all(16);
  for (int i = 0; i < 16; ++i) all[i] = i;
  EXPECT_NEAR(CollectiveTime(hw, Collective::kAllReduce, 1000000000, SpanOf(all, 8), 8),
              40e-6 + 8.75e-3, 1e-12);
  // The ring on the same four-per-node group: 1.75 x 1e9 / 4 per NIC at 20 GB/s (21.875 ms), or
  // what the old g/G share said: 1e9 x 1.75 / (160e9 x 4/8).
  hw.inter_node.algorithm = "ring";
  EXPECT_NEAR(CollectiveTime(hw, Collective::kAllReduce, 1000000000, four, 8),
              20e-6 + 1e9 * 1.75 / 80e9, 1e-12);
  // A group of one or no bytes costs nothing.
  EXPECT_DOUBLE_EQ(PlanCollective(hw, Collective::kAllReduce, 0, four, 8).Time(), 0.0);
}

// A curve replaces the constant: linear in log(bytes) between points (1 MB at 40 GB/s and 100 MB
// at 160: 10 MB, a half-way log, at 100 GB/s), the last point beyond, and the first point's time
// below it (0.5 MB takes 1 MB's time: 20 GB/s); no latency is added to a curve's time.
TEST(Collectives, BusbwCurveInterpolatesInLogBytes) {
  HardwareProfile hw = testing::RoundProfile();
  hw.intra_node.busbw_curves.push_back(BusbwCurve{"all_reduce", 0, "test", {1e6, 1e8}, {40, 160}});
  EXPECT_NEAR(BusBandwidth(hw.intra_node, Collective::kAllReduce, 1e7, 8), 100e9, 1e-3);
  EXPECT_NEAR(BusBandwidth(hw.intra_node, Collective::kAllReduce, 1e9, 8), 160e9, 1e-3);
  EXPECT_NEAR(BusBandwidth(hw.intra_node, Collective::kAllReduce, 5e5, 8), 20e9, 1e-3);
  // Other collectives keep their constant.
  EXPECT_NEAR(BusBandwidth(hw.intra_node, Collective::kAllGather, 1e7, 8), 200e9, 1e-3);
  const GroupSpan node = SpanOf({0, 1, 2, 3, 4, 5, 6, 7}, 8);
  EXPECT_NEAR(CollectiveTime(hw, Collective::kAllReduce, 10000000, node, 8), 1e7 * 1.75 / 100e9,
              1e-12);
  // With a curve per group size the nearest in log scale wins: 2 ranks read the 2-rank curve, 6
  // the 8-rank one.
  hw.intra_node.busbw_curves.push_back(BusbwCurve{"all_reduce", 2, "test", {1e6}, {10}});
  hw.intra_node.busbw_curves.push_back(BusbwCurve{"all_reduce", 8, "test", {1e6}, {80}});
  EXPECT_NEAR(BusBandwidth(hw.intra_node, Collective::kAllReduce, 1e7, 2), 10e9, 1e-3);
  EXPECT_NEAR(BusBandwidth(hw.intra_node, Collective::kAllReduce, 1e7, 6), 80e9, 1e-3);
}

// Curves round-trip through the profile JSON; a bad one is refused naming its field.
TEST(Collectives, BusbwCurvesInTheProfileJson) {
  HardwareProfile hw = testing::RoundProfile();
  hw.inter_node.busbw_curves.push_back(
      BusbwCurve{"all_gather", 16, "test table", {1e6, 1e8}, {40, 160}});
  hw.inter_node.algorithm = kHierarchical;
  hw.inter_node.algorithm_source = "test";
  const Json j = Json::parse(HardwareProfileToJson(hw).dump());
  auto back = HardwareProfileFromJson(j, "p");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->inter_node.busbw_curves.size(), 1u);
  EXPECT_EQ(back->inter_node.busbw_curves[0].ranks, 16);
  EXPECT_EQ(back->inter_node.busbw_curves[0].busbw_GBps, (std::vector<double>{40, 160}));
  EXPECT_TRUE(back->intra_node.busbw_curves.empty());
  EXPECT_EQ(back->inter_node.algorithm, kHierarchical);
  auto refused = [&](const char* field, const Json& value, const char* message_part) {
    Json bad = j;
    bad["inter_node"]["busbw_curves"][0][field] = value;
    auto r = HardwareProfileFromJson(bad, "p");
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_NE(r.status().message().find(message_part), std::string::npos) << r.status().message();
  };
  refused("collective", "broadcast", "p.inter_node.busbw_curves[0].collective");
  refused("bytes", Json::array({1e8, 1e6}), "p.inter_node.busbw_curves[0].bytes");
  refused("busbw_GBps", Json::array({40, -1}), "p.inter_node.busbw_curves[0].busbw_GBps");
  refused("source", "", "p.inter_node.busbw_curves[0].source");
  Json bad = j;
  bad["inter_node"]["algorithm"]["value"] = "tree";
  auto r = HardwareProfileFromJson(bad, "p");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("p.inter_node.algorithm.value"), std::string::npos);
  bad = j;
  bad["intra_node"]["algorithm"] = j["inter_node"]["algorithm"];
  r = HardwareProfileFromJson(bad, "p");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("p.intra_node.algorithm"), std::string::npos);
}

}  // namespace
}  // namespace ptdp::costmodel
