// FP8 training (Precision::kFp8, docs/cost_model.md "FP8"): the ledger's bytes, the cost model's
// Linear GEMMs and casts, the profile's refusal without an FP8 rate, the planner's choice and the
// Megatron-LM flags. Expected values are derived by hand from the shapes, not from the code under
// test.
#include <gtest/gtest.h>

#include "core/cluster.h"
#include "core/ledger.h"
#include "costmodel/gemm.h"
#include "costmodel/layer_cost.h"
#include "planner/fix.h"
#include "planner/report.h"
#include "planner/search.h"
#include "tests/costmodel/test_profile.h"

namespace ptdp::planner {
namespace {

ParallelConfig Layout(Precision p) {
  ParallelConfig c;
  c.tp = 2;
  c.precision = p;
  c.recompute = Recompute::kNone;
  return c;
}

// A GPT layer's four Linears hold (3h + h + 4h + 4h) h / t = 12 h^2 / t weight elements per tensor
// rank; fp8 adds an FP8 copy and its transpose (2 bytes each). Its inputs kept for the backward
// (QKV s b h, projection s b h / t, fc1 s b h, fc2 s b 4h / t) shrink from 2 bytes to 1.
TEST(Fp8, LedgerWeightsAndActivationsByHand) {
  auto m = LoadModel("gpt-1.3b");
  ASSERT_TRUE(m.ok());
  const ParallelConfig bf16 = Layout(Precision::kBf16), fp8 = Layout(Precision::kFp8);
  const int64_t h = m->hidden, t = 2, sb = int64_t(m->seq_len) * bf16.mbs;
  const MemoryLedger a = ParameterMemory(*m, bf16, 0), b = ParameterMemory(*m, fp8, 0);
  EXPECT_EQ(b.weights - a.weights, int64_t(m->layers) * 12 * h * h / t * 2);
  EXPECT_EQ(b.grads, a.grads);
  EXPECT_EQ(b.optimizer, a.optimizer);
  EXPECT_EQ(Fp8WeightCopyBytes(*m, bf16, 0), 0);
  const StashPrices pa = StashPricesOf(*m, bf16), pb = StashPricesOf(*m, fp8);
  EXPECT_EQ(pa.layer - pb.layer, sb * h + sb * h / t + sb * h + sb * 4 * h / t);
  EXPECT_EQ(pb.head, pa.head);  // the output layer stays in bf16
}

// The Linear GEMMs at the FP8 rate (the bf16 time x 200/400 on the round profile), attention
// unchanged, plus the casts: read 2 bytes, write the copy and its transpose, for the four inputs
// and the four weights forward and the four output gradients backward, at 1000 GB/s.
TEST(Fp8, LayerCostIsBf16ScaledPlusCasts) {
  auto m = LoadModel("gpt-1.3b");
  ASSERT_TRUE(m.ok());
  HardwareProfile hw = testing::RoundProfile(Precision::kBf16);
  hw.fp8_peak_tflops = testing::S(400);
  const int tp = 2;
  const int64_t T = m->seq_len, h = m->hidden;
  using costmodel::GemmBackwardTime;
  using costmodel::GemmTime;
  const double fwd = GemmTime(hw, T, 3 * h / tp, h) + GemmTime(hw, T, h, h / tp) +
                     GemmTime(hw, T, 4 * h / tp, h) + GemmTime(hw, T, h, 4 * h / tp);
  const double bwd = GemmBackwardTime(hw, T, 3 * h / tp, h) + GemmBackwardTime(hw, T, h, h / tp) +
                     GemmBackwardTime(hw, T, 4 * h / tp, h) +
                     GemmBackwardTime(hw, T, h, 4 * h / tp);
  const auto a = costmodel::TransformerLayerCost(*m, hw, Precision::kBf16, tp, 1, 0);
  const auto b = costmodel::TransformerLayerCost(*m, hw, Precision::kFp8, tp, 1, 0);
  const double scale = 200.0 / 400.0;
  EXPECT_NEAR(b.forward.gemm, a.forward.gemm - fwd + fwd * scale, 1e-12 * a.forward.gemm);
  EXPECT_NEAR(b.backward.gemm, a.backward.gemm - bwd + bwd * scale, 1e-12 * a.backward.gemm);
  const double Th = double(T) * double(h);
  const double cast_fwd = 4 * (Th + Th / tp + Th + 4 * Th / tp) + 4 * (12.0 * h * h / tp);
  const double cast_bwd = 4 * (3 * Th / tp + Th + 4 * Th / tp + Th);
  EXPECT_NEAR(b.forward.memory - a.forward.memory, cast_fwd / 1e12, 1e-9 * a.forward.memory);
  EXPECT_NEAR(b.backward.memory - a.backward.memory, cast_bwd / 1e12, 1e-9 * a.backward.memory);
  EXPECT_EQ(b.forward.tp_comm, a.forward.tp_comm);
}

// A measured FP8 speed-up replaces the peak ratio: the Linears' GEMMs at the bf16 time / speed-up.
TEST(Fp8, MeasuredSpeedupReplacesThePeakRatio) {
  HardwareProfile hw = testing::RoundProfile(Precision::kBf16);
  hw.fp8_peak_tflops = testing::S(400);
  EXPECT_DOUBLE_EQ(costmodel::LinearGemmScale(hw, Precision::kFp8), 200.0 / 400.0);
  hw.fp8_gemm_speedup = testing::S(1.6);
  EXPECT_DOUBLE_EQ(costmodel::LinearGemmScale(hw, Precision::kFp8), 1.0 / 1.6);
  EXPECT_DOUBLE_EQ(costmodel::LinearGemmScale(hw, Precision::kBf16), 1.0);
  // dgx-h100 ships Bekman's MAMF ratio, 1402.6 / 794.5.
  auto c = LoadCluster("dgx-h100", 8);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_NEAR(c->profile.fp8_gemm_speedup.value, 1402.6 / 794.5, 5e-4);
}

// The reader: the speed-up needs an FP8 peak (without one fp8 is refused anyway) and lies in
// (0, 10]; each error names the field.
TEST(Fp8, SpeedupReadAndRefused) {
  HardwareProfile hw = testing::RoundProfile(Precision::kBf16);
  hw.fp8_peak_tflops = testing::S(400);
  hw.fp8_gemm_speedup = testing::S(1.5);
  Json j = Json::parse(HardwareProfileToJson(hw).dump());
  auto back = HardwareProfileFromJson(j, "p");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->fp8_gemm_speedup.value, 1.5);
  Json bad = j;
  bad["fp8_gemm_speedup"]["value"] = 11;
  auto r = HardwareProfileFromJson(bad, "p");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("p.fp8_gemm_speedup.value: 11 is outside (0, 10]"),
            std::string::npos)
      << r.status().message();
  bad = j;
  bad.erase("fp8_peak_tflops");
  r = HardwareProfileFromJson(bad, "p");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("p.fp8_gemm_speedup: needs fp8_peak_tflops"),
            std::string::npos)
      << r.status().message();
}

// A profile without an FP8 rate refuses fp8, naming the profile and the field; bf16 is unaffected.
TEST(Fp8, ProfileWithoutRateRefused) {
  const HardwareProfile hw = testing::RoundProfile(Precision::kBf16);
  const Status s = CheckPrecision(hw, Precision::kFp8);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'round'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("fp8_peak_tflops"), std::string::npos) << s.message();
  EXPECT_TRUE(CheckPrecision(hw, Precision::kBf16).ok());
  auto m = LoadModel("gpt-1.3b");
  auto selene = LoadCluster("selene", 8);
  ASSERT_TRUE(m.ok() && selene.ok());
  SearchOptions o;
  o.global_batch = 8;
  o.precision = Precision::kFp8;
  auto r = Search(*m, *selene, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'selene'"), std::string::npos) << r.status().message();
}

// On dgx-h100, the same Llama layout in fp8 runs faster than in bf16 (Linear GEMMs 1.765x faster,
// fp8_gemm_speedup), and its flags are bf16 plus Transformer Engine's hybrid FP8; bf16's carry no
// FP8 flag.
TEST(Fp8, PlanAndMegatronFlags) {
  auto m = LoadModel("llama3-8b");
  auto c = LoadCluster("dgx-h100", 8);
  ASSERT_TRUE(m.ok() && c.ok()) << m.status().message();
  SearchOptions o;
  o.global_batch = 64;
  o.fix = *ParseFix("tp=8,pp=1,dp=1,mbs=1,recompute=full");
  o.precision = Precision::kBf16;
  auto a = Search(*m, *c, o);
  o.precision = Precision::kFp8;
  auto b = Search(*m, *c, o);
  ASSERT_TRUE(a.ok() && b.ok());
  const Candidate& ca = a->top.front();
  const Candidate& cb = b->top.front();
  EXPECT_EQ(cb.layout.precision, Precision::kFp8);
  EXPECT_LT(cb.prediction.iteration_s, ca.prediction.iteration_s);
  EXPECT_GT(cb.prediction.memory[0].weights, ca.prediction.memory[0].weights);
  EXPECT_LT(cb.prediction.memory[0].activations, ca.prediction.memory[0].activations);
  const std::string fp8_args = MegatronArgs(*m, cb.layout);
  EXPECT_NE(fp8_args.find(" --bf16 --fp8-format hybrid --fp8-recipe delayed "
                          "--fp8-amax-history-len 1024 --fp8-amax-compute-algo max"),
            std::string::npos)
      << fp8_args;
  EXPECT_EQ(MegatronArgs(*m, ca.layout).find("--fp8"), std::string::npos);
}

}  // namespace
}  // namespace ptdp::planner
