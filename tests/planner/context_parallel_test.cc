// Context parallelism (ParallelConfig::cp, Megatron-Core's --context-parallel-size): the layout's
// rules, its plan-file form, the ledger on s / cp tokens, the ring attention's price
// (costmodel/layer_cost.h AddContextRing), the gradient group of d * cp ranks, the search and
// --emit megatron.
#include <gtest/gtest.h>

#include "core/cluster.h"
#include "core/ledger.h"
#include "core/model.h"
#include "core/shapes.h"
#include "core/software.h"
#include "costmodel/estimate.h"
#include "costmodel/layer_cost.h"
#include "planner/fix.h"
#include "planner/report.h"
#include "planner/search.h"

namespace ptdp::planner {
namespace {

ModelSpec Llama3_8b() {
  auto m = LoadModel("llama3-8b");
  EXPECT_TRUE(m.ok());
  return *m;
}

// NeMo 24.07's Llama 3 8B run on one DGX H100 (docs/validation-h100.md): t = p = 1, cp = 2.
ParallelConfig NemoLlama3_8b(int cp) {
  ParallelConfig c;
  c.dp = 8 / cp;
  c.cp = cp;
  c.global_batch = 128;
  c.precision = Precision::kFp8;
  c.fused_attention = true;
  c.distributed_optimizer = true;
  c.grad_accumulation_fusion = true;
  c.grad_reduce_bf16 = true;
  return c;
}

TEST(ContextParallel, ValidateNamesTheFieldAndTheReason) {
  const ModelSpec m = Llama3_8b();
  ParallelConfig c = NemoLlama3_8b(2);
  EXPECT_TRUE(c.Validate(m).ok()) << c.Validate(m).message();
  c.fused_attention = false;
  EXPECT_NE(c.Validate(m).message().find("cp: 2 needs fused_attention=on"), std::string::npos)
      << c.Validate(m).message();
  c = NemoLlama3_8b(2);
  c.cp = 3;  // 8192 is not a multiple of 6
  c.dp = 1;
  EXPECT_NE(c.Validate(m).message().find("divisible by 2 cp = 6"), std::string::npos)
      << c.Validate(m).message();
  c.cp = 0;
  EXPECT_NE(c.Validate(m).message().find("cp"), std::string::npos);
  // Sequence parallelism splits a rank's s / cp tokens over the tensor ranks.
  ModelSpec small = m;
  small.seq_len = 40;  // s % t = 0, but s / cp = 20 is not
  c = NemoLlama3_8b(2);
  c.tp = 8;
  c.dp = 1;
  c.sequence_parallel = true;
  EXPECT_NE(c.Validate(small).message().find("does not divide the s / cp = 20"), std::string::npos)
      << c.Validate(small).message();
}

TEST(ContextParallel, PlanFileAndTextStateItOnlyWhenUsed) {
  const ParallelConfig with = NemoLlama3_8b(2);
  EXPECT_NE(with.ToString().find(",dp=4,cp=2,mbs="), std::string::npos) << with.ToString();
  const Json j = Json::parse(LayoutToJson(with).dump());
  EXPECT_EQ(j.at("cp").get<int>(), 2);
  auto back = LayoutFromJson(j, "layout");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->cp, 2);
  EXPECT_EQ(back->WorldSize(), 8);
  const ParallelConfig without = NemoLlama3_8b(1);
  EXPECT_EQ(without.ToString().find("cp="), std::string::npos);
  EXPECT_FALSE(Json::parse(LayoutToJson(without).dump()).contains("cp"));
  auto fix = ParseFix("cp=2,tp=1");
  ASSERT_TRUE(fix.ok());
  EXPECT_EQ(*fix->cp, 2);
  EXPECT_TRUE(fix->Admits(with));
  EXPECT_FALSE(fix->Admits(without));
  auto contradiction = ParseFix("cp=2,fused_attention=off");
  ASSERT_FALSE(contradiction.ok());
  EXPECT_NE(contradiction.status().message().find("cp"), std::string::npos);
}

// With fused attention nothing a layer keeps is quadratic in s: a context-parallel rank keeps
// what the model of seq_len s / cp keeps, and sends boundary messages of that size.
TEST(ContextParallel, TheLedgerIsTheShards) {
  const ModelSpec m = Llama3_8b();
  ModelSpec shard = m;
  shard.seq_len = m.seq_len / 2;
  ParallelConfig c = NemoLlama3_8b(2);
  c.pp = 2;
  c.dp = 2;
  ParallelConfig one = c;
  one.cp = 1;
  const StashPrices split = StashPricesOf(m, c), whole = StashPricesOf(shard, one);
  EXPECT_EQ(split.layer, whole.layer);
  EXPECT_EQ(split.head, whole.head);
  EXPECT_EQ(split.embedding, whole.embedding);
  EXPECT_EQ(PipelineMessageBytes(m, c), PipelineMessageBytes(shard, one));
  EXPECT_EQ(PeakWorkspaceBytes(m, c, 0),
            PeakWorkspaceBytes(shard, one, 0) + ContextRingBytes(m, c));
  EXPECT_GT(ContextRingBytes(m, c), 0);
  EXPECT_EQ(ContextRingBytes(m, one), 0);
  // The distributed optimizer shards over the d * cp ranks that hold the same weights.
  const int64_t params = StageParameterElements(m, c, 0);
  ParallelConfig four_replicas = one;
  four_replicas.dp = 4;
  EXPECT_EQ(OptimizerBytes(c, params), OptimizerBytes(four_replicas, params));
}

// The ring on a link with no cost adds cp - 1 blocks of attention and only the last gradient's
// latency; on a slow link each send shows beyond its block.
TEST(ContextParallel, TheRingAddsBlocksAndWhatItsSendsDoNotHide) {
  const ModelSpec m = Llama3_8b();
  auto cluster = LoadCluster("dgx-h100", 8);
  ASSERT_TRUE(cluster.ok());
  const HardwareProfile& hw = cluster->profile;
  ModelSpec shard = m;
  const int cp = 4, tp = 1, mbs = 1;
  shard.seq_len = m.seq_len / cp;
  const costmodel::PieceCost block = costmodel::FusedAttentionCost(shard, hw, tp, mbs);
  ASSERT_GT(block.forward.gemm, 0);
  costmodel::LinkCost free;
  free.latency = 1e-6;
  free.bandwidth_Bps = 1e30;
  costmodel::PieceCost fast;
  costmodel::AddContextRing(shard, hw, Precision::kBf16, tp, mbs, cp, free, &fast);
  EXPECT_DOUBLE_EQ(fast.forward.gemm, (cp - 1) * block.forward.gemm);
  EXPECT_DOUBLE_EQ(fast.backward.gemm, (cp - 1) * block.backward.gemm);
  EXPECT_DOUBLE_EQ(fast.forward.tp_comm, 0.0);
  EXPECT_DOUBLE_EQ(fast.backward.tp_comm, 1e-6);  // the last gradient, after the last block
  const costmodel::ContextRingBytes merge =
      costmodel::ContextRingMergeBytes(shard, Precision::kBf16, tp, mbs, cp);
  EXPECT_DOUBLE_EQ(fast.forward.memory, costmodel::MemoryBoundTime(hw, merge.forward, cp + 1));
  // A link whose send of a chunk's keys and values takes 10x the forward block.
  const double kv = costmodel::ContextRingSendBytes(shard, Precision::kBf16, tp, mbs);
  costmodel::LinkCost slow;
  slow.bandwidth_Bps = kv / (10 * block.forward.gemm);
  costmodel::PieceCost exposed;
  costmodel::AddContextRing(shard, hw, Precision::kBf16, tp, mbs, cp, slow, &exposed);
  EXPECT_NEAR(exposed.forward.tp_comm, (cp - 1) * 9 * block.forward.gemm,
              1e-9 * block.forward.gemm);
  const double one = slow.Time(Bytes(kv)), two = slow.Time(Bytes(2 * kv));
  EXPECT_NEAR(exposed.backward.tp_comm,
              std::max(0.0, one - block.backward.gemm) +
                  (cp - 2) * std::max(0.0, two - block.backward.gemm) + one,
              1e-12);
}

// The same attention on collectives (ptdp's runtime;
// SoftwareProfile::context_parallel_collectives): the same blocks, every transfer exposed, no
// merges; and the ptdp stack selects it.
TEST(ContextParallel, OnCollectivesNothingHidesAndNothingMerges) {
  const ModelSpec m = Llama3_8b();
  auto cluster = LoadCluster("dgx-h100", 8);
  ASSERT_TRUE(cluster.ok());
  const HardwareProfile& hw = cluster->profile;
  ModelSpec shard = m;
  const int cp = 4, tp = 1, mbs = 1;
  shard.seq_len = m.seq_len / cp;
  const costmodel::PieceCost block = costmodel::FusedAttentionCost(shard, hw, tp, mbs);
  const double kv = costmodel::ContextRingSendBytes(shard, Precision::kBf16, tp, mbs);
  costmodel::LinkCost link;
  link.latency = 1e-6;
  link.bandwidth_Bps = kv / (0.5 * block.forward.gemm);  // a send takes half a block
  costmodel::PieceCost ring, collectives;
  costmodel::AddContextRing(shard, hw, Precision::kBf16, tp, mbs, cp, link, &ring);
  costmodel::AddContextCollectives(shard, hw, Precision::kBf16, tp, mbs, cp, link, &collectives);
  EXPECT_DOUBLE_EQ(collectives.forward.gemm, ring.forward.gemm);
  EXPECT_DOUBLE_EQ(collectives.backward.gemm, ring.backward.gemm);
  const double one = link.Time(Bytes(kv));
  EXPECT_DOUBLE_EQ(ring.forward.tp_comm, 0.0);  // each send hides behind its block
  EXPECT_DOUBLE_EQ(collectives.forward.tp_comm, (cp - 1) * one);
  EXPECT_DOUBLE_EQ(collectives.backward.tp_comm, 2 * cp * one);
  EXPECT_GT(ring.forward.memory, 0.0);
  EXPECT_DOUBLE_EQ(collectives.forward.memory, 0.0);
  EXPECT_DOUBLE_EQ(collectives.backward.memory, 0.0);

  // The stacks: megatron-core prices the ring, ptdp the collectives.
  auto core = LoadSoftware("megatron-core");
  auto ptdp = LoadSoftware("ptdp");
  ASSERT_TRUE(core.ok() && ptdp.ok());
  EXPECT_FALSE(core->context_parallel_collectives.value);
  EXPECT_TRUE(ptdp->context_parallel_collectives.value);
  EXPECT_TRUE(ptdp->search.context_parallel.value);
  // The cost table follows the fact: a cp 2 layout's step differs, all else the same (here, on
  // NVLink, the collectives' exposed transfers cost less than the ring's merges: 12.37 s against
  // 12.39 s).
  ParallelConfig c = NemoLlama3_8b(2);
  c.precision = Precision::kBf16;
  c.grad_reduce_bf16 = false;
  ClusterSpec on_ring = *cluster, on_collectives = *cluster;
  on_ring.software = *core;
  on_collectives.software = *core;
  on_collectives.software.context_parallel_collectives.value = true;
  const double ring_s =
      costmodel::Predict(m, on_ring, c, costmodel::BuildCostTable(m, on_ring, c)).iteration_s;
  const double coll_s =
      costmodel::Predict(m, on_collectives, c, costmodel::BuildCostTable(m, on_collectives, c))
          .iteration_s;
  EXPECT_NE(coll_s, ring_s);
}

// The gradients are reduced over the d * cp ranks holding each weight: cp = 2, d = 4 reduces over
// the same 8 GPUs and bytes as d = 8, and the sharded step updates the same eighth.
TEST(ContextParallel, GradientsAreReducedOverDataAndContextRanks) {
  const ModelSpec m = Llama3_8b();
  auto cluster = LoadCluster("dgx-h100", 8);
  ASSERT_TRUE(cluster.ok());
  cluster->software = *LoadSoftware("megatron-core");
  const costmodel::CostTable two = costmodel::BuildCostTable(m, *cluster, NemoLlama3_8b(2));
  const costmodel::CostTable one = costmodel::BuildCostTable(m, *cluster, NemoLlama3_8b(1));
  EXPECT_DOUBLE_EQ(two.dp_allreduce[0], one.dp_allreduce[0]);
  EXPECT_DOUBLE_EQ(two.optimizer[0], one.optimizer[0]);
  EXPECT_EQ(two.dp_buckets, one.dp_buckets);
  // Each rank computes about half of each sequence (the attention blocks and merges make it more).
  const double ratio = two.Chunk(0, 0).ForwardTime() / one.Chunk(0, 0).ForwardTime();
  EXPECT_GT(ratio, 0.5);
  EXPECT_LT(ratio, 0.6);
}

TEST(ContextParallel, SearchedSizes) {
  SearchOptions o;
  ModelSpec m = Llama3_8b();
  EXPECT_EQ(ContextParallelSizes(m, 8, o), std::vector<int>({1}));
  o.context_parallel = true;
  EXPECT_EQ(ContextParallelSizes(m, 8, o), std::vector<int>({1, 2}));  // s / cp >= 4096
  EXPECT_EQ(ContextParallelSizes(m, 6, o), std::vector<int>({1, 2}));
  EXPECT_EQ(ContextParallelSizes(m, 3, o), std::vector<int>({1}));
  m.seq_len = 131072;
  EXPECT_EQ(ContextParallelSizes(m, 16384, o), std::vector<int>({1, 2, 4, 8, 16, 32}));
  m.seq_len = 2048;
  EXPECT_EQ(ContextParallelSizes(m, 3072, o), std::vector<int>({1}));
  o.fix.cp = 3;
  EXPECT_EQ(ContextParallelSizes(m, 3072, o), std::vector<int>({3}));
  EXPECT_TRUE(ContextParallelSizes(m, 8, o).empty());
}

// t = p = 1 and no recomputation: one GPU cannot hold a whole 8192-token sequence's activations
// beside an 8B model's state, two can (NeMo's CP 2). The search finds it only when it may.
TEST(ContextParallel, TheSearchFindsTheLayoutThatFits) {
  const ModelSpec m = Llama3_8b();
  auto cluster = LoadCluster("dgx-h100", 8);
  ASSERT_TRUE(cluster.ok());
  cluster->software = *LoadSoftware("megatron-core");
  SearchOptions o;
  o.global_batch = 128;
  o.fix = *ParseFix("tp=1,pp=1,mbs=1,precision=fp8,recompute=none,grad_reduce_bf16=on");
  o.distributed_optimizer = true;
  o.grad_accumulation_fusion = true;
  o.fused_attention = true;
  auto without = Search(m, *cluster, o);
  ASSERT_FALSE(without.ok());
  EXPECT_EQ(without.status().code(), StatusCode::kDoesNotFit);
  o.context_parallel = true;
  auto with = Search(m, *cluster, o);
  ASSERT_TRUE(with.ok()) << with.status().message();
  const ParallelConfig& best = with->top.front().layout;
  EXPECT_EQ(best.cp, 2);
  EXPECT_EQ(best.dp, 4);
  EXPECT_TRUE(best.fused_attention);
  EXPECT_NE(MegatronArgs(m, best).find(" --context-parallel-size 2"), std::string::npos);
  EXPECT_NE(SearchToTable(m, *cluster, *with, 0).find(" cp "), std::string::npos);
}

}  // namespace
}  // namespace ptdp::planner
