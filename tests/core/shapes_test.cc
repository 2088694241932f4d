#include "core/shapes.h"

#include <gtest/gtest.h>

namespace ptdp {
namespace {

// Field by field, not the "tiny" preset, so that the expected shapes below do not move with it.
ModelSpec HandMadeTiny() {
  ModelSpec m;
  m.name = "tiny";
  m.layers = 4;
  m.hidden = 64;
  m.heads = 4;
  m.seq_len = 32;
  m.vocab = 256;
  return m;
}

TEST(Shapes, ShardsSumToTheWholeModel) {
  // Over every tensor rank and pipeline rank, the local shards add up to the unsharded model,
  // except the tied copy of the word embedding on the last stage and tp-replicated tensors.
  ModelSpec m = HandMadeTiny();
  for (int tp : {1, 2, 4}) {
    for (int pp : {1, 2, 4}) {
      ParallelConfig c;
      c.tp = tp;
      c.pp = pp;
      int64_t total = 0;
      for (int r = 0; r < pp; ++r) {
        for (const auto& p : StageParameters(m, c, r)) {
          if (p.tied_copy) continue;
          total += p.sharding == Sharding::kReplicated ? p.LocalElements() : p.LocalElements() * tp;
        }
      }
      EXPECT_EQ(total, ParameterCount(m, tp)) << "tp=" << tp << " pp=" << pp;
    }
  }
}

// One layer on one tensor rank: 12 tensors; QKV (3h/t x h + 3h/t), projection (h x h/t + h), two
// LayerNorms (4h), fc1 (f/t x h + f/t), fc2 (h x f/t + h). The same list ChunkParameters uses.
TEST(Shapes, LayerParameterCounts) {
  ModelSpec m = HandMadeTiny();
  const int64_t h = 64, f = 256;
  for (int t : {1, 2, 4}) {
    const LayerParameters lp = LayerParameterCounts(m, t);
    EXPECT_EQ(lp.tensors, 12);
    EXPECT_EQ(lp.elements,
              3 * h / t * h + 3 * h / t + h * h / t + h + 4 * h + f / t * h + f / t + h * f / t + h)
        << t;
    ParallelConfig c;
    c.tp = t;
    c.pp = 4;  // rank 1 holds layer 1 only: no embedding, no head
    int64_t n = 0;
    for (const auto& p : ChunkParameters(m, c, 1, 0)) n += p.LocalElements();
    EXPECT_EQ(n, lp.elements) << t;
  }
}

// StageParameterElements counts a stage without listing its tensors; it must equal the sum over
// StageParameters' list for tied and untied heads (the tied copy on the last rank), rotary models
// (no position table), and every placement: one stage, even, uneven, interleaved, ZB-V's V.
TEST(Shapes, StageParameterElementsIsTheListsSum) {
  ModelSpec tied = HandMadeTiny();
  tied.layers = 12;
  ModelSpec untied = tied;
  untied.tied_embeddings = false;
  untied.rotary = true;
  untied.rmsnorm = true;
  untied.linear_bias = false;
  struct Placement {
    int pp, vp, first, last;
    ScheduleKind schedule;
  };
  const std::vector<Placement> placements = {{1, 1, 0, 0, ScheduleKind::k1F1B},
                                             {4, 1, 0, 0, ScheduleKind::k1F1B},
                                             {4, 1, 2, 4, ScheduleKind::k1F1B},
                                             {3, 2, 0, 0, ScheduleKind::kInterleaved},
                                             {3, 2, 0, 0, ScheduleKind::kZbV}};
  for (const ModelSpec& m : {tied, untied}) {
    for (const Placement& pl : placements) {
      ParallelConfig c;
      c.tp = 2;
      c.pp = pl.pp;
      c.vp = pl.vp;
      c.first_stage_layers = pl.first;
      c.last_stage_layers = pl.last;
      c.schedule = pl.schedule;
      for (int r = 0; r < c.pp; ++r) {
        int64_t listed = 0;
        for (const auto& p : StageParameters(m, c, r)) listed += p.LocalElements();
        EXPECT_EQ(StageParameterElements(m, c, r), listed)
            << "tied=" << m.tied_embeddings << " " << c.ToString() << " rank " << r;
      }
    }
  }
}

TEST(Shapes, InterleavedPlacement) {
  ModelSpec m = HandMadeTiny();
  m.layers = 8;
  ParallelConfig c;
  c.pp = 2;
  c.vp = 2;
  c.schedule = ScheduleKind::kInterleaved;
  // virtual stage = chunk * pp + rank: rank 1 holds layers 2-3 (chunk 0) and 6-7 (chunk 1).
  EXPECT_EQ(ChunkLayers(m, c, 1, 0).begin, 2);
  EXPECT_EQ(ChunkLayers(m, c, 1, 1).begin, 6);
  EXPECT_TRUE(HoldsHead(c, 1, 1));
  EXPECT_FALSE(HoldsHead(c, 1, 0));
  EXPECT_TRUE(HoldsEmbedding(c, 0, 0));
}

// Uneven stages (Megatron-LM's first / last stage layer counts): the named stages get their
// counts, the ones between share the rest evenly, every global layer is placed exactly once and
// in order, and the parameters still add up to the whole model.
TEST(Shapes, UnevenPlacement) {
  ModelSpec m = HandMadeTiny();
  m.layers = 8;
  ParallelConfig c;
  c.pp = 3;
  c.first_stage_layers = 3;
  c.last_stage_layers = 3;
  EXPECT_EQ(StageLayerCounts(m, c), (std::vector<int>{3, 2, 3}));
  EXPECT_EQ(ChunkLayers(m, c, 1, 0).begin, 3);
  EXPECT_EQ(ChunkLayers(m, c, 2, 0).begin, 5);
  c.last_stage_layers = 0;  // the last stage gets the even share of what the first leaves
  c.first_stage_layers = 2;
  EXPECT_EQ(StageLayerCounts(m, c), (std::vector<int>{2, 3, 3}));
  c.first_stage_layers = 0;
  c.last_stage_layers = 2;
  EXPECT_EQ(StageLayerCounts(m, c), (std::vector<int>{3, 3, 2}));
  m.layers = 4;
  c.pp = 2;
  c.last_stage_layers = 0;
  c.first_stage_layers = 1;
  EXPECT_EQ(StageLayerCounts(m, c), (std::vector<int>{1, 3}));
  for (int pp : {2, 3, 4}) {
    for (int first = 1; first <= 3; ++first) {
      for (int last = 0; last <= 3; ++last) {
        m.layers = 9;
        c = ParallelConfig();
        c.pp = pp;
        c.tp = 2;
        c.first_stage_layers = first;
        c.last_stage_layers = last;
        if (!c.Validate(m).ok()) continue;
        int next = 0;
        int64_t total = 0;
        for (int r = 0; r < pp; ++r) {
          const LayerRange lr = ChunkLayers(m, c, r, 0);
          EXPECT_EQ(lr.begin, next) << c.ToString();
          EXPECT_GE(lr.size(), 1) << c.ToString();
          next = lr.end;
          for (const auto& p : StageParameters(m, c, r)) {
            if (!p.tied_copy)
              total +=
                  p.sharding == Sharding::kReplicated ? p.LocalElements() : p.LocalElements() * 2;
          }
        }
        EXPECT_EQ(next, m.layers) << c.ToString();
        EXPECT_EQ(total, ParameterCount(m, 2)) << c.ToString();
        EXPECT_EQ(ChunkLayers(m, c, 0, 0).size(), first);
        if (last > 0) {
          EXPECT_EQ(ChunkLayers(m, c, pp - 1, 0).size(), last);
        }
      }
    }
  }
}

// Per-stage counts (stage_layers): rank r holds the r-th count, in order, and the parameters still
// add up to the whole model; a split the first/last form cannot express (a light middle rank).
TEST(Shapes, StageLayersPlacement) {
  ModelSpec m = HandMadeTiny();
  m.layers = 8;
  ParallelConfig c;
  c.pp = 4;
  c.tp = 2;
  c.stage_layers = {3, 1, 2, 2};
  ASSERT_TRUE(c.Validate(m).ok()) << c.Validate(m).message();
  EXPECT_EQ(StageLayerCounts(m, c), (std::vector<int>{3, 1, 2, 2}));
  const std::vector<std::pair<int, int>> ranges = {{0, 3}, {3, 4}, {4, 6}, {6, 8}};
  int64_t total = 0;
  for (int r = 0; r < c.pp; ++r) {
    const LayerRange lr = ChunkLayers(m, c, r, 0);
    EXPECT_EQ(std::make_pair(lr.begin, lr.end), ranges[size_t(r)]) << "rank " << r;
    for (const auto& p : StageParameters(m, c, r)) {
      if (!p.tied_copy)
        total += p.sharding == Sharding::kReplicated ? p.LocalElements() : p.LocalElements() * 2;
    }
  }
  EXPECT_EQ(total, ParameterCount(m, 2));
}

// Interleaved with short ends (Megatron-LM's --account-for-embedding/loss-in-pipeline-split):
// walking the virtual stages in order places every layer exactly once and in order, each virtual
// stage holds (l + e + o) / (pp vp) layers but the first (e) and the last (o) one fewer, rank 0
// and rank pp-1 hold one layer fewer than the ranks between, and the parameters add up.
TEST(Shapes, InterleavedShortEndsPlacement) {
  ModelSpec m = HandMadeTiny();
  int checked = 0;
  for (int pp : {2, 3, 4}) {
    for (int vp : {2, 3, 4}) {
      for (int layers = 4; layers <= 40; ++layers) {
        for (const auto& [e, o] : {std::pair{1, 0}, std::pair{0, 1}, std::pair{1, 1}}) {
          m.layers = layers;
          ParallelConfig c;
          c.pp = pp;
          c.vp = vp;
          c.tp = 2;
          c.schedule = ScheduleKind::kInterleaved;
          c.global_batch = pp;
          if ((layers + e + o) % pp != 0) continue;
          const int q = (layers + e + o) / pp;  // layers of each rank between
          c.first_stage_layers = e ? q - 1 : 0;
          c.last_stage_layers = o ? q - 1 : 0;
          if (!c.Validate(m).ok()) continue;
          ++checked;
          const int per = q / vp;
          int next = 0;
          for (int k = 0; k < c.VirtualStages(); ++k) {
            const StageHolder h = HolderOfStage(c.schedule, pp, k);
            const LayerRange lr = ChunkLayers(m, c, h.pp_rank, h.chunk);
            EXPECT_EQ(lr.begin, next) << c.ToString() << " stage " << k;
            const int shorter = (k == 0 ? e : 0) + (k == c.VirtualStages() - 1 ? o : 0);
            EXPECT_EQ(lr.size(), per - shorter) << c.ToString() << " stage " << k;
            next = lr.end;
          }
          EXPECT_EQ(next, layers) << c.ToString();
          const std::vector<int> counts = StageLayerCounts(m, c);
          EXPECT_EQ(counts.front(), e ? q - 1 : q) << c.ToString();
          EXPECT_EQ(counts.back(), o ? q - 1 : q) << c.ToString();
          int64_t total = 0;
          for (int r = 0; r < pp; ++r) {
            for (const auto& p : StageParameters(m, c, r)) {
              if (p.tied_copy) continue;
              total +=
                  p.sharding == Sharding::kReplicated ? p.LocalElements() : p.LocalElements() * 2;
            }
            EXPECT_EQ(StageParameterElements(m, c, r),
                      [&] {
                        int64_t n = 0;
                        for (const auto& p : StageParameters(m, c, r)) n += p.LocalElements();
                        return n;
                      }())
                << c.ToString() << " rank " << r;
          }
          EXPECT_EQ(total, ParameterCount(m, 2)) << c.ToString();
        }
      }
    }
  }
  EXPECT_GT(checked, 30);  // the loops reach many valid layouts, not none
}

// 16-bit with dropout: Korthikanti's s b h (10 + 24/t + 5 a s / (h t)) bytes per layer, plus what
// the formula leaves out: the mean and 1/std of both LayerNorms, fp32 per token, 4 x 4 s b bytes.
TEST(Shapes, KorthikantiActivationFormula) {
  ModelSpec m = HandMadeTiny();
  for (int t : {1, 2, 4}) {
    ParallelConfig c;
    c.tp = t;
    c.mbs = 2;
    const double s = m.seq_len, b = c.mbs, h = m.hidden, a = m.heads;
    const double expect = s * b * h * (10.0 + 24.0 / t + 5.0 * a * s / (h * t)) + 16 * s * b;
    EXPECT_EQ(double(ActivationBytes(LayerActivations(m, c, /*dropout=*/true), 2)), expect);
  }
  ParallelConfig c;
  EXPECT_EQ(ActivationBytes(LayerCheckpoint(m, c), 2), 2 * 32 * 64);
}

// Korthikanti et al. 2022, Table 2, per layer in 16-bit with dropout:
//   sequence parallelism                      s b h (34/t + 5 a s / (h t))
//   selective recomputation                   s b h (10 + 24/t)
//   both                                      s b h 34/t
//   full recomputation (+ sequence parallel)  2 s b h (/ t)
// plus the LayerNorm statistics (4 fp32 values per token: 16 s b bytes, 16 s b / t with sequence
// parallelism, where LayerNorm sees s/t tokens), which Table 2 leaves out. What the backward
// rebuilds: the attention core 5 a s^2 b / t, or the whole layer but its input (the checkpoint,
// 2 s b h): s b h (8 + 24/t + 5 a s / (h t)) + 16 s b.
TEST(Shapes, KorthikantiSequenceParallelAndSelective) {
  ModelSpec m = HandMadeTiny();
  for (int t : {2, 4}) {
    ParallelConfig c;
    c.tp = t;
    c.mbs = 2;
    const double s = m.seq_len, b = c.mbs, h = m.hidden, a = m.heads, sbh = s * b * h;
    auto bytes = [&](Recompute r, bool sp) {
      ParallelConfig x = c;
      x.recompute = r;
      x.sequence_parallel = sp;
      return double(ActivationBytes(LayerStash(m, x, /*dropout=*/true), 2));
    };
    const double stats = 16 * s * b;
    EXPECT_EQ(bytes(Recompute::kNone, true), sbh * (34.0 / t + 5.0 * a * s / (h * t)) + stats / t)
        << t;
    EXPECT_EQ(bytes(Recompute::kSelective, false), sbh * (10.0 + 24.0 / t) + stats) << t;
    EXPECT_EQ(bytes(Recompute::kSelective, true), sbh * 34.0 / t + stats / t) << t;
    EXPECT_EQ(bytes(Recompute::kFull, false), 2 * sbh) << t;
    EXPECT_EQ(bytes(Recompute::kFull, true), 2 * sbh / t) << t;
    ParallelConfig sel = c;
    sel.recompute = Recompute::kSelective;
    EXPECT_EQ(double(ActivationBytes(RecomputeWorkingSet(m, sel, true), 2)),
              5.0 * a * s * s * b / t);
    ParallelConfig full = c;
    full.recompute = Recompute::kFull;
    EXPECT_EQ(double(ActivationBytes(RecomputeWorkingSet(m, full, true), 2)),
              sbh * (8.0 + 24.0 / t + 5.0 * a * s / (h * t)) + stats);
    EXPECT_TRUE(RecomputeWorkingSet(m, c, true).empty());
    // Pipeline messages are split across the tensor ranks under sequence parallelism.
    ParallelConfig sp = c;
    sp.scatter_gather = false;
    EXPECT_EQ(BoundaryElements(m, sp), int64_t(sbh));
    sp.sequence_parallel = true;
    EXPECT_EQ(BoundaryElements(m, sp), int64_t(sbh) / t);
  }
}

}  // namespace
}  // namespace ptdp
