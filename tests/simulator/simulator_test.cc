// Exactness of the simulator against closed forms, with the derivations in the comments.
#include "simulator/simulator.h"

#include <gtest/gtest.h>

#include "schedule/schedule.h"
#include "simulator/network.h"

namespace ptdp::sim {
namespace {

Program Lowered(ScheduleKind kind, int pp, int64_t m, int vp, Bytes bytes = 0) {
  auto c = schedule::GenerateSchedule(kind, pp, m, vp);
  PTDP_CHECK(c.ok());
  auto l = schedule::Lower(*c, bytes, false);
  PTDP_CHECK(l.ok());
  return *l;
}

// With free communication and equal costs t_f, t_b per stage (t_f / v, t_b / v per chunk), the
// pipeline takes the ideal m (t_f + t_b) plus a bubble of (p-1)(t_f + t_b) for GPipe and 1F1B and
// (p-1)(t_f + t_b)/v for the interleaved schedule (Narayanan et al. 2021, section 2.2), so the
// measured bubble fraction is (p-1)/m and (p-1)/(v m). Times in whole nanoseconds: t_f = 1000 v ns,
// t_b = 2000 v ns per stage, so every chunk time is an integer. Interleaved with m % p != 0 runs
// Megatron-Core's microbatch groups, where the same form holds (interleaved_groups_test.cc).
TEST(Exactness, BubbleMatchesTheClosedFormToTheNanosecond) {
  int cases = 0;
  for (ScheduleKind kind :
       {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved}) {
    for (int pp : {1, 2, 3, 4, 8, 16}) {
      for (int64_t m : {1, 2, 4, 8, 12, 16, 32, 64}) {
        for (int vp : {1, 2, 3, 4}) {
          if (!schedule::CheckScheduleShape(kind, pp, m, vp).ok()) continue;
          const Nanoseconds tf = 1000 * 12, tb = 2000 * 12;  // per stage; divisible by every vp
          auto costs = UniformCosts(pp, vp, ToSeconds(tf / vp), ToSeconds(tb / vp));
          auto r = Simulate(Lowered(kind, pp, m, vp, 4096), costs);
          ASSERT_TRUE(r.ok()) << r.status().ToString();
          const Nanoseconds ideal = m * (tf + tb);
          const Nanoseconds bubble = (pp - 1) * (tf + tb) / vp;
          EXPECT_EQ(r->pipeline_ns, ideal + bubble)
              << ScheduleName(kind) << " p=" << pp << " m=" << m << " v=" << vp;
          EXPECT_EQ(r->ranks[0].compute_ns, ideal);
          EXPECT_DOUBLE_EQ(r->bubble_fraction, double(pp - 1) / double(vp * m));
          EXPECT_DOUBLE_EQ(r->bubble_fraction_of_total, double(bubble) / double(ideal + bubble));
          for (const RankStats& rs : r->ranks) EXPECT_EQ(rs.idle_ns, bubble);
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 80);
}

// Peak stash: GPipe keeps all m microbatches; 1F1B keeps p - r on rank r (m >= p); interleaved
// keeps its warm-up plus one: 2(p - r - 1) + (v - 1) p + 1 microbatch-chunks (m > p), each of
// stash 1/v of a stage's, i.e. (2(p-r-1) + (v-1)p + 1)/v stage-microbatches.
TEST(Exactness, PeakStashedMicrobatches) {
  const Bytes kStash = 1 << 20;
  for (int pp : {2, 4, 8}) {
    const int64_t m = 4 * pp;
    auto g =
        Simulate(Lowered(ScheduleKind::kGPipe, pp, m, 1), UniformCosts(pp, 1, 1e-6, 2e-6, kStash));
    ASSERT_TRUE(g.ok());
    for (int r = 0; r < pp; ++r) {
      EXPECT_EQ(g->ranks[r].peak_stashed, m);
    }
    auto f =
        Simulate(Lowered(ScheduleKind::k1F1B, pp, m, 1), UniformCosts(pp, 1, 1e-6, 2e-6, kStash));
    ASSERT_TRUE(f.ok());
    for (int r = 0; r < pp; ++r) EXPECT_EQ(f->ranks[r].peak_stashed, pp - r) << "rank " << r;
    for (int vp : {2, 4}) {
      auto i = Simulate(Lowered(ScheduleKind::kInterleaved, pp, m, vp),
                        UniformCosts(pp, vp, 1e-6, 2e-6, kStash / vp));
      ASSERT_TRUE(i.ok());
      for (int r = 0; r < pp; ++r) {
        const int want = 2 * (pp - r - 1) + (vp - 1) * pp + 1;
        EXPECT_EQ(i->ranks[r].peak_stashed, want) << "p=" << pp << " v=" << vp << " rank " << r;
      }
    }
  }
}

// Ring all-reduce: 2(n-1) steps, each moving S/n over a link of bandwidth B after latency alpha:
// 2(n-1)/n * S/B + 2(n-1) alpha. S = 1.2e9 bytes, B = 1.2e11 B/s (so S/B = 10 ms exactly).
TEST(Exactness, RingAllReduceOnAModelledLink) {
  for (int n : {2, 3, 4, 8, 16}) {
    const double S = 1.2e9, B = 1.2e11;
    const Nanoseconds alpha = 5000;
    const Nanoseconds got = SimulateRingAllReduce(n, S * n / n, B, alpha);
    const double want = 2.0 * (n - 1) / n * S / B * 1e9 + 2.0 * (n - 1) * alpha;
    // Each step's end is rounded up to a whole nanosecond: at most 1 ns per step.
    EXPECT_NEAR(double(got), want, 2.0 * (n - 1)) << "n=" << n;
  }
  EXPECT_EQ(SimulateRingAllReduce(1, 1e9, 1e9, 100), 0);
}

// A flow whose end lies beyond the integer clock (1e300 bytes at 1 kB/s: 1e306 ns) is an internal
// error naming the flow, not an undefined double-to-int64 cast (UBSan's float-cast-overflow).
TEST(Network, EndBeyondTheClockIsAnInternalError) {
  try {
    SimulateRingAllReduce(2, 1e300, 1e3, 0);
    ADD_FAILURE() << "no error";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("beyond the simulator's clock"), std::string::npos)
        << e.what();
  }
}

// Two simultaneous transfers through one port share it: each takes twice as long.
TEST(Network, SharedPortSlowsBothTransfers) {
  EventQueue q;
  Network net(3, 0);
  net.StartFlow(q, 0, 1, 1e9, 1000, 7);  // 1000 B at 1 B/ns: alone 1000 ns
  net.StartFlow(q, 0, 2, 1e9, 1000, 8);  // same egress port 0
  std::vector<std::pair<Nanoseconds, int64_t>> done;
  while (!q.Empty()) {
    Event e = q.Pop();
    if (net.OnFlowEvent(q, e.a, e.b)) done.push_back({q.now(), net.Tag(static_cast<int>(e.a))});
  }
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].first, 2000);
  EXPECT_EQ(done[1].first, 2000);
  // Staggered: the second starts at 500 ns; the first has 500 B left, at half rate 1000 ns more,
  // so it ends at 1500; the second then has 1000 - 500 = 500 B left at full rate: ends at 2000.
  EventQueue q2;
  Network n2(3, 0);
  n2.StartFlow(q2, 0, 1, 1e9, 1000, 1);
  q2.Schedule(500, Priority::kCompute, 99, 0);
  std::vector<Nanoseconds> ends;
  while (!q2.Empty()) {
    Event e = q2.Pop();
    if (e.kind == 99) {
      n2.StartFlow(q2, 0, 2, 1e9, 1000, 2);
    } else if (n2.OnFlowEvent(q2, e.a, e.b)) {
      ends.push_back(q2.now());
    }
  }
  ASSERT_EQ(ends.size(), 2u);
  EXPECT_EQ(ends[0], 1500);
  EXPECT_EQ(ends[1], 2000);
}

TEST(Engine, TiesBreakByPriorityThenInsertion) {
  EventQueue q;
  q.Schedule(10, Priority::kCompute, 1, 0);
  q.Schedule(10, Priority::kArrival, 2, 0);
  q.Schedule(5, Priority::kCompute, 3, 0);
  q.Schedule(10, Priority::kArrival, 4, 0);
  std::vector<uint32_t> order;
  while (!q.Empty()) order.push_back(q.Pop().kind);
  EXPECT_EQ(order, (std::vector<uint32_t>{3, 2, 4, 1}));
  EXPECT_EQ(q.now(), 10);
  EXPECT_EQ(q.processed(), 4);
  EXPECT_THROW(q.Schedule(9, Priority::kCompute, 0, 0), InternalError);
}

// Point-to-point time on the critical path: a 2-stage pipeline, one microbatch, with a link of
// latency 1 us and 1 GB/s and messages of 1000 bytes (1 us each): F0 (1 us) -> act (2 us) ->
// F0, B0 on rank 1 (1 + 2 us) -> grad (2 us) -> B0 on rank 0 (2 us) = 10 us.
TEST(Simulate, PointToPointOnTheCriticalPath) {
  auto costs = UniformCosts(2, 1, 1e-6, 2e-6);
  costs.p2p_link.assign(2, costmodel::LinkCost{1e-6, 1e9, true});
  auto r = Simulate(Lowered(ScheduleKind::k1F1B, 2, 1, 1, 1000), costs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->pipeline_ns, 10000);
  EXPECT_EQ(r->ranks[1].p2p_ns, 2000);
  EXPECT_EQ(r->ranks[0].p2p_ns, 2000);
  // All-reduce after the flush and optimizer: rank 0 ends at 10 + 3 + 0.5 us.
  costs.dp_allreduce = {3e-6, 1e-6};
  costs.optimizer = {0.5e-6, 0.5e-6};
  auto s = Simulate(Lowered(ScheduleKind::k1F1B, 2, 1, 1, 1000), costs);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->iteration_ns, 13500);
  EXPECT_EQ(s->ranks[0].allreduce_ns, 3000);
}

// Overlap: with the all-reduce in buckets during the last backward, what remains after the flush
// is at most the last bucket.
TEST(Simulate, OverlappedAllReduceHidesBuckets) {
  auto costs = UniformCosts(1, 1, 1e-6, 4e-6);
  costs.dp_allreduce = {4e-6};
  costs.dp_buckets = 4;
  Program p = Lowered(ScheduleKind::k1F1B, 1, 2, 1);
  auto plain = Simulate(p, costs);
  SimOptions o;
  o.overlap_dp_allreduce = true;
  auto over = Simulate(p, costs, o);
  ASSERT_TRUE(plain.ok() && over.ok());
  EXPECT_EQ(plain->iteration_ns, 10000 + 4000);
  // Last backward runs 6..10 us; bucket b ready at 7, 8, 9, 10 us, 1 us each: last ends at 11 us.
  EXPECT_EQ(over->iteration_ns, 11000);
}

// A data-parallel collective shares its rank's NIC with the pipeline messages that cross it.
// 1F1B on 2 ranks, 1 microbatch, 1000-byte messages on an inter-node link of 1 GB/s (1 us alone):
// rank 1's backward ends at 5 us; its gradient send and its all-reduce (2000 NIC bytes at 1 GB/s,
// 2 us alone) then share its NIC, each at half rate: the gradient arrives at 7 us instead of 6
// (rank 0's backward ends at 9 us instead of 8) and the all-reduce ends at 8 us instead of 7. With
// the same all-reduce on NVLink only (intra-node phases, no NIC bytes) nothing is shared. Overlap
// or not, the all-reduce starts at 5 us here (one bucket, ready when the backward ends).
TEST(Simulate, DataParallelCollectiveSharesTheNic) {
  auto costs = UniformCosts(2, 1, 1e-6, 2e-6);
  costs.p2p_link.assign(2, costmodel::LinkCost{0, 1e9, true});
  costs.dp_allreduce = {0, 2e-6};
  costs.dp_collectives = {{}, {costmodel::CollectiveCost{0, 0, 2000, 1e9}}};
  const Program p = Lowered(ScheduleKind::k1F1B, 2, 1, 1, 1000);
  for (bool overlap : {false, true}) {
    SimOptions o;
    o.overlap_dp_allreduce = overlap;
    auto shared = Simulate(p, costs, o);
    ASSERT_TRUE(shared.ok()) << shared.status().ToString();
    if (overlap) {
      // Rank 1's bucket leaves at its backward's end beside its gradient send: both at half rate.
      EXPECT_EQ(shared->pipeline_ns, 9000);
      EXPECT_EQ(shared->ranks[0].p2p_ns, 2000);
      EXPECT_EQ(shared->ranks[1].allreduce_ns, 3000);
    } else {
      // Not overlapped, rank 1 reduces once its send has arrived (at 6000): nothing shares.
      EXPECT_EQ(shared->pipeline_ns, 8000);
      EXPECT_EQ(shared->ranks[0].p2p_ns, 1000);
      EXPECT_EQ(shared->ranks[1].allreduce_ns, 2000);
    }
  }
  costs.dp_collectives = {{}, {costmodel::CollectiveCost{0, 2e-6, 0, 0}}};
  auto alone = Simulate(p, costs);
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->pipeline_ns, 8000);
  EXPECT_EQ(alone->ranks[1].allreduce_ns, 2000);
  // A table whose collectives do not match its ranks, or with NIC bytes and no NIC, is refused.
  costs.dp_collectives.pop_back();
  EXPECT_FALSE(Simulate(p, costs).ok());
  costs.dp_collectives = {{}, {costmodel::CollectiveCost{0, 0, 2000, 0}}};
  auto no_nic = Simulate(p, costs);
  ASSERT_FALSE(no_nic.ok());
  EXPECT_NE(no_nic.status().message().find("no NIC bandwidth"), std::string::npos);
}

TEST(Simulate, RejectsMismatchedCosts) {
  auto r = Simulate(Lowered(ScheduleKind::k1F1B, 2, 2, 1), UniformCosts(4, 1, 1e-6, 1e-6));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("pp=4"), std::string::npos);
  auto costs = UniformCosts(2, 1, 1e-6, 1e-6);
  costs.p2p_link.assign(2, costmodel::LinkCost{0, 0, false});
  auto s = Simulate(Lowered(ScheduleKind::k1F1B, 2, 2, 1, 100), costs);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("p2p_link[0]"), std::string::npos) << s.status().message();
}

TEST(Simulate, IdealCostsEqualiseStagesAndFreeCommunication) {
  costmodel::CostTable c = UniformCosts(2, 1, 1e-6, 2e-6);
  c.chunks[1].forward.gemm = 3e-6;  // unequal stages
  c.p2p_link.assign(2, costmodel::LinkCost{1e-6, 1e9, true});
  c.dp_allreduce = {1e-3, 1e-3};
  auto ideal = IdealCosts(c);
  EXPECT_DOUBLE_EQ(ideal.chunks[0].ForwardTime(), 2e-6);
  EXPECT_DOUBLE_EQ(ideal.chunks[1].ForwardTime(), 2e-6);
  EXPECT_EQ(ideal.dp_allreduce[0], 0);
  auto r = Simulate(Lowered(ScheduleKind::k1F1B, 2, 4, 1, 1000), ideal);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->bubble_fraction, 1.0 / 4);
}

TEST(Simulate, Deterministic) {
  auto costs = UniformCosts(4, 2, 1.1e-6, 2.3e-6, 1000);
  costs.p2p_link.assign(4, costmodel::LinkCost{2e-6, 3e9, true});
  Program p = Lowered(ScheduleKind::kInterleaved, 4, 8, 2, 5000);
  SimOptions o;
  o.record_timeline = true;
  auto a = Simulate(p, costs, o), b = Simulate(p, costs, o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->iteration_ns, b->iteration_ns);
  ASSERT_EQ(a->timeline.events.size(), b->timeline.events.size());
  for (size_t i = 0; i < a->timeline.events.size(); ++i) {
    EXPECT_EQ(a->timeline.events[i].start_ns, b->timeline.events[i].start_ns);
  }
}

}  // namespace
}  // namespace ptdp::sim

namespace ptdp::sim {
namespace {

TEST(Simulate, UnvalidatedProgramsFailCleanly) {
  Program p = Lowered(ScheduleKind::k1F1B, 2, 2, 1, 100);
  p.ranks[1].instrs[0].microbatch = 7;  // RA7: out of range
  auto r = Simulate(p, UniformCosts(2, 1, 1e-6, 1e-6));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rank 1, instruction 0 (RA7<0:100)"), std::string::npos)
      << r.status().message();
  // A deadlocking order that Validate() rejects: the simulator reports the stuck rank.
  auto q = ProgramFromText(
      "program kind=1f1b pp=2 vp=1 microbatches=2\n"
      "rank 0: F0 SA0>1:100 RG0<1:100 B0 F1 SA1>1:100 RG1<1:100 B1 AR OPT\n"
      "rank 1: RA0<0:100 F0 RA1<0:100 F1 B0 SG0>0:100 B1 SG1>0:100 AR OPT\n");
  ASSERT_TRUE(q.ok());
  auto s = Simulate(*q, UniformCosts(2, 1, 1e-6, 1e-6));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("blocked forever"), std::string::npos)
      << s.status().message();
}

}  // namespace
}  // namespace ptdp::sim
