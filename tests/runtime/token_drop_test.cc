// Token dropping's choice (runtime/model/moe_route.h) on sequences worked out by hand: which
// copies each expert keeps by probability and by position, the padding to capacity, and a
// capacity over the sequence's tokens (nothing dropped; padded, every token to every expert).
#include "runtime/model/moe_route.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "core/experts.h"

namespace ptdp::runtime {
namespace {

using Lists = std::vector<std::vector<TokenCopy>>;

// Six tokens, top 2 of 4 experts: token n's choices are slots 2n and 2n + 1.
//   token 0: e0 .6  e1 .4     token 3: e1 .9  e3 .1
//   token 1: e0 .7  e2 .3     token 4: e0 .8  e3 .2
//   token 2: e0 .55 e1 .45    token 5: e2 .5  e3 .5
// Rows 10 to 15 of a microbatch (the sequence's first row is 10).
constexpr int32_t kFirst = 10, kPadSlot = 99;
const std::vector<int> kExpertOfSlot = {0, 1, 0, 2, 0, 1, 1, 3, 0, 3, 2, 3};
const std::vector<double> kProb = {.6, .4, .7, .3, .55, .45, .9, .1, .8, .2, .5, .5};

Lists Routed() {
  Lists of(4);
  for (int slot = 0; slot < 12; ++slot) {
    of[size_t(kExpertOfSlot[size_t(slot)])].push_back({kFirst + slot / 2, slot});
  }
  return of;
}

LayerArch Arch(double factor, bool by_position, bool pad) {
  LayerArch a;
  a.moe_experts = 4;
  a.moe_topk = 2;
  a.moe_capacity_factor = factor;
  a.moe_drop_by_position = by_position;
  a.moe_pad_to_capacity = pad;
  return a;
}

// Each expert's kept tokens (offsets from kFirst), -1 before a padding copy's token.
std::vector<std::vector<int>> Tokens(const Lists& of) {
  std::vector<std::vector<int>> out;
  for (const auto& list : of) {
    out.emplace_back();
    for (const TokenCopy& x : list) {
      if (x.slot == kPadSlot) out.back().push_back(-1);
      out.back().push_back(x.token - kFirst);
      if (x.slot != kPadSlot) {
        EXPECT_EQ(x.token, kFirst + x.slot / 2);  // its own choice
      }
    }
  }
  return out;
}

TEST(TokenDrop, CapacityIsMegatronCoresGetCapacity) {
  EXPECT_EQ(ExpertCapacity(6, 2, 4, 0.5), 2);  // ceil(1.5)
  EXPECT_EQ(ExpertCapacity(6, 2, 4, 1.0), 3);  // 12 / 4 exactly
  EXPECT_EQ(ExpertCapacity(4096, 8, 128, 1.0), 256);
  EXPECT_EQ(ExpertCapacity(7, 1, 3, 1.25), 3);  // ceil(2.917)
}

// Capacity 2 (factor 0.5): expert 0's four are cut to its two most probable (tokens 4, 1), or to
// its first two (0, 1); expert 1's three to (3, 2) or (0, 2); expert 3's three to (5, 4) or (3, 4).
TEST(TokenDrop, KeepsTheHighestProbabilitiesOrTheFirstTokens) {
  Lists by_prob = Routed();
  DropInSequence(Arch(0.5, false, false), 6, kFirst, kProb, kPadSlot, &by_prob);
  EXPECT_EQ(Tokens(by_prob), (std::vector<std::vector<int>>{{1, 4}, {2, 3}, {1, 5}, {4, 5}}));
  Lists by_position = Routed();
  DropInSequence(Arch(0.5, true, false), 6, kFirst, kProb, kPadSlot, &by_position);
  EXPECT_EQ(Tokens(by_position), (std::vector<std::vector<int>>{{0, 1}, {0, 2}, {1, 5}, {3, 4}}));
}

// Capacity 3 (factor 1) padded: expert 0 keeps tokens 0, 1, 4 (its three most probable); expert 2
// has two and gets a copy of token 0, the first not routed to it, of probability 0.
TEST(TokenDrop, PadsEachExpertToItsCapacity) {
  Lists of = Routed();
  DropInSequence(Arch(1.0, false, true), 6, kFirst, kProb, kPadSlot, &of);
  EXPECT_EQ(Tokens(of),
            (std::vector<std::vector<int>>{{0, 1, 4}, {0, 2, 3}, {-1, 0, 1, 5}, {3, 4, 5}}));
  Lists unpadded = Routed();
  DropInSequence(Arch(1.0, false, false), 6, kFirst, kProb, kPadSlot, &unpadded);
  EXPECT_EQ(Tokens(unpadded),
            (std::vector<std::vector<int>>{{0, 1, 4}, {0, 2, 3}, {1, 5}, {3, 4, 5}}));
}

// Capacity 9 over 6 tokens (factor 3): nothing dropped; padded, every expert runs every token.
TEST(TokenDrop, ACapacityOverTheTokensDropsNothing) {
  Lists of = Routed();
  DropInSequence(Arch(3.0, false, false), 6, kFirst, kProb, kPadSlot, &of);
  EXPECT_EQ(Tokens(of), Tokens(Routed()));
  Lists padded = Routed();
  DropInSequence(Arch(3.0, true, true), 6, kFirst, kProb, kPadSlot, &padded);
  for (const auto& list : padded) EXPECT_EQ(list.size(), 6u);
  EXPECT_EQ(Tokens(padded)[2], (std::vector<int>{-1, 0, 1, -1, 2, -1, 3, -1, 4, 5}));
}

// Equal probabilities: the earlier tokens stay.
TEST(TokenDrop, EqualProbabilitiesKeepTheEarlierTokens) {
  LayerArch a = Arch(0.5, false, false);
  a.moe_experts = a.moe_topk = 1;  // capacity ceil(3 / 1 * 0.5) = 2 of 3
  Lists of = {{{0, 0}, {1, 1}, {2, 2}}};
  DropInSequence(a, 3, 0, {0.5, 0.5, 0.5}, 3, &of);
  ASSERT_EQ(of[0].size(), 2u);
  EXPECT_EQ(of[0][0].token, 0);
  EXPECT_EQ(of[0][1].token, 1);
}

}  // namespace
}  // namespace ptdp::runtime
