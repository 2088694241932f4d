// core/placement.h: tensor groups the plan keeps inside a node must land on one host.
#include "core/placement.h"

#include <gtest/gtest.h>

namespace ptdp {
namespace {

RankGrid Grid(int tp, int dp, int pp) {
  auto g = RankGrid::Create(tp, dp, pp);
  EXPECT_TRUE(g.ok());
  return *g;
}

TEST(Placement, BlocksOfConsecutiveRanksPerHostPass) {
  // t2 d2 p2 on two nodes of 4: ranks 0-3 on a, 4-7 on b, as ptdp launch places them.
  const std::vector<std::string> hosts = {"a", "a", "a", "a", "b", "b", "b", "b"};
  EXPECT_TRUE(CheckTensorGroupsOnOneHost(Grid(2, 2, 2), 4, hosts).ok());
}

TEST(Placement, RoundRobinSplitsTensorGroupsAndNamesThem) {
  // Round-robin (rank r on host r % 2) puts ranks 0 and 1 of the first tensor group apart.
  const std::vector<std::string> hosts = {"a", "b", "a", "b"};
  const Status st = CheckTensorGroupsOnOneHost(Grid(2, 2, 1), 2, hosts);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tensor group of ranks 0,1 spans hosts a, b"), std::string::npos)
      << st.message();
}

TEST(Placement, LaterGroupIsNamed) {
  // Only the second tensor group (ranks 2,3) is split.
  const std::vector<std::string> hosts = {"a", "a", "a", "b"};
  const Status st = CheckTensorGroupsOnOneHost(Grid(2, 1, 2), 2, hosts);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("ranks 2,3 spans hosts a, b"), std::string::npos) << st.message();
}

TEST(Placement, PlanThatSpreadsTensorGroupsIsAccepted) {
  // tp 4 over nodes of 2 GPUs: the plan itself puts each tensor group on two nodes.
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  EXPECT_TRUE(CheckTensorGroupsOnOneHost(Grid(4, 1, 1), 2, hosts).ok());
}

TEST(Placement, WrongHostCountIsAnError) {
  EXPECT_FALSE(CheckTensorGroupsOnOneHost(Grid(2, 1, 1), 2, {"a"}).ok());
}

TEST(Placement, DescribeHostsCountsRanksPerHost) {
  EXPECT_EQ(DescribeHosts({"b", "b", "a", "b"}), "b: 3, a: 1");
}

}  // namespace
}  // namespace ptdp
