// Interleaved 1F1B for any m >= pp (Megatron-Core's microbatch groups): the order for multiples of
// pp is the one the generator gave before (a frozen copy below is the reference), every other m
// goes through the chunks in groups of pp with a smaller last group, and every Program over the
// grid pp <= 8, vp <= 4, pp <= m <= 4 pp validates (deadlock-free, messages in per-pair order).
#include <gtest/gtest.h>

#include <algorithm>
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

// Megatron-Core's schedule table: for each group of pp microbatches (the last one smaller), each
// chunk, each microbatch of the group. Backwards take the same table with the chunks reversed.
std::vector<std::pair<int64_t, int>> GroupTable(int pp, int vp, int64_t m) {
  std::vector<std::pair<int64_t, int>> table;
  for (int64_t first = 0; first < m; first += pp) {
    for (int c = 0; c < vp; ++c) {
      for (int64_t mb = first; mb < std::min<int64_t>(first + pp, m); ++mb)
        table.push_back({mb, c});
    }
  }
  return table;
}

TEST(InterleavedGroups, MultiplesOfPpKeepThePreviousOrder) {
  int compared = 0;
  for (int pp = 2; pp <= 8; ++pp) {
    for (int vp = 2; vp <= 4; ++vp) {
      for (int64_t m = pp; m <= 4 * pp; m += pp) {
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
  EXPECT_EQ(compared, 4 * 3 * (2 + 3 + 4 + 5 + 6 + 7 + 8));
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

TEST(InterleavedGroups, FollowsMegatronCoreGroupTable) {
  for (int pp : {2, 3, 4, 5, 8}) {
    for (int vp : {2, 3, 4}) {
      for (int64_t m = pp + 1; m <= 3 * pp; ++m) {
        if (m % pp == 0) continue;
        auto p = GenerateSchedule(ScheduleKind::kInterleaved, pp, m, vp);
        ASSERT_TRUE(p.ok()) << p.status().ToString();
        const auto table = GroupTable(pp, vp, m);
        for (int r = 0; r < pp; ++r) {
          std::vector<std::pair<int64_t, int>> forwards, backwards;
          for (const Instr& in : p->ranks[r].instrs) {
            auto& list = in.op == Op::kForward ? forwards : backwards;
            list.push_back({in.microbatch, in.op == Op::kForward ? in.chunk : vp - 1 - in.chunk});
          }
          EXPECT_EQ(forwards, table) << "pp " << pp << " vp " << vp << " m " << m << " rank " << r;
          EXPECT_EQ(backwards, table) << "pp " << pp << " vp " << vp << " m " << m << " rank " << r;
        }
      }
    }
  }
}

// Dropping the padding microbatches only removes stashes: no rank holds more than it would with
// m rounded up to a multiple of pp.
TEST(InterleavedGroups, StashesNoMoreThanThePaddedSchedule) {
  for (int pp : {2, 3, 4, 8}) {
    for (int vp : {2, 3, 4}) {
      for (int64_t m = pp + 1; m <= 3 * pp; ++m) {
        const int64_t padded = (m + pp - 1) / pp * pp;
        auto a = GenerateSchedule(ScheduleKind::kInterleaved, pp, m, vp);
        auto b = GenerateSchedule(ScheduleKind::kInterleaved, pp, padded, vp);
        ASSERT_TRUE(a.ok() && b.ok());
        const std::vector<int> got = PeakStashedMicrobatches(*a), cap = PeakStashedMicrobatches(*b);
        for (int r = 0; r < pp; ++r) {
          EXPECT_LE(got[r], cap[r]) << "pp " << pp << " vp " << vp << " m " << m << " rank " << r;
        }
      }
    }
  }
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
