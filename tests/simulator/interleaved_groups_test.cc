// The simulated bubble of interleaved 1F1B in Megatron-Core's order with microbatch groups of G
// (schedule/generators.cc): with equal costs (t_f and t_b per stage, split evenly over the vp
// chunks) and free communication, the pipeline time is m (t_f + t_b) + (p - 1)(t_f + t_b) / v, the
// bubble fraction (p - 1)/(v m) of Narayanan et al., for every m >= p and every group size
// Megatron-Core accepts, not only for multiples of p (pp = 2 with odd m aside: see below). Checked
// to the nanosecond.
#include <gtest/gtest.h>

#include <cstdio>

#include "schedule/schedule.h"
#include "simulator/simulator.h"

namespace ptdp::sim {
namespace {

Result<SimResult> SimulateInterleaved(int pp, int64_t m, int vp, int64_t group, Nanoseconds tf,
                                      Nanoseconds tb) {
  PTDP_ASSIGN_OR_RETURN(Program c,
                        schedule::GenerateSchedule(ScheduleKind::kInterleaved, pp, m, vp, group));
  PTDP_ASSIGN_OR_RETURN(Program l, schedule::Lower(c, 4096, false));
  return Simulate(l, UniformCosts(pp, vp, ToSeconds(tf / vp), ToSeconds(tb / vp)));
}

TEST(InterleavedGroups, BubbleIsPMinusOneOverVMForEveryAcceptedGroup) {
  const Nanoseconds tf = 1000 * 12, tb = 2000 * 12;  // per stage; divisible by every vp
  int cases = 0, partial = 0;
  for (int pp = 2; pp <= 8; ++pp) {
    for (int vp = 2; vp <= 4; ++vp) {
      for (int64_t m = pp; m <= 4 * pp; ++m) {
        for (int64_t g = pp; g <= m; ++g) {
          if (m % g != 0 && m % g < pp) continue;  // a group size Megatron-Core refuses
          if (pp == 2 && g > 2) continue;          // refused for pp = 2 (schedule.h)
          auto r = SimulateInterleaved(pp, m, vp, g, tf, tb);
          ASSERT_TRUE(r.ok()) << r.status().ToString();
          const Nanoseconds want = m * (tf + tb) + (pp - 1) * (tf + tb) / vp;
          EXPECT_EQ(r->pipeline_ns, want) << "p=" << pp << " v=" << vp << " m=" << m << " G=" << g;
          ++cases;
          partial += m % pp != 0;
        }
      }
    }
  }
  EXPECT_GT(cases, 336);
  EXPECT_GT(partial, 0);
}

// pp = 2 with odd m keeps the padded order (groups of 2, the last of 1; schedule.h): no closed
// form, but removing microbatch m from the m + 1 Program never lengthens its longest path, and the
// m - 1 Program is the m one less its last microbatch.
TEST(InterleavedGroups, PpTwoWithOddMLiesBetweenItsEvenNeighbours) {
  const Nanoseconds tf = 12000, tb = 24000;
  for (int vp = 2; vp <= 4; ++vp) {
    for (int64_t m = 3; m <= 7; m += 2) {
      auto odd = SimulateInterleaved(2, m, vp, 0, tf, tb);
      auto up = SimulateInterleaved(2, m + 1, vp, 0, tf, tb);
      auto down = SimulateInterleaved(2, m - 1, vp, 0, tf, tb);
      ASSERT_TRUE(odd.ok() && up.ok() && down.ok());
      EXPECT_LE(odd->pipeline_ns, up->pipeline_ns) << "v=" << vp << " m=" << m;
      EXPECT_GE(odd->pipeline_ns, down->pipeline_ns) << "v=" << vp << " m=" << m;
      std::printf("p=2 v=%d m=%lld: bubble %.4f ((p-1)/(v m) = %.4f)\n", vp,
                  static_cast<long long>(m), odd->bubble_fraction, 1.0 / double(vp * m));
    }
  }
}

// The example: p 4, v 2, m 5 runs in one group of 5 (G = 5) with bubble 3/10, where the
// order with groups of p and a last group of 1 (ptdp's order before) had 0.50.
TEST(InterleavedGroups, FourStagesTwoChunksFiveMicrobatches) {
  ASSERT_EQ(DefaultMicrobatchGroup(5, 4), 5);
  auto r = SimulateInterleaved(4, 5, 2, 0, 12000, 24000);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->bubble_fraction, 0.3);
}

}  // namespace
}  // namespace ptdp::sim
