#include <gtest/gtest.h>

#include "core/cluster.h"
#include "core/json.h"
#include "core/ledger.h"
#include "planner/fix.h"
#include "planner/paper_table.h"
#include "planner/report.h"
#include "planner/search.h"
#include "schedule/schedule.h"

namespace ptdp::planner {
namespace {

TEST(Fix, ParsesEveryKey) {
  auto f = ParseFix("tp=8,pp=64,dp=6,mbs=1,vp=1,recompute=full,schedule=1f1b,scatter_gather=off");
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(*f->tp, 8);
  EXPECT_EQ(*f->pp, 64);
  EXPECT_EQ(*f->dp, 6);
  EXPECT_EQ(*f->mbs, 1);
  EXPECT_EQ(*f->vp, 1);
  EXPECT_EQ(*f->recompute, Recompute::kFull);
  EXPECT_EQ(*f->schedule, ScheduleKind::k1F1B);
  EXPECT_FALSE(*f->scatter_gather);
  EXPECT_FALSE(ParseFix("")->Any());
  auto g = ParseFix(
      "recompute=selective,sequence_parallel=on,distributed_optimizer=off,"
      "grad_accumulation_fusion=on");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(*g->recompute, Recompute::kSelective);
  EXPECT_TRUE(*g->sequence_parallel);
  EXPECT_FALSE(*g->distributed_optimizer);
  EXPECT_TRUE(*g->grad_accumulation_fusion);
  EXPECT_TRUE(*ParseFix("fused_attention=on")->fused_attention);
  EXPECT_TRUE(*ParseFix("grad_reduce_bf16=on")->grad_reduce_bf16);
  EXPECT_FALSE(*ParseFix("grad_reduce_bf16=off")->grad_reduce_bf16);
  EXPECT_EQ(ParseFix("grad_reduce_bf16=yes").status().message(),
            "--fix: grad_reduce_bf16: expected on or off, got \"yes\"");
  EXPECT_TRUE(ParseFix("fused_attention=off")->Any());
  auto one = ParseFix("tp=1,sequence_parallel=on");
  ASSERT_FALSE(one.ok());
  EXPECT_EQ(one.status().message(), "--fix: sequence_parallel: needs tp > 1 (tp=1 is fixed)");
  auto rc = ParseFix("recompute=partial");
  ASSERT_FALSE(rc.ok());
  EXPECT_EQ(rc.status().message().rfind("--fix: recompute: 'partial' is not one of", 0), 0u)
      << rc.status().message();
  auto bad = ParseFix("sequence_parallel=yes");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sequence_parallel: expected on or off"),
            std::string::npos);
}

TEST(Fix, RejectsBadInputNamingTheKey) {
  auto a = ParseFix("tp=0");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("tp"), std::string::npos);
  auto b = ParseFix("tensor=8");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("tensor"), std::string::npos);
  EXPECT_FALSE(ParseFix("schedule=zigzag").ok());
  auto zb = ParseFix("schedule=zb-h2");  // a layout schedule the search enumerates
  ASSERT_TRUE(zb.ok()) << zb.status().message();
  EXPECT_EQ(*zb->schedule, ScheduleKind::kZbH2);
  EXPECT_FALSE(ParseFix("scatter_gather=maybe").ok());
  EXPECT_FALSE(ParseFix("tp").ok());
  auto dup = ParseFix("tp=2,tp=4");
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("tp: given more than once"), std::string::npos)
      << dup.status().message();
}

TEST(Search, CountsAreBoundedBeforeAnyWork) {
  EXPECT_TRUE(CheckSearchCounts(3072, 0, 3072).ok());
  EXPECT_TRUE(CheckSearchCounts(kMaxGpus, 0, kMaxGlobalBatch).ok());
  auto g = CheckSearchCounts(2147483640, 0, 8);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("--gpus"), std::string::npos);
  auto b = CheckSearchCounts(8, 0, int64_t(1) << 33);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("--global-batch"), std::string::npos);
  EXPECT_FALSE(CheckSearchCounts(8, -1, 8).ok());
  EXPECT_FALSE(CheckSearchCounts(8, 0, 0).ok());
}

TEST(Search, HugeHighlyCompositeCountsAnswerQuickly) {
  // 2^30 sequences and kMaxGpus (2^20) GPUs: the divisor lists come from trial division up to
  // the square root (2^15 steps), not up to n; the search itself finds no fitting layout or a best
  // one. (A hang here ends at ctest's timeout; tests/planner/bad_input.sh holds the CLI to 5 s.)
  auto cluster = LoadCluster("selene", kMaxGpus);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto model = LoadModel("gpt-1.7b");
  ASSERT_TRUE(model.ok());
  SearchOptions o;
  o.global_batch = kMaxGlobalBatch;
  o.fix.tp = 8;
  o.fix.pp = 1;
  o.fix.mbs = 1;
  auto r = Search(*model, *cluster, o);
  EXPECT_TRUE(r.ok() || r.status().code() == StatusCode::kDoesNotFit) << r.status().ToString();
}

SearchResult Search1T(SearchOptions o = SearchOptions()) {
  auto m = LoadModel("gpt-1t");
  auto c = LoadCluster("selene", 3072);
  PTDP_CHECK(m.ok() && c.ok());
  o.global_batch = 3072;
  auto r = Search(*m, *c, o);
  PTDP_CHECK_MSG(r.ok(), r.status().message());
  return *r;
}

// Acceptance: the best layout for the 1T model keeps tensor parallelism within a node, and the
// search reports what it rejected.
TEST(Search, OneTrillionBestKeepsTensorParallelismInANode) {
  const SearchResult r = Search1T();
  ASSERT_FALSE(r.top.empty());
  const ParallelConfig& best = r.top.front().layout;
  EXPECT_LE(best.tp, 8);
  EXPECT_EQ(best.WorldSize(), 3072);
  EXPECT_GT(r.rejected.at("tp_exceeds_node"), 0);
  EXPECT_GT(r.rejected.at("out_of_memory"), 0);
  EXPECT_GT(r.considered, r.feasible);
  for (size_t i = 1; i < r.top.size(); ++i) {
    EXPECT_LE(r.top[i - 1].prediction.iteration_s, r.top[i].prediction.iteration_s);
  }
  EXPECT_LE(r.top.front().prediction.peak_memory, Bytes(80) << 30);
}

// The GiB an out-of-memory refusal quotes ("needs X GiB per GPU"), or -1.
double QuotedGiB(const std::string& message) {
  const size_t at = message.find(" needs ");
  return at == std::string::npos ? -1 : std::stod(message.substr(at + 7));
}

// When nothing fits, the refusal quotes the layout that needs the least memory (it says how far
// the closest layout is), not the first one enumerated: gpt-1t on 64 H100s. Searching that layout
// alone quotes the same figure; a search kept to other layouts quotes no less.
TEST(Search, OutOfMemoryQuotesTheLayoutClosestToFitting) {
  auto m = LoadModel("gpt-1t");
  auto cluster = LoadCluster("dgx-h100", 64);
  ASSERT_TRUE(m.ok() && cluster.ok());
  SearchOptions o;
  o.global_batch = 64;
  auto all = Search(*m, *cluster, o);
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.status().code(), StatusCode::kDoesNotFit);
  const std::string msg = all.status().message();
  const size_t open = msg.find(" (tp="), close = msg.find(": the least memory");
  ASSERT_NE(open, std::string::npos) << msg;
  ASSERT_NE(close, std::string::npos) << msg;
  const double least = QuotedGiB(msg);
  ASSERT_GT(least, 80.0) << msg;
  auto fix = ParseFix(msg.substr(open + 2, close - open - 2));
  ASSERT_TRUE(fix.ok()) << fix.status().ToString();
  o.fix = *fix;
  auto alone = Search(*m, *cluster, o);
  ASSERT_FALSE(alone.ok());
  EXPECT_DOUBLE_EQ(QuotedGiB(alone.status().message()), least) << alone.status().message();
  for (const char* other : {"tp=8,pp=8,recompute=none", "tp=4,pp=16", "tp=1"}) {
    auto f = ParseFix(other);
    ASSERT_TRUE(f.ok()) << other;
    o.fix = *f;
    auto r = Search(*m, *cluster, o);
    ASSERT_FALSE(r.ok()) << other;
    EXPECT_GE(QuotedGiB(r.status().message()), least) << other << ": " << r.status().message();
  }
}

// The search scores the zero-bubble schedules beside the others and keeps the best of each family:
// GPT-3 175B on 1024 H100s (global batch 1536). Each family's best is the fastest scored layout of
// that family (no scored layout of it is faster), it fits, and the overall best is no slower.
TEST(Search, KeepsTheBestInterleavedAndZeroBubbleLayouts) {
  auto m = LoadModel("gpt3-175b");
  ASSERT_TRUE(m.ok());
  auto cluster = LoadCluster("dgx-h100", 1024);
  ASSERT_TRUE(cluster.ok());
  SearchOptions o;
  o.global_batch = 1536;
  o.keep = 400;
  auto r = Search(*m, *cluster, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->best_interleaved && r->best_zero_bubble);
  EXPECT_EQ(r->best_interleaved->layout.schedule, ScheduleKind::kInterleaved);
  EXPECT_TRUE(SplitsBackward(r->best_zero_bubble->layout.schedule));
  EXPECT_GT(r->zero_bubble_evaluated, 0);
  EXPECT_LE(r->top.front().prediction.iteration_s, r->best_zero_bubble->prediction.iteration_s);
  EXPECT_LE(r->best_zero_bubble->prediction.peak_memory, Bytes(80) << 30);
  for (const Candidate& c : r->top) {
    if (c.layout.schedule == ScheduleKind::kInterleaved) {
      EXPECT_GE(c.prediction.iteration_s, r->best_interleaved->prediction.iteration_s);
    }
    if (SplitsBackward(c.layout.schedule)) {
      EXPECT_GE(c.prediction.iteration_s, r->best_zero_bubble->prediction.iteration_s);
    }
  }
  EXPECT_NE(SearchToTable(*m, *cluster, *r, 0).find("zero-bubble vs interleaved"),
            std::string::npos);
}

// ZB-V is in the enumeration (vp = 2, the V), its memory the ledger's replay of its order, equal to
// the walk of the Program the layout builds, rank by rank.
TEST(Search, EnumeratesZbVWithTheLedgersMemory) {
  auto m = LoadModel("gpt-1.7b");
  ASSERT_TRUE(m.ok());
  auto cluster = LoadCluster("selene", 8);
  ASSERT_TRUE(cluster.ok());
  SearchOptions o;
  o.global_batch = 64;
  o.fix.schedule = ScheduleKind::kZbV;
  auto r = Search(*m, *cluster, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->top.empty());
  ASSERT_TRUE(r->best_zero_bubble);
  EXPECT_EQ(r->best_zero_bubble->layout.schedule, ScheduleKind::kZbV);
  for (const Candidate& c : r->top) {
    ASSERT_EQ(c.layout.schedule, ScheduleKind::kZbV);
    EXPECT_EQ(c.layout.vp, 2);
    auto program = schedule::BuildProgram(*m, c.layout);
    ASSERT_TRUE(program.ok()) << program.status().ToString();
    for (const costmodel::StageMemory& sm : c.prediction.memory) {
      EXPECT_EQ(sm.activations, PeakActivationBytes(*m, c.layout, *program, sm.pp_rank))
          << c.layout.ToString() << " rank " << sm.pp_rank;
    }
  }
}

// --fix evaluates a layout the search would not propose (a tensor group across nodes).
TEST(Search, FixEvaluatesCrossNodeTensorGroup) {
  SearchOptions o;
  o.fix = *ParseFix("tp=16,pp=32,mbs=1,schedule=1f1b,recompute=full,scatter_gather=on");
  const SearchResult r = Search1T(o);
  ASSERT_EQ(r.top.size(), 1u);
  EXPECT_EQ(r.top[0].layout.tp, 16);
  EXPECT_EQ(r.top[0].layout.dp, 6);
  // Fixing only some parts searches the rest.
  SearchOptions partial;
  partial.fix = *ParseFix("pp=64");
  const SearchResult p = Search1T(partial);
  for (const auto& c : p.top) EXPECT_EQ(c.layout.pp, 64);
  EXPECT_GT(p.top.size(), 1u);
}

// Options beyond the paper are searched only when allowed; allowed, the 1T model's best layout
// uses them (they save memory and time), and its memory is lower than the paper-space best.
TEST(Search, LaterOptionsOnlyWhenAllowed) {
  const SearchResult plain = Search1T();
  for (const auto& c : plain.top) {
    EXPECT_NE(c.layout.recompute, Recompute::kSelective);
    EXPECT_FALSE(c.layout.sequence_parallel || c.layout.distributed_optimizer ||
                 c.layout.grad_accumulation_fusion);
  }
  SearchOptions o;
  o.selective_recompute = o.sequence_parallel = o.distributed_optimizer =
      o.grad_accumulation_fusion = true;
  const SearchResult later = Search1T(o);
  const ParallelConfig& best = later.top.front().layout;
  EXPECT_TRUE(best.sequence_parallel);
  EXPECT_TRUE(best.distributed_optimizer);
  EXPECT_TRUE(best.grad_accumulation_fusion);
  EXPECT_EQ(best.recompute, Recompute::kSelective);
  EXPECT_LT(later.top.front().prediction.iteration_s, plain.top.front().prediction.iteration_s);
  EXPECT_GT(later.considered, plain.considered);
  // --fix can still turn one off.
  SearchOptions f = o;
  f.fix = *ParseFix("sequence_parallel=off");
  for (const auto& c : Search1T(f).top) EXPECT_FALSE(c.layout.sequence_parallel);
}

// The review's case (cuda-runtime-review.md section 7): gpt-1.3b on one dgx-h100 GPU at
// microbatch 8 does not fit with the s^2 attention tensors (110 GiB) but fits with fused
// attention, which keeps 4 a s b bytes of log-sum-exp per layer instead of 5 a s^2 b; searched
// only when allowed, never with selective recomputation, and emitted as --attention-backend flash.
TEST(Search, FusedAttentionLiftsTheScoreCap) {
  auto m = LoadModel("gpt-1.3b");
  auto c = LoadCluster("dgx-h100", 1);
  ASSERT_TRUE(m.ok() && c.ok());
  SearchOptions o;
  o.global_batch = 8;
  o.fix = *ParseFix("tp=1,pp=1,dp=1,mbs=8,recompute=none");
  auto unfused = Search(*m, *c, o);
  ASSERT_FALSE(unfused.ok());
  EXPECT_EQ(unfused.status().code(), StatusCode::kDoesNotFit);
  o.fused_attention = true;
  auto fused = Search(*m, *c, o);
  ASSERT_TRUE(fused.ok()) << fused.status().message();
  const ParallelConfig& best = fused->top.front().layout;
  EXPECT_TRUE(best.fused_attention);
  EXPECT_LT(fused->top.front().prediction.peak_memory, Bytes(80) << 30);
  EXPECT_NE(MegatronArgs(*m, best).find("--attention-backend flash"), std::string::npos);
  o.fix = *ParseFix("tp=1,pp=1,dp=1,mbs=8");
  o.selective_recompute = true;
  auto any = Search(*m, *c, o);
  ASSERT_TRUE(any.ok());
  for (const auto& cand : any->top) {
    EXPECT_FALSE(cand.layout.fused_attention && cand.layout.recompute == Recompute::kSelective);
  }
}

TEST(Search, NoLayoutFits) {
  auto m = LoadModel("gpt-1t");
  auto c = LoadCluster("selene", 8);
  SearchOptions o;
  o.global_batch = 8;
  auto r = Search(*m, *c, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDoesNotFit);
  EXPECT_NE(r.status().message().find("GiB"), std::string::npos) << r.status().message();
}

// The refiner seam: it re-scores the top K and the ranking follows its answer.
TEST(Search, RefinerReRanksTheTop) {
  SearchOptions o;
  o.keep = 5;
  o.refine_top = 3;
  int calls = 0;
  ParallelConfig penalised;
  bool first = true;
  o.refiner = [&](const ModelSpec&, const ClusterSpec&, const ParallelConfig& c,
                  const costmodel::CostTable& t) -> Result<costmodel::PipelineTime> {
    ++calls;
    costmodel::PipelineTime pt = costmodel::ClosedFormPipeline().Time(t, c);
    if (first) {  // make the analytical winner look slow
      first = false;
      penalised = c;
      pt.total += 1000;
      pt.bubble += 1000;
    }
    return pt;
  };
  const SearchResult r = Search1T(o);
  EXPECT_EQ(calls, 3);
  EXPECT_NE(r.top.front().layout.ToString(), penalised.ToString());
  EXPECT_TRUE(r.top.front().refined);
}

// Published runs after the paper (Korthikanti et al. 2022, Megatron-LM README MFU), with 2022's
// options: within 10% of the published model FLOPs utilisation.
TEST(Paper, LaterRunsWithinTenPercent) {
  auto rows = CompareKorthikanti2022("selene");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 4u);
  for (const auto& r : *rows) {
    EXPECT_LE(std::abs(r.error_percent), 10.0)
        << r.run.model << ": predicted MFU " << r.predicted_mfu_percent << "%, published "
        << r.run.published_mfu_percent << "%";
    EXPECT_LE(r.predicted.prediction.peak_memory, Bytes(80) << 30) << r.run.model;
  }
}

// The acceptance is every row of the paper's Table 1, with the paper's layout on selene,
// within +-10% of the published TFLOP/s per GPU. Nine rows meet it and are held to it here; the
// 76B row is not (the known miss below). 1.7B and 3.6B joined on 2026-11-28 (+9.5%, +9.6%) when
// the derived GEMM table gained its memory floor (docs/paper.md).
bool IsKnownMiss(const std::string& model) {
  return model == "gpt-76b";
}

TEST(Paper, TableOneWithinTenPercent) {
  auto rows = ComparePaperTable1("selene");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 10u);
  for (const auto& r : *rows) {
    EXPECT_LE(r.predicted.prediction.peak_memory, Bytes(80) << 30) << r.row.model;
    EXPECT_EQ(r.predicted.layout.precision, Precision::kFp16) << r.row.model;
    if (IsKnownMiss(r.row.model)) continue;  // asserted below
    EXPECT_LE(std::abs(r.error_percent), 10.0)
        << r.row.model << ": predicted " << r.predicted.prediction.tflops_per_gpu << ", published "
        << r.row.published_tflops_per_gpu;
  }
}

// A row predicted beyond 10% with nothing fitted to pull it in (docs/paper.md), recorded as it
// stands: the check fails when the row comes within 10% (then drop it from IsKnownMiss, so that
// TableOneWithinTenPercent holds it) or when it drifts beyond 12% (a regression).
void ExpectKnownMiss(const std::string& model) {
  auto rows = ComparePaperTable1("selene");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  int found = 0;
  for (const auto& r : *rows) {
    if (r.row.model != model) continue;
    ++found;
    EXPECT_GT(std::abs(r.error_percent), 10.0) << "fixed: hold " << model << " to 10%";
    EXPECT_LE(std::abs(r.error_percent), 12.0)
        << "predicted " << r.predicted.prediction.tflops_per_gpu;
  }
  EXPECT_EQ(found, 1);
}

// 76B: +11.1% with the 2021 bookkeeping (+11.3% before it), unchanged by the memory floor.
TEST(Paper, KnownMiss76B) {
  ExpectKnownMiss("gpt-76b");
}

// The precision of every candidate is the profile's by default (selene: fp16), or the one asked
// for; bf16 keeps fp32 main gradients (18 bytes per parameter against fp16's 16), so the same
// layout needs more memory, and the Megatron-LM flags name the dtype.
TEST(Search, PrecisionSetsEveryLayoutAndItsMemory) {
  SearchOptions o;
  o.fix = *ParseFix("tp=8,pp=64,mbs=1,vp=1,schedule=1f1b,recompute=full,scatter_gather=on");
  const SearchResult fp16 = Search1T(o);
  ASSERT_EQ(fp16.top.size(), 1u);
  EXPECT_EQ(fp16.top[0].layout.precision, Precision::kFp16);
  o.precision = Precision::kBf16;
  const SearchResult bf16 = Search1T(o);
  ASSERT_EQ(bf16.top.size(), 1u);
  EXPECT_EQ(bf16.top[0].layout.precision, Precision::kBf16);
  const costmodel::StageMemory& a = fp16.top[0].prediction.memory[0];
  const costmodel::StageMemory& b = bf16.top[0].prediction.memory[0];
  EXPECT_EQ(b.grads, 2 * a.grads);
  EXPECT_EQ(b.weights, a.weights);
  EXPECT_EQ(b.activations, a.activations);
  EXPECT_GT(bf16.top[0].prediction.peak_memory, fp16.top[0].prediction.peak_memory);
  auto m = LoadModel("gpt-1t");
  ASSERT_TRUE(m.ok());
  EXPECT_NE(MegatronArgs(*m, fp16.top[0].layout).find(" --fp16"), std::string::npos);
  EXPECT_NE(MegatronArgs(*m, bf16.top[0].layout).find(" --bf16"), std::string::npos);
  // --fix precision= says the same; a different --precision beside it is refused; fp32 on selene,
  // whose GEMM table is fp16, comes with a caveat.
  SearchOptions f;
  f.fix = *ParseFix("tp=8,pp=64,mbs=1,vp=1,schedule=1f1b,recompute=full,precision=bf16");
  EXPECT_EQ(Search1T(f).top[0].layout.precision, Precision::kBf16);
  auto cluster = LoadCluster("selene", 3072);
  ASSERT_TRUE(cluster.ok());
  f.global_batch = 3072;
  f.precision = Precision::kFp16;
  EXPECT_FALSE(Search(*m, *cluster, f).ok());
  SearchOptions fp32;
  fp32.global_batch = 3072;
  fp32.precision = Precision::kFp32;
  // fp32 on selene's fp16 table is planned (fp32 memory, 16 bytes per parameter) with a caveat.
  auto planned = Search(*m, *cluster, fp32);
  ASSERT_TRUE(planned.ok()) << planned.status().message();
  EXPECT_EQ(planned->top[0].layout.precision, Precision::kFp32);
  EXPECT_NE(PrecisionCaveat(*cluster, Precision::kFp32).find("GEMM table is fp16"),
            std::string::npos);
  EXPECT_EQ(PrecisionCaveat(*cluster, Precision::kBf16), "");
}

// Llama 3 405B on the Llama 3 paper's layout (Dubey et al. 2024, Table 4: 16,384 H100s, t 8, p 16,
// d 128 at sequence 8192): 126 layers over 16 stages need lighter ends (7/7), and the flags say the
// model's architecture, the precision and the attention the plan priced. A GPT plan's flags carry
// none of the Llama options.
TEST(Search, LlamaPlanAndMegatronFlags) {
  auto m = LoadModel("llama3.1-405b");
  auto c = LoadCluster("dgx-h100", 16384);
  ASSERT_TRUE(m.ok() && c.ok());
  SearchOptions o;
  o.global_batch = 2048;
  o.fused_attention = o.sequence_parallel = o.distributed_optimizer = true;
  o.fix = *ParseFix("tp=8,pp=16,dp=128");
  auto r = Search(*m, *c, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const ParallelConfig& best = r->top.front().layout;
  EXPECT_EQ(best.first_stage_layers + best.last_stage_layers, 126 - 14 * 8);
  const std::string args = MegatronArgs(*m, best);
  for (const char* flag :
       {"--group-query-attention --num-query-groups 8", "--swiglu", "--normalization RMSNorm",
        "--position-embedding-type rope --rotary-base 500000", "--disable-bias-linear",
        "--untie-embeddings-and-output-weights", "--bf16", "--attention-backend flash",
        "--use-distributed-optimizer", "--sequence-parallel", "--ffn-hidden-size 53248"}) {
    EXPECT_NE(args.find(flag), std::string::npos) << flag << " not in " << args;
  }
  // tp 16 would split 8 key/value heads: never scored.
  o.fix = *ParseFix("tp=16");
  o.allow_cross_node_tp = true;
  auto split = Search(*m, *c, o);
  EXPECT_FALSE(split.ok());
  const auto gpt = LoadModel("gpt-1.3b");
  ASSERT_TRUE(gpt.ok());
  ParallelConfig layout;
  layout.global_batch = 8;
  layout.precision = Precision::kFp16;
  const std::string gpt_args = MegatronArgs(*gpt, layout);
  EXPECT_NE(gpt_args.find("--fp16"), std::string::npos) << gpt_args;
  EXPECT_NE(gpt_args.find("--attention-backend unfused"), std::string::npos) << gpt_args;
  EXPECT_EQ(gpt_args.find("--swiglu"), std::string::npos) << gpt_args;
  EXPECT_EQ(gpt_args.find("--untie"), std::string::npos) << gpt_args;
  // Megatron's default norm epsilon (1e-5) is left out; another one is said.
  EXPECT_EQ(args.find("--norm-epsilon"), std::string::npos) << args;
  ModelSpec qwen_like = *m;
  qwen_like.norm_eps = 1e-6;
  EXPECT_NE(MegatronArgs(qwen_like, best).find("--norm-epsilon 1e-06"), std::string::npos);
  // Llama 3.1's RoPE scaling (the preset's, factor 8 as its config.json): Megatron-Core's flags
  // carry the factor; other low and high frequency factors or original length are said in a note,
  // not silently dropped; a model without scaling has no such flag.
  ModelSpec scaled = *m;
  ASSERT_EQ(scaled.rope_scaling_factor, 8);
  EXPECT_NE(args.find("--use-rope-scaling --rope-scaling-factor 8"), std::string::npos) << args;
  EXPECT_EQ(MegatronModelNote(scaled), "");
  ModelSpec unscaled = *m;
  unscaled.rope_scaling_factor = 0;
  EXPECT_EQ(MegatronArgs(unscaled, best).find("--use-rope-scaling"), std::string::npos);
  scaled.rope_original_max_positions = 4096;
  EXPECT_NE(MegatronModelNote(scaled).find("this model's are 1, 4 and 4096"), std::string::npos)
      << MegatronModelNote(scaled);
  // YaRN: DeepSeek-V3's as multi-latent attention's rope type with its factor and mscales (its
  // original length and betas are the ones Megatron-Core fixes); a GPT's as the position embedding
  // type with every number; Llama 3.1's scaling under latent attention is said in the note.
  const ModelSpec v3 = LoadModel("deepseek-v3").value();
  const std::string v3_args = MegatronArgs(v3, layout);
  EXPECT_NE(v3_args.find("--position-embedding-type rope --rotary-base 10000 --rope-type yarn "
                         "--rotary-scaling-factor 40 --mscale 1 --mscale-all-dim 1"),
            std::string::npos)
      << v3_args;
  EXPECT_EQ(MegatronModelNote(v3), "");
  ModelSpec v3_short = v3;
  v3_short.rope_original_max_positions = 2048;
  EXPECT_NE(MegatronModelNote(v3_short).find("this model's are 2048, 32 and 1"), std::string::npos);
  ModelSpec llama_yarn = *m;
  llama_yarn.rope_scaling_type = "yarn";
  llama_yarn.rope_scaling_factor = 4;
  llama_yarn.rope_original_max_positions = 32768;
  EXPECT_NE(MegatronArgs(llama_yarn, best)
                .find("--position-embedding-type yarn --rotary-base 500000 --rotary-scaling-factor "
                      "4 --yarn-original-max-position-embeddings 32768 --yarn-beta-fast 32 "
                      "--yarn-beta-slow 1 --mscale 1 --mscale-all-dim 0"),
            std::string::npos)
      << MegatronArgs(llama_yarn, best);
  EXPECT_EQ(MegatronModelNote(llama_yarn), "");
  ModelSpec mla_llama3 = v3;
  mla_llama3.rope_scaling_type = "llama3";
  EXPECT_NE(MegatronModelNote(mla_llama3).find("not Llama 3.1's scaling"), std::string::npos);
}

// Interleaving for any m >= p: GPT 1.7B (24 layers) on 8 GPUs with t = 1, p = 4 (so d = 2) and a
// global batch of 20 has m = 20 / (b d) in {10, 5, 2, 1}: the interleaved layouts it keeps have
// m = 10 or 5, neither a multiple of p (Megatron-Core's groups of 5 microbatches), and m = 2, 1 are
// refused for having fewer microbatches than p.
TEST(Search, InterleavesMicrobatchCountsThatAreNotMultiplesOfP) {
  auto m = LoadModel("gpt-1.7b");
  auto cluster = LoadCluster("selene", 8);
  ASSERT_TRUE(m.ok() && cluster.ok());
  SearchOptions o;
  o.global_batch = 20;
  o.fix = *ParseFix("tp=1,pp=4,schedule=interleaved");
  o.keep = 100;
  auto r = Search(*m, *cluster, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->top.empty());
  EXPECT_GT(r->rejected.at("microbatches_fewer_than_pp"), 0);
  for (const Candidate& c : r->top) {
    EXPECT_EQ(c.layout.schedule, ScheduleKind::kInterleaved);
    EXPECT_GE(c.layout.Microbatches(), c.layout.pp) << c.layout.ToString();
    EXPECT_NE(c.layout.Microbatches() % c.layout.pp, 0) << c.layout.ToString();
  }
  EXPECT_TRUE(r->top.front().layout.Validate(*m).ok());
}

}  // namespace
}  // namespace ptdp::planner
