// Token dropping in the planner (ModelSpec::moe_capacity_factor; docs/moe.md): the model's fields
// read, written and refused by name, the experts' copies (core/experts.h RoutedCopies, what the
// ledger's stash and the cost model's GEMMs and all-to-alls read) against each capacity worked
// out by hand, and Megatron-LM's flags.
#include <gtest/gtest.h>

#include <string>

#include "core/cluster.h"
#include "core/experts.h"
#include "core/model.h"
#include "core/parallel.h"
#include "costmodel/moe_cost.h"
#include "planner/report.h"

namespace ptdp::planner {
namespace {

// 8 experts of 256, top 2, sequences of 256: a sequence's 512 copies are 64 an expert balanced.
ModelSpec Mixture(double factor = 0, bool pad = false) {
  ModelSpec m;
  m.name = "drop-mixture";
  m.layers = 4;
  m.hidden = 512;
  m.heads = 8;
  m.ffn_hidden = 1024;
  m.seq_len = 256;
  m.vocab = 4096;
  m.swiglu = m.rmsnorm = m.rotary = true;
  m.linear_bias = false;
  m.moe_experts = 8;
  m.moe_topk = 2;
  m.moe_ffn_hidden = 256;
  m.moe_capacity_factor = factor;
  m.moe_pad_to_capacity = pad;
  return m;
}

ParallelConfig Layout(int tp = 1) {
  ParallelConfig c;
  c.tp = tp;
  c.sequence_parallel = tp > 1;
  c.mbs = 2;
  c.global_batch = 8;
  c.precision = Precision::kBf16;
  return c;
}

TEST(TokenDropping, ValidateNamesTheField) {
  EXPECT_TRUE(Mixture(1.25, true).Validate().ok());
  ModelSpec m = Mixture(-1);
  EXPECT_NE(m.Validate().message().find("moe_capacity_factor: -1 is outside (0, 1000]"),
            std::string::npos)
      << m.Validate().message();
  m = Mixture(0, true);
  EXPECT_NE(m.Validate().message().find("moe_pad_to_capacity: set without moe_capacity_factor"),
            std::string::npos)
      << m.Validate().message();
  m = Mixture();
  m.moe_drop_by_position = true;
  EXPECT_NE(m.Validate().message().find("moe_token_drop_policy: set without"), std::string::npos);
  ModelSpec dense = Mixture(1.0);
  dense.moe_experts = dense.moe_topk = 0;
  dense.moe_ffn_hidden = 0;
  EXPECT_NE(dense.Validate().message().find("moe_capacity_factor: 1 set without moe_experts"),
            std::string::npos)
      << dense.Validate().message();
  OrderedJson j = ModelToJson(Mixture(1.0));
  j["moe_token_drop_policy"] = "random";
  const auto bad = ModelFromJson(Json::parse(j.dump()), "model");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "model.moe_token_drop_policy: \"random\" is not \"probs\" or \"position\"");
}

TEST(TokenDropping, TheFieldsRoundTrip) {
  ModelSpec m = Mixture(1.25, true);
  m.moe_drop_by_position = true;
  const OrderedJson j = ModelToJson(m);
  EXPECT_EQ(j["moe_token_drop_policy"], "position");
  const auto back = ModelFromJson(Json::parse(j.dump()), "model");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->moe_capacity_factor, 1.25);
  EXPECT_TRUE(back->moe_drop_by_position && back->moe_pad_to_capacity);
  EXPECT_FALSE(ModelToJson(Mixture()).contains("moe_capacity_factor"));  // dropless as before
}

// Two sequences of 256 a microbatch, 512 copies each dropless (1024 in all):
//   factor 0.5:  C = ceil(64 x 0.5) = 32, at most 8 x 32 = 256 a sequence: 512;
//   factor 1.25: C = 80, over the 64 of a balanced router: nothing dropped, 1024;
//   padded:      every expert runs 80 a sequence: 2 x 8 x 80 = 1280;
//   factor 5:    C = 320 over the 256 tokens: padded, every expert runs them all, 2 x 8 x 256.
// Under sequence parallelism with t = 2 each rank routes half of them.
TEST(TokenDropping, TheCopiesFollowTheCapacity) {
  EXPECT_EQ(RoutedCopies(Mixture(), Layout()), 1024);
  EXPECT_EQ(RoutedCopies(Mixture(0.5), Layout()), 512);
  EXPECT_EQ(RoutedCopies(Mixture(1.25), Layout()), 1024);
  EXPECT_EQ(RoutedCopies(Mixture(1.25, true), Layout()), 1280);
  EXPECT_EQ(RoutedCopies(Mixture(5, true), Layout()), 4096);
  EXPECT_EQ(RoutedCopies(Mixture(5), Layout()), 1024);
  EXPECT_EQ(RoutedCopies(Mixture(1.25, true), Layout(2)), 640);
  EXPECT_EQ(ExpertTokens(Mixture(0.5), Layout(2)), 512);  // gathered over the expert tensor group
  EXPECT_EQ(DispatchBytes(Mixture(0.5), Layout(), 2), 512 * 512 * 2);
}

// The experts' GEMMs and the stash scale with the copies; the router's do not. Priced at h 4096
// and experts of 1536 (an expert's GEMMs of 2048 rows dropless, 1024 halved, 2560 padded):
// dgx-h100's GEMM table is measured noise at the small model's shapes (m 512 to 4096 with n and
// k of 512 run 8 to 19 us in no order).
TEST(TokenDropping, TheExpertsArePricedForTheCopiesTheyRun) {
  const HardwareProfile hw = LoadCluster("dgx-h100", 8)->profile;
  const ParallelConfig c = Layout();
  auto wide = [](ModelSpec m) {
    m.hidden = 4096;
    m.moe_ffn_hidden = 1536;
    m.seq_len = 4096;
    return m;
  };
  const auto dropless = costmodel::ExpertMlpPartsOf(wide(Mixture()), hw, c);
  const auto halved = costmodel::ExpertMlpPartsOf(wide(Mixture(0.5)), hw, c);
  const auto padded = costmodel::ExpertMlpPartsOf(wide(Mixture(1.25, true)), hw, c);
  EXPECT_LT(halved.experts.forward.gemm, dropless.experts.forward.gemm);
  EXPECT_GT(padded.experts.forward.gemm, dropless.experts.forward.gemm);
  EXPECT_LT(halved.experts.forward.memory, dropless.experts.forward.memory);
  EXPECT_EQ(halved.routing.forward.gemm, dropless.routing.forward.gemm);
  auto fc1_input = [&](const ModelSpec& m) {
    for (const ActTensor& a : ExpertActivations(m, c)) {
      if (a.name == "moe.fc1.input") return a.elements;
    }
    return int64_t(-1);
  };
  EXPECT_EQ(fc1_input(Mixture()), 1024 * 512);
  EXPECT_EQ(fc1_input(Mixture(0.5)), 512 * 512);
  EXPECT_EQ(fc1_input(Mixture(1.25, true)), 1280 * 512);
}

TEST(TokenDropping, TheDispatcherAndTheFlags) {
  ParallelConfig c = Layout();
  c.ep = 2;
  c.dp = 2;
  c.moe_dispatcher = MoeDispatcher::kDeepEp;
  const Status deepep = c.Validate(Mixture(1.0));
  EXPECT_NE(deepep.message().find("moe_dispatcher: deepep is dropless"), std::string::npos)
      << deepep.message();
  c.moe_dispatcher = MoeDispatcher::kAllToAll;
  EXPECT_TRUE(c.Validate(Mixture(1.0)).ok()) << c.Validate(Mixture(1.0)).message();
  ModelSpec m = Mixture(1.25, true);
  const std::string args = MegatronArgs(m, c);
  EXPECT_NE(args.find(" --moe-expert-capacity-factor 1.25 --moe-token-drop-policy probs "
                      "--moe-pad-expert-input-to-capacity"),
            std::string::npos)
      << args;
  m.moe_drop_by_position = true;
  m.moe_pad_to_capacity = false;
  EXPECT_NE(MegatronArgs(m, c).find("--moe-token-drop-policy position"), std::string::npos);
  EXPECT_EQ(MegatronArgs(m, c).find("--moe-pad-expert-input"), std::string::npos);
  EXPECT_EQ(MegatronArgs(Mixture(), c).find("capacity"), std::string::npos);
  EXPECT_NE(MegatronModelNote(m).find("per sequence"), std::string::npos);
  EXPECT_EQ(MegatronModelNote(Mixture()), "");
}

}  // namespace
}  // namespace ptdp::planner
