// Blends and splits of the training data (runtime/data/token_set.h).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/data/token_set.h"

namespace ptdp::runtime {
namespace {

std::string Tmp(const std::string& name) {
  return ::testing::TempDir() + name;
}

// A token file whose token i is first + i: a read tells where it started and which file it is.
std::string PositionFile(const std::string& name, uint32_t first, int64_t count) {
  std::vector<uint32_t> t(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) t[static_cast<size_t>(i)] = first + uint32_t(i);
  const std::string path = Tmp(name);
  EXPECT_TRUE(WriteTokenFile(path, t).ok());
  return path;
}

TEST(DataSplit, ParsesAndNormalisesAsMegatron) {
  auto s = ParseSplit("969,30,1");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_DOUBLE_EQ(s->share[0], 0.969);
  EXPECT_DOUBLE_EQ(s->share[1], 0.030);
  EXPECT_DOUBLE_EQ(s->share[2], 0.001);
  auto slash = ParseSplit("8/1/1");
  ASSERT_TRUE(slash.ok());
  EXPECT_DOUBLE_EQ(slash->share[1], 0.1);
  auto padded = ParseSplit("90, 10");  // fewer than three: the rest 0
  ASSERT_TRUE(padded.ok());
  EXPECT_DOUBLE_EQ(padded->share[0], 0.9);
  EXPECT_DOUBLE_EQ(padded->share[2], 0.0);
  for (const char* bad : {"", "1,2,3,4", "90,,10", "x", "-1,2,0", "0,0,0", "nan,1,1", "inf,1,1"}) {
    auto r = ParseSplit(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--split: '" + std::string(bad) + "'"), std::string::npos)
        << r.status().ToString();
  }
}

TEST(DataBlend, ParsesWeightsAndFiles) {
  auto one = ParseBlend({"a.bin"}, "--data");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->paths, std::vector<std::string>{"a.bin"});
  EXPECT_EQ(one->weights, std::vector<double>{1.0});
  auto two = ParseBlend({"3", "a.bin", "1", "b.bin"}, "--data");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->paths, (std::vector<std::string>{"a.bin", "b.bin"}));
  EXPECT_DOUBLE_EQ(two->weights[0], 0.75);
  EXPECT_DOUBLE_EQ(two->weights[1], 0.25);
  struct Case {
    std::vector<std::string> words;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{}, "--eval-data: 0 words"},
           {{"0.5", "a.bin", "b.bin"}, "--eval-data: 3 words"},
           {{"half", "a.bin", "1", "b.bin"}, "--eval-data: 'half' is not a weight"},
           {{"0", "a.bin", "1", "b.bin"}, "the weight of 'a.bin' is 0, not a positive number"},
           {{"1", "a.bin", "-2", "b.bin"}, "the weight of 'b.bin' is -2"},
           {{"1", "a.bin", "inf", "b.bin"}, "the weight of 'b.bin' is inf"}}) {
    auto r = ParseBlend(c.words, "--eval-data");
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().ToString();
  }
}

// The order itself, sample by sample: each file stays close to its share in every prefix, and
// the answer for a sample does not depend on the window or on what was asked before.
TEST(BlendOrder, EveryPrefixHoldsEachFileNearItsShare) {
  for (const std::vector<double>& w : std::vector<std::vector<double>>{
           {0.3, 0.7}, {0.5, 0.25, 0.25}, {0.9, 0.1}, {0.01, 0.99}, {0.123, 0.456, 0.421}}) {
    BlendOrder order(w, 16);
    std::vector<int64_t> count(w.size(), 0);
    double worst = 0;
    for (int64_t n = 1; n <= 5000; ++n) {
      const int f = order.Source(n - 1);
      ASSERT_GE(f, 0);
      ASSERT_LT(f, int(w.size()));
      ++count[static_cast<size_t>(f)];
      for (size_t k = 0; k < w.size(); ++k) {
        worst = std::max(worst, std::fabs(double(count[k]) - w[k] * double(n)));
      }
    }
    EXPECT_LE(worst, 2.0) << "weights " << w[0] << ", " << w[1];
  }
  // The first sample goes to the heaviest file (the greedy's first choice).
  EXPECT_EQ(BlendOrder({0.2, 0.5, 0.3}, 4).Source(0), 1);
}

TEST(BlendOrder, AnySampleInAnyOrderAndWindowGivesTheSameFile) {
  const std::vector<double> w{0.2, 0.5, 0.3};
  BlendOrder sequential(w, 1);
  std::vector<int> ref;
  for (int64_t g = 0; g < 3000; ++g) ref.push_back(sequential.Source(g));
  for (int64_t window : {7, 64, 1000}) {
    BlendOrder jumpy(w, window);
    for (int64_t g : {2999, 3, 1500, 1499, 0, 2047, 64, 63}) {
      EXPECT_EQ(jumpy.Source(g), ref[static_cast<size_t>(g)])
          << "sample " << g << " window " << window;
    }
  }
}

// One whole file reads exactly what a bare token file gave before blends (SequenceStart).
TEST(TokenSet, OneWholeFileIsTheTokenFilesStream) {
  const std::string path = PositionFile("ts_one.bin", 0, 5000);
  auto spec = ParseBlend({path}, "--data");
  ASSERT_TRUE(spec.ok());
  auto files = TokenSet::OpenFiles(*spec, 0, "--data");
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  auto set = TokenSet::Cut(*spec, *files, DataSplit{}, SplitPart::kTrain, 32, 8, "--data");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  std::vector<int32_t> seq(33);
  for (int64_t step = 1; step <= 5; ++step) {
    for (int64_t i = 0; i < 8; ++i) {
      ASSERT_TRUE(set->ReadSequence(1234, step, i, 32, seq.data()).ok());
      EXPECT_EQ(seq[0], SequenceStart(1234, step - 1, 8, i, 5000, 32));
    }
  }
  EXPECT_EQ(set->tokens(), 5000);
}

// Every sequence of a part lies inside that part of its file, and comes from the file the order
// gives its sample.
TEST(TokenSet, ReadsEachPartInsideItsBoundsFromTheBlendsFile) {
  const int64_t na = 4000, nb = 9000, s = 16, batch = 8;
  const std::string a = PositionFile("ts_a.bin", 0, na), b = PositionFile("ts_b.bin", 20000, nb);
  auto spec = ParseBlend({"0.3", a, "0.7", b}, "--data");
  ASSERT_TRUE(spec.ok());
  auto files = TokenSet::OpenFiles(*spec, 0, "--data");
  ASSERT_TRUE(files.ok());
  auto split = ParseSplit("90,6,4");
  ASSERT_TRUE(split.ok());
  const double lo[3] = {0.0, 0.9, 0.96}, hi[3] = {0.9, 0.96, 1.0};
  for (SplitPart part : {SplitPart::kTrain, SplitPart::kValid, SplitPart::kTest}) {
    const int k = static_cast<int>(part);
    auto set = TokenSet::Cut(*spec, *files, *split, part, s, batch, "--data");
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    BlendOrder order(spec->weights, batch);
    std::vector<int32_t> seq(static_cast<size_t>(s + 1));
    for (int64_t step = 1; step <= 40; ++step) {
      for (int64_t i = 0; i < batch; ++i) {
        ASSERT_TRUE(set->ReadSequence(7, step, i, s, seq.data()).ok());
        const bool from_b = seq[0] >= 20000;
        EXPECT_EQ(from_b ? 1 : 0, order.Source((step - 1) * batch + i));
        const int64_t n = from_b ? nb : na, first = seq[0] - (from_b ? 20000 : 0);
        EXPECT_GE(first, std::llround(lo[k] * double(n))) << SplitPartName(part);
        EXPECT_LE(first + s + 1, std::llround(hi[k] * double(n))) << SplitPartName(part);
        EXPECT_EQ(seq[static_cast<size_t>(s)], seq[0] + s);  // consecutive tokens of one file
      }
    }
  }
}

TEST(TokenSet, RefusesAPartShorterThanASequenceNamingTheSplit) {
  const std::string a = PositionFile("ts_short.bin", 0, 1000);
  auto spec = ParseBlend({a}, "--data");
  auto files = TokenSet::OpenFiles(*spec, 0, "--data");
  ASSERT_TRUE(files.ok());
  auto split = ParseSplit("99,1");  // a validation part of 10 tokens
  ASSERT_TRUE(split.ok());
  auto set = TokenSet::Cut(*spec, *files, *split, SplitPart::kValid, 16, 4, "--data");
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("--split 99,1: the validation part of --data '" + a +
                                        "' has 10 tokens, fewer than seq_len + 2 = 18"),
            std::string::npos)
      << set.status().ToString();
  auto whole = TokenSet::Cut(*spec, *files, DataSplit{}, SplitPart::kTrain, 999, 4, "--data");
  ASSERT_FALSE(whole.ok());
  EXPECT_NE(whole.status().message().find("--data: '" + a + "' has 1000 tokens"), std::string::npos)
      << whole.status().ToString();
}

}  // namespace
}  // namespace ptdp::runtime
