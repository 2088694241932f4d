// Bus-bandwidth factors against hand derivations (nccl-tests doc/PERFORMANCE.md):
// a ring all-reduce of S bytes over n ranks sends 2 (n-1) chunks of S/n from each rank (n-1 steps
// of reduce-scatter, n-1 of all-gather), so each link carries 2 (n-1)/n S; an all-gather or a
// reduce-scatter is one of those halves, (n-1)/n S; a send/recv carries S.
#include <gtest/gtest.h>

#include "profiler/bus_bandwidth.h"

namespace ptdp::profiler {
namespace {

// Bytes one rank sends in a ring algorithm, counted chunk by chunk.
double RingBytesPerRank(Collective c, int n, double size) {
  const double chunk = size / n;
  double sent = 0;
  if (c == Collective::kAllReduce || c == Collective::kReduceScatter) {
    for (int step = 0; step < n - 1; ++step) sent += chunk;
  }
  if (c == Collective::kAllReduce || c == Collective::kAllGather) {
    for (int step = 0; step < n - 1; ++step) sent += chunk;
  }
  if (c == Collective::kSendRecv) sent = size;
  return sent;
}

TEST(BusBandwidthTest, FactorsMatchRingTrafficPerRank) {
  const double size = 1 << 20;
  for (int n : {2, 3, 4, 8, 16}) {
    for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                         Collective::kSendRecv}) {
      EXPECT_DOUBLE_EQ(BusBandwidthFactor(c, n), RingBytesPerRank(c, n, size) / size)
          << CollectiveName(c) << " n=" << n;
    }
  }
}

TEST(BusBandwidthTest, HandComputedValues) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kReduceScatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kSendRecv, 2), 1.0);
  // One rank moves nothing.
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Collective::kAllReduce, 1), 0.0);
  // 1 GB in 0.5 s: algbw 2 GB/s; all-reduce over 8 ranks: busbw 3.5 GB/s.
  EXPECT_DOUBLE_EQ(AlgorithmBandwidth(1000000000, 0.5), 2e9);
  EXPECT_DOUBLE_EQ(BusBandwidth(Collective::kAllReduce, 8, 1000000000, 0.5), 3.5e9);
}

TEST(BusBandwidthTest, Names) {
  EXPECT_STREQ(CollectiveName(Collective::kAllReduce), "all_reduce");
  EXPECT_STREQ(CollectiveName(Collective::kSendRecv), "send_recv");
}

}  // namespace
}  // namespace ptdp::profiler
