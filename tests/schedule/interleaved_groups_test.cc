// Interleaved 1F1B for any m >= pp in Megatron-Core's order with microbatch groups of G: for
// multiples of pp above pp with G = pp the order is the one the generator gave before (a frozen
// copy below is the reference); every m takes the microbatches through the chunks by
// Megatron-Core's schedule table with its warm-up count, every Program over the grid pp <= 8, vp <=
// 4, pp <= m <= 4 pp validates (deadlock-free, messages in per-pair order), and a rank stashes (vp
// - 1)(G - pp) more microbatches than with groups of pp.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "schedule/schedule.h"

namespace ptdp::schedule {
namespace {

// The generator as it was when it accepted multiples of pp only (frozen, for the equality test):
// Megatron-LM's order, warm-up 2 (pp - r - 1) + (vp - 1) pp forwards (all of them when m == pp).
std::vector<Instr> MultipleOfPpOrder(int pp, int r, int vp, int64_t m) {
  const int64_t total = m * vp, group = int64_t(pp) * vp;
  auto at = [&](Op op, int64_t k) {
    Instr in;
    in.op = op;
    in.microbatch = static_cast<int32_t>((k / group) * pp + k % pp);
    const int c = static_cast<int>((k % group) / pp);
    in.chunk = op == Op::kForward ? c : vp - 1 - c;
    return in;
  };
  const int64_t warmup =
      m == pp ? total : std::min<int64_t>(total, 2 * int64_t(pp - r - 1) + int64_t(vp - 1) * pp);
  std::vector<Instr> out;
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back(at(Op::kForward, f));
  for (; f < total; ++f, ++b)
    out.push_back(at(Op::kForward, f)), out.push_back(at(Op::kBackward, b));
  for (; b < total; ++b) out.push_back(at(Op::kBackward, b));
  return out;
}

// Megatron-Core's schedule table: for each group of G microbatches (the last one smaller), each
// chunk, each microbatch of the group. Backwards take the same table with the chunks reversed.
std::vector<std::pair<int64_t, int>> GroupTable(int64_t group, int vp, int64_t m) {
  std::vector<std::pair<int64_t, int>> table;
  for (int64_t first = 0; first < m; first += group) {
    for (int c = 0; c < vp; ++c) {
      for (int64_t mb = first; mb < std::min<int64_t>(first + group, m); ++mb)
        table.push_back({mb, c});
    }
  }
  return table;
}

// m == pp is left out: the generator before ran every forward first there (Megatron-LM 2021's
// special case); Megatron-Core caps the warm-up at 2 (pp - r - 1) + (vp - 1) pp forwards instead,
// and so does the generator now (WarmUpIsMegatronCores below).
TEST(InterleavedGroups, MultiplesOfPpKeepThePreviousOrder) {
  int compared = 0;
  for (int pp = 2; pp <= 8; ++pp) {
    for (int vp = 2; vp <= 4; ++vp) {
      for (int64_t m = 2 * pp; m <= 4 * pp; m += pp) {
        ASSERT_EQ(DefaultMicrobatchGroup(m, pp), pp);
        auto p = GenerateSchedule(ScheduleKind::kInterleaved, pp, m, vp);
        ASSERT_TRUE(p.ok()) << p.status().ToString();
        for (int r = 0; r < pp; ++r) {
          const std::vector<Instr> want = MultipleOfPpOrder(pp, r, vp, m);
          ASSERT_EQ(p->ranks[r].instrs.size(), want.size());
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_EQ(InstrToText(p->ranks[r].instrs[i]), InstrToText(want[i]))
                << "pp " << pp << " vp " << vp << " m " << m << " rank " << r << " at " << i;
          }
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 3 * 3 * (2 + 3 + 4 + 5 + 6 + 7 + 8));
}

TEST(InterleavedGroups, EveryMFromPpToFourPpValidates) {
  int checked = 0, partial = 0;
  for (int pp = 2; pp <= 8; ++pp) {
    for (int vp = 2; vp <= 4; ++vp) {
      for (int64_t m = pp; m <= 4 * pp; ++m) {
        auto c = GenerateSchedule(ScheduleKind::kInterleaved, pp, m, vp);
        ASSERT_TRUE(c.ok()) << c.status().ToString();
        Status s = Validate(*c);
        ASSERT_TRUE(s.ok()) << "pp " << pp << " vp " << vp << " m " << m << ": " << s.ToString();
        for (bool recompute : {false, true}) {
          auto l = Lower(*c, 4096, recompute);
          ASSERT_TRUE(l.ok()) << l.status().ToString();
          s = Validate(*l);
          ASSERT_TRUE(s.ok()) << "pp " << pp << " vp " << vp << " m " << m << ": " << s.ToString()
                              << "\n"
                              << ScheduleDiagram(*l);
        }
        ++checked;
        partial += m % pp != 0;
      }
    }
  }
  EXPECT_EQ(checked, 336);  // the sum over pp = 2..8 of vp = 2..4 times 3 pp + 1 values of m
  EXPECT_GT(partial, 0);
}

// Every group size Megatron-Core accepts for m (pp <= G <= m, last group empty or >= pp).
std::vector<int64_t> MegatronGroups(int pp, int64_t m) {
  std::vector<int64_t> groups;
  for (int64_t g = pp; g <= m; ++g) {
    if (m % g == 0 || m % g >= pp) groups.push_back(g);
  }
  return groups;
}

// The group sizes the generator takes Megatron-Core's order for: Megatron-Core's, except that
// pp = 2 takes 2 only, and odd m with pp = 2 gets the padded order instead (none here).
std::vector<int64_t> AcceptedGroups(int pp, int64_t m) {
  if (pp == 2) return m % 2 == 0 ? std::vector<int64_t>{2} : std::vector<int64_t>{};
  return MegatronGroups(pp, m);
}

TEST(InterleavedGroups, DefaultGroupIsTheSmallestMegatronCoreAccepts) {
  EXPECT_EQ(DefaultMicrobatchGroup(8, 4), 4);
  EXPECT_EQ(DefaultMicrobatchGroup(5, 4), 5);  // 5 % 4 = 1 < 4: one group of 5
  EXPECT_EQ(DefaultMicrobatchGroup(9, 4), 5);  // groups of 4 leave 1; groups of 5 leave 4
  for (int pp = 2; pp <= 8; ++pp) {
    for (int64_t m = pp; m <= 4 * pp; ++m) {
      EXPECT_EQ(DefaultMicrobatchGroup(m, pp), MegatronGroups(pp, m).front())
          << "pp " << pp << " m " << m;
    }
  }
}

// Forwards and backwards follow Megatron-Core's schedule table for every accepted G, and a rank
// runs a warm-up of min(m vp, 2 (pp - r - 1) + (vp - 1) G) forwards.
TEST(InterleavedGroups, FollowsMegatronCoreTableAndWarmUp) {
  int checked = 0;
  for (int pp : {2, 3, 4, 5, 8}) {
    for (int vp : {2, 3, 4}) {
      for (int64_t m = pp; m <= 3 * pp; ++m) {
        for (int64_t g : AcceptedGroups(pp, m)) {
          auto p = GenerateSchedule(ScheduleKind::kInterleaved, pp, m, vp, g);
          ASSERT_TRUE(p.ok()) << p.status().ToString();
          const auto table = GroupTable(g, vp, m);
          for (int r = 0; r < pp; ++r) {
            std::vector<std::pair<int64_t, int>> forwards, backwards;
            int64_t warmup = -1;
            for (const Instr& in : p->ranks[r].instrs) {
              if (in.op == Op::kBackward && warmup < 0) warmup = int64_t(forwards.size());
              auto& list = in.op == Op::kForward ? forwards : backwards;
              list.push_back({in.microbatch, in.op == Op::kForward ? in.chunk : vp - 1 - in.chunk});
            }
            const std::string where = "pp " + std::to_string(pp) + " vp " + std::to_string(vp) +
                                      " m " + std::to_string(m) + " G " + std::to_string(g) +
                                      " rank " + std::to_string(r);
            EXPECT_EQ(forwards, table) << where;
            EXPECT_EQ(backwards, table) << where;
            // The warm-up, then the steady state's first forward, then the first backward.
            EXPECT_EQ(warmup, std::min<int64_t>(m * vp, 2 * (pp - r - 1) + (vp - 1) * g + 1))
                << where;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

// Megatron-Core's order stashes more than groups of pp would: the warm-up is (vp - 1)(G - pp)
// forwards longer, and the peak is the warm-up plus the steady state's one forward (all m vp
// when everything is warm-up). Counted from the compute order by the ledger's function.
TEST(InterleavedGroups, StashesVMinusOneTimesGMinusPMoreThanGroupsOfP) {
  int grown = 0;
  for (int pp = 2; pp <= 8; ++pp) {
    for (int vp = 2; vp <= 4; ++vp) {
      for (int64_t m = pp; m <= 4 * pp; ++m) {
        if (pp == 2 && m % 2 != 0) continue;  // the padded order
        const int64_t g = DefaultMicrobatchGroup(m, pp);
        auto p = GenerateSchedule(ScheduleKind::kInterleaved, pp, m, vp);
        ASSERT_TRUE(p.ok());
        const std::vector<int> peak = PeakStashedMicrobatches(*p);
        for (int r = 0; r < pp; ++r) {
          const int64_t with_p = 2 * (pp - r - 1) + (vp - 1) * pp + 1;
          const int64_t want = std::min<int64_t>(m * vp, with_p + (vp - 1) * (g - pp));
          EXPECT_EQ(peak[r], want) << "pp " << pp << " vp " << vp << " m " << m << " rank " << r;
          grown += want == with_p + (vp - 1) * (g - pp) && g > pp;
        }
      }
    }
  }
  EXPECT_GT(grown, 0);
}

TEST(InterleavedGroups, EveryAcceptedGroupValidates) {
  for (int pp : {2, 3, 4, 6}) {
    for (int vp : {2, 3, 4}) {
      for (int64_t m = pp; m <= 3 * pp; ++m) {
        for (int64_t g : AcceptedGroups(pp, m)) {
          auto c = GenerateSchedule(ScheduleKind::kInterleaved, pp, m, vp, g);
          ASSERT_TRUE(c.ok()) << c.status().ToString();
          for (bool recompute : {false, true}) {
            auto l = Lower(*c, 4096, recompute);
            ASSERT_TRUE(l.ok());
            Status s = Validate(*l);
            EXPECT_TRUE(s.ok()) << "pp " << pp << " vp " << vp << " m " << m << " G " << g << ": "
                                << s.ToString();
          }
        }
      }
    }
  }
}

// pp = 2 with odd m: the order for m + 1 (groups of 2) with the last microbatch dropped.
TEST(InterleavedGroups, PpTwoWithOddMIsTheNextEvenOrderLessItsLastMicrobatch) {
  for (int vp = 2; vp <= 4; ++vp) {
    for (int64_t m = 3; m <= 9; m += 2) {
      auto odd = GenerateSchedule(ScheduleKind::kInterleaved, 2, m, vp);
      auto even = GenerateSchedule(ScheduleKind::kInterleaved, 2, m + 1, vp);
      ASSERT_TRUE(odd.ok() && even.ok());
      for (int r = 0; r < 2; ++r) {
        std::vector<std::string> want, got;
        for (const Instr& in : even->ranks[r].instrs) {
          if (in.microbatch < m) want.push_back(InstrToText(in));
        }
        for (const Instr& in : odd->ranks[r].instrs) got.push_back(InstrToText(in));
        EXPECT_EQ(got, want) << "vp " << vp << " m " << m << " rank " << r;
      }
    }
  }
}

TEST(InterleavedGroups, RefusesGroupsMegatronCoreRefuses) {
  auto small_last = GenerateSchedule(ScheduleKind::kInterleaved, 4, 9, 2, 4);
  ASSERT_FALSE(small_last.ok());
  EXPECT_EQ(small_last.status().message(),
            "microbatch group: 9 microbatches in groups of 4 leave a last group of 1, fewer than "
            "pp = 4 (Megatron-Core refuses it); the smallest group size that fits is 5");
  EXPECT_FALSE(GenerateSchedule(ScheduleKind::kInterleaved, 4, 9, 2, 3).ok());
  EXPECT_FALSE(GenerateSchedule(ScheduleKind::kInterleaved, 4, 9, 2, 10).ok());
  EXPECT_FALSE(GenerateSchedule(ScheduleKind::k1F1B, 4, 9, 1, 4).ok());
  EXPECT_FALSE(GenerateSchedule(ScheduleKind::kInterleaved, 2, 6, 2, 3).ok());  // pp = 2: 2 only
}

TEST(InterleavedGroups, RefusesFewerMicrobatchesThanPp) {
  auto p = GenerateSchedule(ScheduleKind::kInterleaved, 4, 3, 2);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "microbatches: the interleaved schedule needs at least pp = 4 microbatches (as "
            "Megatron-Core), got 3");
}

}  // namespace
}  // namespace ptdp::schedule
