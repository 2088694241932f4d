#include "core/parallel.h"
#include "core/shapes.h"

#include <gtest/gtest.h>

namespace ptdp {
namespace {

ParallelConfig Paper1T() {
  ParallelConfig c;
  c.tp = 8;
  c.pp = 64;
  c.dp = 6;
  c.mbs = 1;
  c.global_batch = 3072;
  c.recompute = Recompute::kFull;
  return c;
}

TEST(Parallel, PaperLayoutIsValid) {
  auto m = LoadModel("gpt-1t").value();
  ParallelConfig c = Paper1T();
  EXPECT_TRUE(c.Validate(m).ok());
  EXPECT_EQ(c.WorldSize(), 3072);
  EXPECT_EQ(c.Microbatches(), 512);
}

TEST(Parallel, RejectionsNameTheField) {
  auto m = LoadModel("gpt-1t").value();
  ParallelConfig c = Paper1T();
  c.tp = 3;
  EXPECT_NE(c.Validate(m).message().find("tp: 3 does not divide the 160 attention heads"),
            std::string::npos);
  c = Paper1T();
  c.pp = 3;
  EXPECT_EQ(c.Validate(m).message().rfind("pp:", 0), 0u);
  c = Paper1T();
  c.mbs = 5;
  EXPECT_EQ(c.Validate(m).message().rfind("mbs:", 0), 0u);
  c = Paper1T();
  c.vp = 2;  // needs the interleaved schedule
  EXPECT_EQ(c.Validate(m).message().rfind("vp:", 0), 0u);
  c.schedule = ScheduleKind::kInterleaved;
  EXPECT_TRUE(c.Validate(m).ok());
  c.global_batch = 3072 + 6 * 32;  // m = 544 is not a multiple of pp = 64: a smaller last group
  EXPECT_TRUE(c.Validate(m).ok()) << c.Validate(m).ToString();
  c.global_batch = int64_t(c.mbs) * c.dp * 63;  // m = 63 < pp = 64
  EXPECT_NE(c.Validate(m).message().find("at least pp = 64"), std::string::npos)
      << c.Validate(m).ToString();
  c = Paper1T();
  c.sequence_parallel = true;
  EXPECT_TRUE(c.Validate(m).ok());
  c.tp = 1;
  c.dp = 48;
  EXPECT_EQ(c.Validate(m).message().rfind("sequence_parallel: needs tp > 1", 0), 0u);
  // bf16 gradients need 16-bit training with fp32 main gradients to replace: bf16 or fp8.
  c = Paper1T();
  c.grad_reduce_bf16 = true;
  EXPECT_EQ(c.Validate(m).message(), "grad_reduce_bf16: needs precision bf16 or fp8, not fp32");
  c.precision = Precision::kFp16;
  EXPECT_EQ(c.Validate(m).message(), "grad_reduce_bf16: needs precision bf16 or fp8, not fp16");
  c.precision = Precision::kBf16;
  EXPECT_TRUE(c.Validate(m).ok());
  c.precision = Precision::kFp8;
  EXPECT_TRUE(c.Validate(m).ok());
}

// Uneven stages: Megatron-LM's rules (the stages between share the rest evenly, one layer at
// least each); each refusal names the field that was set.
TEST(Parallel, UnevenStagesValidity) {
  ModelSpec m = LoadModel("tiny").value();  // 4 layers
  ParallelConfig c;
  c.pp = 2;
  c.global_batch = 4;
  c.first_stage_layers = 1;
  EXPECT_TRUE(c.Validate(m).ok());  // 1 / 3
  c.last_stage_layers = 3;
  EXPECT_TRUE(c.Validate(m).ok());
  c.last_stage_layers = 2;  // 1 + 2 leaves a layer but no stage between
  EXPECT_EQ(c.Validate(m).message().rfind("last_stage_layers: first_stage_layers + "
                                          "last_stage_layers = 3 but the model has 4 layers",
                                          0),
            0u);
  c.last_stage_layers = 0;
  c.first_stage_layers = 4;  // nothing left for the last stage
  EXPECT_EQ(c.Validate(m).message().rfind("first_stage_layers: ", 0), 0u);
  c.pp = 3;
  c.first_stage_layers = 1;  // 3 layers over 2 stages
  EXPECT_NE(c.Validate(m).message().find("cannot share the 3 remaining layers evenly"),
            std::string::npos);
  c.last_stage_layers = 1;  // 1 / 2 / 1
  EXPECT_TRUE(c.Validate(m).ok());
  c.first_stage_layers = 0;  // 3 layers over 2 stages again, named by the field that is set
  EXPECT_EQ(c.Validate(m).message().rfind("last_stage_layers: ", 0), 0u);
  c = ParallelConfig();
  c.first_stage_layers = 2;
  EXPECT_EQ(c.Validate(m).message(), "first_stage_layers: uneven stages need pp >= 2");
  m.layers = 8;
  c.pp = 2;
  c.vp = 2;
  c.schedule = ScheduleKind::kInterleaved;
  c.global_batch = 4;
  EXPECT_EQ(c.Validate(m).message().rfind("first_stage_layers: with vp = 2 the 8 layers plus 1", 0),
            0u);  // 8 + 1 units over 4 virtual stages
  c.first_stage_layers = -1;
  EXPECT_EQ(c.Validate(m).message().rfind("first_stage_layers: -1 is outside", 0), 0u);
}

// Per-stage counts (stage_layers, Megatron-Core's --pipeline-model-parallel-layout with vp = 1):
// each refusal is one line naming layout.stage_layers and the reason.
TEST(Parallel, StageLayersValidity) {
  ModelSpec m = LoadModel("tiny").value();
  m.layers = 8;
  ParallelConfig c;
  c.pp = 4;
  c.global_batch = 4;
  c.stage_layers = {3, 1, 2, 2};
  EXPECT_TRUE(c.Validate(m).ok()) << c.Validate(m).message();
  EXPECT_TRUE(c.Uneven());
  auto message = [&] { return c.Validate(m).message(); };
  c.stage_layers = {3, 1, 2};
  EXPECT_EQ(message(),
            "layout.stage_layers: 3 counts for pp*vp = 4 stages (one per virtual stage)");
  c.stage_layers = {3, 0, 3, 2};
  EXPECT_EQ(message(), "layout.stage_layers: stage 1 holds 0 layers (at least 1)");
  c.stage_layers = {3, 2, 2, 2};
  EXPECT_EQ(message(), "layout.stage_layers: the counts sum to 9 but the model has 8 layers");
  c.stage_layers = {3, 1, 2, 2};
  c.first_stage_layers = 3;
  EXPECT_EQ(message().rfind("layout.stage_layers: excludes first_stage_layers", 0), 0u);
  c.first_stage_layers = 0;
  // Interleaved: one count per virtual stage, in order; the first may hold only the embedding
  // and the last only the head (Megatron-Core's "E|...|L"), no other stage may be empty.
  c.vp = 2;
  c.schedule = ScheduleKind::kInterleaved;
  EXPECT_EQ(message(),
            "layout.stage_layers: 4 counts for pp*vp = 8 stages (one per virtual stage)");
  c.stage_layers = {0, 2, 1, 1, 1, 1, 2, 0};
  EXPECT_TRUE(c.Validate(m).ok()) << message();
  EXPECT_EQ(ChunkLayers(m, c, 0, 0).size(), 0);
  EXPECT_EQ(ChunkLayers(m, c, 0, 1).begin, 4);  // virtual stage 4, after 0 + 2 + 1 + 1
  EXPECT_EQ(StageLayerCounts(m, c), (std::vector<int>{1, 3, 3, 1}));
  c.stage_layers = {1, 0, 1, 1, 1, 1, 2, 1};
  EXPECT_EQ(message(), "layout.stage_layers: stage 1 holds 0 layers (at least 1)");
  c.stage_layers = {0, 2, 1, 1, 1, 1, 2, 0};
  c.schedule = ScheduleKind::k1F1B;
  EXPECT_EQ(message().rfind("layout.stage_layers: per-virtual-stage counts (vp = 2) need "
                            "schedule=interleaved",
                            0),
            0u)
      << message();
  c = ParallelConfig();
  c.global_batch = 4;
  c.stage_layers = {8};
  EXPECT_EQ(message(), "layout.stage_layers: per-stage counts need pp >= 2, got pp = 1");
}

// stage_layers in the plan's layout object: written only when set (old plans read and write as
// before), read back exactly, a malformed list refused in one line naming the key.
TEST(Parallel, StageLayersJson) {
  ParallelConfig c;
  c.pp = 4;
  EXPECT_FALSE(LayoutToJson(c).contains("stage_layers"));
  c.stage_layers = {9, 3, 8, 4};
  const Json j = Json::parse(LayoutToJson(c).dump());
  EXPECT_EQ(j["stage_layers"], Json::parse("[9, 3, 8, 4]"));
  const ParallelConfig back = LayoutFromJson(j, "layout").value();
  EXPECT_EQ(back.stage_layers, (std::vector<int>{9, 3, 8, 4}));
  EXPECT_EQ(back.ToString(), c.ToString());
  EXPECT_NE(c.ToString().find(",stage_layers=9/3/8/4"), std::string::npos);
  // The same split as Megatron's first/last form reads differently: no silent normalisation.
  ParallelConfig ends;
  ends.pp = 4;
  ends.first_stage_layers = 9;
  ends.last_stage_layers = 4;
  EXPECT_NE(ends.ToString(), c.ToString());
  Json bad = j;
  bad["stage_layers"] = Json::parse(R"([9, "3", 8, 4])");
  EXPECT_EQ(LayoutFromJson(bad, "layout").status().message(),
            "layout.stage_layers: element 1: expected an integer, got string");
  bad["stage_layers"] = 9;
  EXPECT_EQ(LayoutFromJson(bad, "layout").status().message(),
            "layout.stage_layers: expected a list of integers, got integer");
}

// Interleaved with short ends (core/parallel.h): the embedding and the loss count as a layer, the
// set end holds one layer fewer than a rank between, each virtual stage keeps one layer at least,
// and only the interleaved schedule; each refusal names the field and the reason.
TEST(Parallel, InterleavedShortEndsValidity) {
  ModelSpec m = LoadModel("tiny").value();
  m.layers = 6;
  ParallelConfig c;
  c.pp = 2;
  c.vp = 2;
  c.schedule = ScheduleKind::kInterleaved;
  c.global_batch = 4;
  c.first_stage_layers = 3;  // (6 + 2) / 2 = 4 per rank between: ends 3
  c.last_stage_layers = 3;
  EXPECT_TRUE(c.Validate(m).ok()) << c.Validate(m).message();
  c.first_stage_layers = 2;
  EXPECT_EQ(c.Validate(m).message(),
            "first_stage_layers: with vp = 2 the end stage holds one layer fewer than each rank "
            "between (4), so it must be 3, got 2");
  c.first_stage_layers = 0;  // 6 + 1 over 4 virtual stages
  EXPECT_EQ(c.Validate(m).message().rfind("last_stage_layers: with vp = 2 the 6 layers plus 1", 0),
            0u);
  m.layers = 7;  // (7 + 1) / 2 = 4: the last rank 3
  EXPECT_TRUE(c.Validate(m).ok()) << c.Validate(m).message();
  m.layers = 6;
  c.vp = 4;  // 8 units over 8 virtual stages: the ends would hold no layer
  c.first_stage_layers = 3;
  EXPECT_EQ(c.Validate(m).message(),
            "first_stage_layers: with vp = 4 each virtual stage holds 1 layer, so the end one "
            "fewer would hold none");
  c.vp = 2;
  c.schedule = ScheduleKind::kZbV;
  EXPECT_EQ(c.Validate(m).message(),
            "first_stage_layers: uneven stages with vp > 1 need schedule=interleaved (zb-v keeps "
            "the even split)");
}

// The planner's uneven splits (UnevenStageSplits), counted by hand: the first and the last stage
// each q - a and q - b layers, the stages between q, a and b at most K = clamp(V / 12h, 2, 8).
TEST(Parallel, UnevenStageSplitsFollowTheHeadsWeight) {
  ModelSpec m = LoadModel("tiny").value();  // V 256 on h 64: K = 2
  m.layers = 8;
  using Splits = std::vector<std::pair<int, int>>;
  EXPECT_EQ(UnevenStageSplits(m, 1), Splits{});
  // pp 2: first + last = 8 with a, b <= 2 (the even 4/4 left out).
  EXPECT_EQ(UnevenStageSplits(m, 2), (Splits{{3, 5}, {5, 3}}));
  // pp 4: 8 + a + b divisible by 4 with a, b <= 2: a = b = 2, q = 3, the ends 1 each.
  EXPECT_EQ(UnevenStageSplits(m, 4), (Splits{{1, 1}}));
  m.vocab = 64 * 12 * 20;  // a head of 20 layers: K clamps to 8, so 7/1 and 1/7 on 2 ranks
  EXPECT_EQ(UnevenStageSplits(m, 2), (Splits{{1, 7}, {2, 6}, {3, 5}, {5, 3}, {6, 2}, {7, 1}}));
  for (int pp : {2, 3, 4}) {
    for (const auto& [first, last] : UnevenStageSplits(m, pp)) {
      ParallelConfig c;
      c.pp = pp;
      c.first_stage_layers = first;
      c.last_stage_layers = last;
      EXPECT_TRUE(c.ValidateStageSplit(m).ok()) << pp << ": " << first << "/" << last;
    }
  }
}

TEST(Parallel, RecomputeNamesRoundTrip) {
  for (Recompute r : {Recompute::kNone, Recompute::kFull, Recompute::kSelective}) {
    EXPECT_EQ(ParseRecompute(RecomputeName(r)).value(), r);
  }
  EXPECT_NE(ParseRecompute("some").status().message().find("none, full, selective"),
            std::string::npos);
}

TEST(Parallel, LayoutJsonRoundTrip) {
  ParallelConfig c = Paper1T();
  c.schedule = ScheduleKind::kInterleaved;
  c.vp = 2;
  c.scatter_gather = false;
  c.recompute = Recompute::kSelective;
  c.sequence_parallel = true;
  c.distributed_optimizer = true;
  c.grad_accumulation_fusion = true;
  auto j = Json::parse(LayoutToJson(c).dump());
  ParallelConfig fused = c;
  fused.recompute = Recompute::kNone;
  fused.fused_attention = true;
  auto fused_back = LayoutFromJson(Json::parse(LayoutToJson(fused).dump()), "layout").value();
  EXPECT_TRUE(fused_back.fused_attention);
  EXPECT_NE(fused_back.ToString().find("fused_attention=on"), std::string::npos);
  auto back = LayoutFromJson(j, "layout", ParallelConfig()).value();
  EXPECT_EQ(back.ToString(), c.ToString());
  ParallelConfig uneven = Paper1T();
  uneven.first_stage_layers = 1;
  uneven.last_stage_layers = 2;
  auto uneven_back = LayoutFromJson(Json::parse(LayoutToJson(uneven).dump()), "layout").value();
  EXPECT_EQ(uneven_back.first_stage_layers, 1);
  EXPECT_EQ(uneven_back.last_stage_layers, 2);
  EXPECT_NE(uneven_back.ToString().find("first_stage_layers=1,last_stage_layers=2"),
            std::string::npos);
  EXPECT_TRUE(back.sequence_parallel && back.distributed_optimizer &&
              back.grad_accumulation_fusion);
  // bf16 gradients: written only when set (plan files without them stay as they were), read back.
  EXPECT_FALSE(j.contains("grad_reduce_bf16"));
  ParallelConfig bf16_grads = c;
  bf16_grads.precision = Precision::kBf16;
  bf16_grads.grad_reduce_bf16 = true;
  const Json g = Json::parse(LayoutToJson(bf16_grads).dump());
  EXPECT_TRUE(g.at("grad_reduce_bf16").get<bool>());
  const ParallelConfig g_back = LayoutFromJson(g, "layout").value();
  EXPECT_TRUE(g_back.grad_reduce_bf16);
  EXPECT_NE(g_back.ToString().find(",grad_reduce_bf16=on"), std::string::npos);
  // The later options are optional when read (plan files of the first landing lack them).
  Json old = j;
  old.erase("sequence_parallel");
  old.erase("distributed_optimizer");
  old.erase("grad_accumulation_fusion");
  old.erase("fused_attention");
  EXPECT_FALSE(LayoutFromJson(old, "layout").value().fused_attention);
  EXPECT_FALSE(LayoutFromJson(old, "layout").value().sequence_parallel);
  Json wrong = j;
  wrong["sequence_parallel"] = "yes";
  EXPECT_NE(LayoutFromJson(wrong, "layout").status().message().find("layout.sequence_parallel"),
            std::string::npos);
  j["schedule"] = "zigzag";
  EXPECT_NE(LayoutFromJson(j, "layout").status().message().find("schedule"), std::string::npos);
  j["schedule"] = "1f1b";
  j["pipeline"] = 2;
  EXPECT_EQ(LayoutFromJson(j, "layout").status().message(), "layout.pipeline: unknown key");
}

// Interleaving with m % p != 0 states its microbatch group (Megatron-Core's smallest accepted G);
// read back it must be the layout's, and groups of pp are left unsaid.
TEST(Parallel, LayoutStatesTheMicrobatchGroup) {
  ParallelConfig c;
  c.pp = 4;
  c.vp = 2;
  c.schedule = ScheduleKind::kInterleaved;
  c.global_batch = 22;  // m = 22 = 3 x 6 + 4: groups of 6
  Json j = Json::parse(LayoutToJson(c).dump());
  ASSERT_TRUE(j.contains("microbatch_group"));
  EXPECT_EQ(j["microbatch_group"].get<int64_t>(), 6);
  EXPECT_TRUE(LayoutFromJson(j, "layout", c).ok());
  j["microbatch_group"] = 5;
  EXPECT_EQ(LayoutFromJson(j, "layout", c).status().message(),
            "layout.microbatch_group: 5 but this layout's group is 6");
  c.global_batch = 24;
  EXPECT_FALSE(Json::parse(LayoutToJson(c).dump()).contains("microbatch_group"));
  EXPECT_NE(LayoutFromJson(j, "layout", c).status().message().find("leave the key out"),
            std::string::npos);
}

}  // namespace
}  // namespace ptdp
