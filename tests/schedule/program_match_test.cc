// Validate()'s pair-order check (NCCL delivers a pair's messages in order, whatever their tags)
// and CheckProgramMatchesLayout(): a plan's Program is accepted only if it is the one its layout
// gives.
#include <gtest/gtest.h>

#include "core/ledger.h"
#include "core/shapes.h"
#include "schedule/schedule.h"

namespace ptdp::schedule {
namespace {

Program FromText(const std::string& text) {
  auto p = ProgramFromText(text);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}

bool Has(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

TEST(ValidatePairOrder, CrossedMessagesBetweenOnePairAreRejected) {
  // Rank 1 receives microbatch 1 before microbatch 0 while rank 0 sends 0 first: every send has
  // its receive (tag matching would deliver the right payloads, and nothing deadlocks), but in
  // order of arrival rank 1 would take microbatch 0's activation for microbatch 1's.
  const std::string head = "program kind=gpipe pp=2 vp=1 microbatches=2\n";
  const std::string rank0 = "rank 0: F0 SA0>1:100 F1 SA1>1:100 RG0<1:100 B0 RG1<1:100 B1 AR OPT\n";
  Program ok = FromText(head + rank0 +
                        "rank 1: RA0<0:100 RA1<0:100 F0 F1 B0 SG0>0:100 B1 SG1>0:100 AR OPT\n");
  EXPECT_TRUE(Validate(ok).ok()) << Validate(ok).ToString();
  Program crossed = FromText(
      head + rank0 + "rank 1: RA1<0:100 RA0<0:100 F0 F1 B0 SG0>0:100 B1 SG1>0:100 AR OPT\n");
  Status s = Validate(crossed);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s,
                  "rank 1, instruction 0 (RA1<0:100): receive number 1 from rank 0, but rank "
                  "0's send number 1 to rank 1 is SA0>1:100 (instruction 1)"))
      << s.message();
  EXPECT_TRUE(Has(s, "in the order they are sent")) << s.message();
  // The gradients crossed the other way.
  Program grads = FromText(head + rank0 +
                           "rank 1: RA0<0:100 RA1<0:100 F0 F1 B1 B0 SG0>0:100 SG1>0:100 AR OPT\n");
  EXPECT_TRUE(Validate(grads).ok());  // sends follow rank 0's receive order: 0 then 1
  Program grads_crossed = FromText(
      head + rank0 + "rank 1: RA0<0:100 RA1<0:100 F0 F1 B1 SG1>0:100 B0 SG0>0:100 AR OPT\n");
  Status g = Validate(grads_crossed);
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(Has(g, "rank 0, instruction 4 (RG0<1:100): receive number 1 from rank 1"))
      << g.message();
}

TEST(ValidatePairOrder, EveryBuiltProgramKeepsPairOrder) {
  // BuildProgram's Programs, interleaved on pp = 2 included (there one pair carries both
  // activations and gradients).
  ModelSpec m;
  m.name = "t";
  m.layers = 16;
  m.hidden = 64;
  m.heads = 4;
  m.seq_len = 32;
  m.vocab = 256;
  int checked = 0;
  for (ScheduleKind kind :
       {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved}) {
    for (int pp : {1, 2, 4, 8}) {
      for (int64_t mb : {1, 2, 4, 8, 16}) {
        for (int vp : {1, 2}) {
          if (!CheckScheduleShape(kind, pp, mb, vp).ok()) continue;
          ParallelConfig c;
          c.pp = pp;
          c.vp = vp;
          c.schedule = kind;
          c.global_batch = mb;
          auto p = BuildProgram(m, c);
          ASSERT_TRUE(p.ok()) << p.status().ToString() << " " << c.ToString();
          Status s = Validate(*p);
          EXPECT_TRUE(s.ok()) << c.ToString() << ": " << s.ToString();
          EXPECT_TRUE(CheckProgramMatchesLayout(*p, m, c).ok());
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 30);
}

class MatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_.name = "tiny";
    m_.layers = 4;
    m_.hidden = 64;
    m_.heads = 4;
    m_.seq_len = 32;
    m_.vocab = 256;
    c_.tp = 2;
    c_.pp = 2;
    c_.mbs = 1;
    c_.global_batch = 4;
    c_.recompute = Recompute::kFull;
    auto p = BuildProgram(m_, c_);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    p_ = *p;
  }
  ModelSpec m_;
  ParallelConfig c_;
  Program p_;
};

TEST_F(MatchTest, TheBuiltProgramMatches) {
  EXPECT_TRUE(CheckProgramMatchesLayout(p_, m_, c_).ok());
  EXPECT_EQ(p_.ranks[0].instrs[1].bytes, PipelineMessageBytes(m_, c_));
  EXPECT_EQ(PipelineMessageBytes(m_, c_), 32 * 64 / 2 * 4);  // b s h / t, scatter/gather
}

TEST_F(MatchTest, SwappedInstructionsAreNamed) {
  std::swap(p_.ranks[1].instrs[1], p_.ranks[1].instrs[2]);  // F0 B0r -> B0r F0
  Status s = CheckProgramMatchesLayout(p_, m_, c_);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s, "rank 1, instruction 1 is 'B0r' but layout " + c_.ToString() +
                         " (4-byte activations) gives 'F0'"))
      << s.message();
}

TEST_F(MatchTest, MessageSizeAndElementSizeAreNamed) {
  p_.ranks[0].instrs[1].bytes = 100;
  Status s = CheckProgramMatchesLayout(p_, m_, c_);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s, "rank 0, instruction 1 is 'SA0>1:100'")) << s.message();
  EXPECT_TRUE(Has(s, "gives 'SA0>1:4096'")) << s.message();
  SetUp();  // a Program of 2-byte activations (bf16) is not the one of 4-byte ones (fp32)
  ParallelConfig bf16 = c_;
  bf16.precision = Precision::kBf16;
  auto half = BuildProgram(m_, bf16);
  ASSERT_TRUE(half.ok());
  Status h = CheckProgramMatchesLayout(*half, m_, c_);
  ASSERT_FALSE(h.ok());
  EXPECT_TRUE(Has(h, "is 'SA0>1:2048'")) << h.message();
}

TEST_F(MatchTest, HeaderLengthAndRecomputeAreNamed) {
  Program q = p_;
  q.microbatches = 8;
  Status s = CheckProgramMatchesLayout(q, m_, c_);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s, "header is 'kind=1f1b pp=2 vp=1 microbatches=8'")) << s.message();
  EXPECT_TRUE(Has(s, "gives 'kind=1f1b pp=2 vp=1 microbatches=4'")) << s.message();
  q = p_;
  q.ranks[0].instrs.pop_back();  // OPT dropped
  s = CheckProgramMatchesLayout(q, m_, c_);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s, "is missing but layout")) << s.message();
  EXPECT_TRUE(Has(s, "gives 'OPT'")) << s.message();
  c_.recompute = Recompute::kNone;  // the plan's Program recomputes, its layout does not
  s = CheckProgramMatchesLayout(p_, m_, c_);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s, "rank 0, instruction")) << s.message();
  EXPECT_TRUE(Has(s, "r' but layout")) << s.message();
  c_.pp = 3;  // a layout BuildProgram refuses: its own reason comes back
  EXPECT_FALSE(CheckProgramMatchesLayout(p_, m_, c_).ok());
}

}  // namespace
}  // namespace ptdp::schedule

namespace ptdp::schedule {
namespace {

// The small GPT of the ProgramLayers tests, with `layers` layers.
ModelSpec LayersModel(int layers) {
  ModelSpec m;
  m.name = "t";
  m.layers = layers;
  m.hidden = 64;
  m.heads = 4;
  m.seq_len = 16;
  m.vocab = 128;
  return m;
}

// Each rank of a built Program states the layers its chunks run (core/shapes.h ChunkLayers); the
// statement survives the text and JSON forms, and a plan whose Program states other layers than
// its layout places is refused naming the rank, while one that states none (written before) runs.
TEST(ProgramLayers, StatedCheckedAndRoundTripped) {
  ModelSpec m = LayersModel(8);
  ParallelConfig c;
  c.pp = 3;
  c.global_batch = 6;
  c.first_stage_layers = 3;
  c.last_stage_layers = 3;
  auto built = BuildProgram(m, c);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(built->ranks[r].layers, std::vector<int>{r == 1 ? 2 : 3}) << r;
  }
  EXPECT_TRUE(Validate(*built).ok());
  const std::string text = ProgramToText(*built);
  EXPECT_NE(text.find("rank 1: layers=2 RA0<0:"), std::string::npos) << text;
  Program from_text = FromText(text);
  EXPECT_EQ(ProgramToText(from_text), text);
  auto from_json = ProgramFromJson(Json::parse(ProgramToJson(*built).dump()));
  ASSERT_TRUE(from_json.ok()) << from_json.status().ToString();
  EXPECT_EQ(ProgramToText(*from_json), text);
  EXPECT_TRUE(CheckProgramMatchesLayout(from_text, m, c).ok());

  Program other = *built;
  other.ranks[1].layers = {3};
  Status s = CheckProgramMatchesLayout(other, m, c);
  EXPECT_EQ(s.message().rfind("rank 1 states layers '3' but layout tp=1,pp=3", 0), 0u)
      << s.message();
  ParallelConfig even = c;
  even.first_stage_layers = even.last_stage_layers = 0;
  even.global_batch = 6;
  m.layers = 9;  // 3/3/3: rank 1 of the 3/2/3 Program states 2
  EXPECT_FALSE(CheckProgramMatchesLayout(*built, m, even).ok());
  m.layers = 8;
  Program unstated = *built;
  for (RankProgram& r : unstated.ranks) r.layers.clear();
  EXPECT_TRUE(CheckProgramMatchesLayout(unstated, m, c).ok());
  Program two = *built;
  two.ranks[0].layers = {1, 2};
  EXPECT_TRUE(Has(Validate(two), "rank 0 states layers for 2 chunks, but vp = 1"));
  EXPECT_FALSE(ProgramFromText("program kind=1f1b pp=1 vp=1 microbatches=1\n"
                               "rank 0: layers=x F0 B0\n")
                   .ok());
}

// Interleaved with short ends (core/parallel.h): 6 layers + the embedding and the loss over 2 x 2
// virtual stages of 2, the first and the last holding 1: rank 0 runs chunks of 1 and 2 layers,
// rank 1 of 2 and 1; the even 8-layer layout's Program (2 and 2) does not match it.
TEST(ProgramLayers, InterleavedShortEnds) {
  ModelSpec m = LayersModel(6);
  ParallelConfig c;
  c.pp = 2;
  c.vp = 2;
  c.schedule = ScheduleKind::kInterleaved;
  c.global_batch = 4;
  c.first_stage_layers = c.last_stage_layers = 3;
  auto built = BuildProgram(m, c);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  EXPECT_EQ(built->ranks[0].layers, (std::vector<int>{1, 2}));
  EXPECT_EQ(built->ranks[1].layers, (std::vector<int>{2, 1}));
  EXPECT_TRUE(CheckProgramMatchesLayout(*built, m, c).ok());
  ModelSpec eight = m;
  eight.layers = 8;
  ParallelConfig even = c;
  even.first_stage_layers = even.last_stage_layers = 0;
  auto even_built = BuildProgram(eight, even);
  ASSERT_TRUE(even_built.ok());
  EXPECT_FALSE(CheckProgramMatchesLayout(*even_built, m, c).ok());
}

}  // namespace
}  // namespace ptdp::schedule
