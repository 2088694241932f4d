// Fully sharded data parallelism (ParallelConfig::fsdp, ZeRO-3): its rules, the plan file's key,
// the ledger's sharded weights and gradients with the whole units in use, the cost model's
// per-microbatch collectives inside the chunks (and nothing after the flush), the simulator paying
// them as the closed form does, the search (only when allowed) and --emit megatron.
#include <gtest/gtest.h>

#include "core/cluster.h"
#include "core/fsdp.h"
#include "core/ledger.h"
#include "core/model.h"
#include "core/shapes.h"
#include "core/software.h"
#include "costmodel/estimate.h"
#include "costmodel/fsdp_cost.h"
#include "planner/fix.h"
#include "planner/report.h"
#include "planner/search.h"
#include "simulator/refine.h"

namespace ptdp::planner {
namespace {

// llama3-8b on 8 GPUs, data-parallel only, sharded.
ParallelConfig ShardedLlama(bool fsdp) {
  ParallelConfig c;
  c.dp = 8;
  c.mbs = 1;
  c.global_batch = 16;
  c.precision = Precision::kBf16;
  c.fused_attention = true;
  c.grad_accumulation_fusion = true;
  c.distributed_optimizer = true;
  c.fsdp = fsdp;
  return c;
}

// The search options both search tests start from: bf16, the distributed optimizer, fused
// gradient accumulation and fused attention, the rest fixed by `fix`.
SearchOptions Bf16Search(int64_t global_batch, const std::string& fix) {
  SearchOptions o;
  o.global_batch = global_batch;
  o.precision = Precision::kBf16;
  o.distributed_optimizer = o.grad_accumulation_fusion = o.fused_attention = true;
  o.fix = *ParseFix(fix);
  return o;
}

ClusterSpec H100s(int gpus) {
  auto c = LoadCluster("dgx-h100", gpus);
  EXPECT_TRUE(c.ok());
  c->software = *LoadSoftware("megatron-core");
  return *c;
}

TEST(Fsdp, ValidateNamesTheFieldAndTheReason) {
  auto m = LoadModel("llama3-8b");
  ASSERT_TRUE(m.ok());
  ParallelConfig c = ShardedLlama(true);
  EXPECT_TRUE(c.Validate(*m).ok());
  c.distributed_optimizer = false;
  EXPECT_EQ(c.Validate(*m).message().rfind("fsdp: needs distributed_optimizer", 0), 0u)
      << c.Validate(*m).message();
  c = ShardedLlama(true);
  c.dp = 1;
  c.global_batch = 2;
  EXPECT_EQ(c.Validate(*m).message().rfind("fsdp: needs dp * cp > 1", 0), 0u);
  c = ShardedLlama(true);
  c.dp = 4;
  c.pp = 2;
  c.schedule = ScheduleKind::kZbH1;
  EXPECT_EQ(c.Validate(*m).message().rfind("fsdp: is not modelled with schedule 'zb-h1'", 0), 0u)
      << c.Validate(*m).message();
  auto moe = LoadModel("mixtral-8x7b");
  ASSERT_TRUE(moe.ok());
  c = ShardedLlama(true);
  EXPECT_EQ(c.Validate(*moe).message().rfind("fsdp: is not modelled with a mixture of experts", 0),
            0u)
      << c.Validate(*moe).message();
}

TEST(Fsdp, PlanFileKeyOnlyWhenSet) {
  const ParallelConfig on = ShardedLlama(true), off = ShardedLlama(false);
  const Json j_on = Json::parse(LayoutToJson(on).dump());
  const Json j_off = Json::parse(LayoutToJson(off).dump());
  EXPECT_TRUE(j_on.at("fsdp").get<bool>());
  EXPECT_FALSE(j_off.contains("fsdp"));
  auto back = LayoutFromJson(j_on, "layout");
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->fsdp);
  EXPECT_FALSE(LayoutFromJson(j_off, "layout")->fsdp);
  EXPECT_NE(on.ToString().find(",fsdp=on"), std::string::npos);
  EXPECT_EQ(off.ToString().find("fsdp"), std::string::npos);
  auto fix = ParseFix("fsdp=on");
  ASSERT_TRUE(fix.ok());
  EXPECT_TRUE(fix->fsdp.value_or(false));
  EXPECT_FALSE(ParseFix("fsdp=maybe").ok());
}

// Weights and gradients are the optimizer's shard, plus two whole units of weights and one of
// gradients; the optimizer state is the distributed optimizer's.
TEST(Fsdp, LedgerShardsWeightsAndGradientsAndHoldsTheUnitsInUse) {
  auto m = LoadModel("llama3-8b");
  ASSERT_TRUE(m.ok());
  const ParallelConfig on = ShardedLlama(true), off = ShardedLlama(false);
  const MemoryLedger sharded = ParameterMemory(*m, on, 0);
  const MemoryLedger whole = ParameterMemory(*m, off, 0);
  const int64_t params = StageParameterElements(*m, on, 0);
  const int64_t shard = (params + 7) / 8;
  // The largest unit of an untied Llama on one stage: the embedding (or the output layer), V h
  // = 128256 x 4096 elements, larger than a layer's 218M.
  const int64_t layer = LayerParameterCounts(*m, on).elements;
  const int64_t end = int64_t(m->vocab) * m->hidden;
  ASSERT_GT(end, layer);
  EXPECT_EQ(FsdpLargestUnitElements(*m, on, 0), (params - 32 * layer + 1) / 2);
  EXPECT_NEAR(double(FsdpLargestUnitElements(*m, on, 0)), double(end), 1e-4 * double(end));
  const int64_t unit = FsdpLargestUnitElements(*m, on, 0);
  EXPECT_EQ(sharded.weights, shard * 2 + 2 * unit * 2);
  EXPECT_EQ(sharded.grads, shard * 4 + unit * 4);
  EXPECT_EQ(sharded.optimizer, whole.optimizer);
  EXPECT_EQ(whole.weights, shard * 8 * 2);
  EXPECT_EQ(whole.grads, shard * 8 * 4);
  // The planner's memory is the ledger's.
  const ClusterSpec cluster = H100s(8);
  const costmodel::CostTable t = costmodel::BuildCostTable(*m, cluster, on);
  const costmodel::Prediction p = costmodel::Predict(*m, cluster, on, t);
  EXPECT_EQ(p.memory.front().weights, sharded.weights);
  EXPECT_EQ(p.memory.front().grads, sharded.grads);
}

// The collectives move inside the chunks: nothing after the flush, and each chunk's forward pays
// at least its first unit's all-gather and at most all of them; the backward likewise with the
// gathers and the reduce-scatters. With free overlap and compute to hide behind, exactly the first
// unit's share is exposed.
TEST(Fsdp, CollectivesRunInsideTheChunks) {
  auto m = LoadModel("llama3-8b");
  ASSERT_TRUE(m.ok());
  ClusterSpec cluster = H100s(8);
  const ParallelConfig on = ShardedLlama(true), off = ShardedLlama(false);
  const costmodel::CostTable t_on = costmodel::BuildCostTable(*m, cluster, on);
  const costmodel::CostTable t_off = costmodel::BuildCostTable(*m, cluster, off);
  EXPECT_EQ(t_on.dp_allreduce[0], 0.0);
  EXPECT_GT(t_off.dp_allreduce[0], 0.0);
  EXPECT_EQ(t_off.chunks[0].forward.dp_comm, 0.0);
  const auto& grid_span = costmodel::GroupSpan{8, 1, 8};
  const int units = 32 + 2;  // the layers, the embedding, the output layer
  const costmodel::FsdpChunkComm comm = costmodel::PlanFsdpChunkComm(
      cluster.profile, on, StageParameterElements(*m, on, 0), units, grid_span, 8);
  ASSERT_GT(comm.gather, 0.0);
  ASSERT_GT(comm.reduce_scatter, comm.gather);  // fp32 gradients, bf16 weights
  const costmodel::ChunkCost& cc = t_on.chunks[0];
  EXPECT_GE(cc.forward.dp_comm, comm.gather / units);
  EXPECT_LE(cc.forward.dp_comm, comm.gather);
  EXPECT_GE(cc.backward.dp_comm, (comm.gather + comm.reduce_scatter) / units);
  EXPECT_LE(cc.backward.dp_comm, comm.gather + comm.reduce_scatter);
  cluster.software.overlap_compute_slowdown.value = 0;
  const costmodel::CostTable t_free = costmodel::BuildCostTable(*m, cluster, on);
  const costmodel::ChunkCost& free = t_free.chunks[0];
  ASSERT_GT(free.forward.Total() - free.forward.dp_comm, comm.gather);
  EXPECT_NEAR(free.forward.dp_comm, comm.gather / units, 1e-12);
  EXPECT_NEAR(free.backward.dp_comm, (comm.gather + comm.reduce_scatter) / units, 1e-12);
}

// The breakdown still adds up to the iteration, FSDP's collectives in dp_comm; the simulator's
// busiest rank runs the chunk times with them inside, as the closed form does.
TEST(Fsdp, BreakdownAndSimulatorPayTheCollectives) {
  auto m = LoadModel("llama3-8b");
  ASSERT_TRUE(m.ok());
  const ClusterSpec cluster = H100s(8);
  ParallelConfig on = ShardedLlama(true);
  on.dp = 4;
  on.pp = 2;
  const costmodel::CostTable t = costmodel::BuildCostTable(*m, cluster, on);
  const costmodel::Prediction p = costmodel::Predict(*m, cluster, on, t);
  const costmodel::Breakdown& b = p.breakdown;
  EXPECT_NEAR(b.compute + b.tp_comm + b.pp_comm + b.bubble + b.dp_comm + b.optimizer, p.iteration_s,
              1e-9 * p.iteration_s);
  double chunk_dp = 0;
  for (const auto& cc : t.chunks) chunk_dp = std::max(chunk_dp, cc.forward.dp_comm);
  EXPECT_GT(b.dp_comm, chunk_dp);
  auto sim = sim::SimulateLayout(*m, cluster, on);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  for (int r = 0; r < on.pp; ++r) {
    const costmodel::ChunkCost& cc = t.Chunk(r, 0);
    const double per_microbatch = cc.ForwardTime() + cc.BackwardTime();
    EXPECT_NEAR(ToSeconds(sim->result.ranks[size_t(r)].compute_ns),
                double(on.Microbatches()) * per_microbatch, 1e-6)
        << "rank " << r;
  }
}

// gpt3-175b fixed to t 8, p 1 on 64 GPUs: 22B parameters a GPU do not fit whole (6 bytes each
// before the optimizer's), sharded they do; the search turns FSDP on only when allowed, and
// --emit megatron says Megatron-FSDP.
TEST(Fsdp, SearchedOnlyWhenAllowedAndEmitted) {
  auto m = LoadModel("gpt3-175b");
  ASSERT_TRUE(m.ok());
  const ClusterSpec cluster = H100s(64);
  SearchOptions o = Bf16Search(64, "tp=8,pp=1,recompute=full");
  auto whole = Search(*m, cluster, o);
  ASSERT_FALSE(whole.ok());
  EXPECT_EQ(whole.status().code(), StatusCode::kDoesNotFit);
  o.fsdp = true;
  auto sharded = Search(*m, cluster, o);
  ASSERT_TRUE(sharded.ok()) << sharded.status().message();
  const ParallelConfig& best = sharded->top.front().layout;
  EXPECT_TRUE(best.fsdp);
  EXPECT_TRUE(best.distributed_optimizer);
  EXPECT_LT(sharded->top.front().prediction.peak_memory, Bytes(80) << 30);
  const std::string args = MegatronArgs(*m, best);
  EXPECT_NE(args.find(" --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params"
                      " --ckpt-format fsdp_dtensor"),
            std::string::npos)
      << args;
  ParallelConfig plain = best;
  plain.fsdp = false;
  EXPECT_EQ(MegatronArgs(*m, plain).find("fsdp"), std::string::npos);
}

// Several optimizer instances (Megatron-Core's --num-distributed-optimizer-instances; HSDP with
// FSDP): the rules, the keys, the ledger's shard over one instance.
TEST(OptimizerInstances, RulesKeysAndShard) {
  auto m = LoadModel("llama3-8b");
  ASSERT_TRUE(m.ok());
  ParallelConfig c = ShardedLlama(false);
  c.optimizer_instances = 4;
  EXPECT_TRUE(c.Validate(*m).ok()) << c.Validate(*m).message();
  EXPECT_EQ(c.OptimizerShardRanks(), 2);
  c.optimizer_instances = 3;
  EXPECT_EQ(c.Validate(*m).message(),
            "optimizer_instances: 3 does not divide the dp * cp = 8 ranks holding each weight");
  c.optimizer_instances = 4;
  c.distributed_optimizer = false;
  EXPECT_EQ(c.Validate(*m).message().rfind("optimizer_instances: 4 needs distributed_optimizer", 0),
            0u);
  c.distributed_optimizer = true;
  const Json j = Json::parse(LayoutToJson(c).dump());
  EXPECT_EQ(j.at("optimizer_instances").get<int>(), 4);
  EXPECT_FALSE(
      Json::parse(LayoutToJson(ShardedLlama(false)).dump()).contains("optimizer_instances"));
  EXPECT_EQ(LayoutFromJson(j, "layout")->optimizer_instances, 4);
  EXPECT_NE(c.ToString().find(",optimizer_instances=4"), std::string::npos);
  EXPECT_EQ(ParseFix("optimizer_instances=4")->optimizer_instances.value_or(0), 4);
  EXPECT_FALSE(ParseFix("optimizer_instances=0").ok());
  const int64_t params = StageParameterElements(*m, c, 0);
  EXPECT_EQ(OptimizerShardsOf(c, params).owned, (params + 1) / 2);
  EXPECT_EQ(ParameterMemory(*m, c, 0).optimizer, (params + 1) / 2 * 12);
  EXPECT_NE(MegatronArgs(*m, c).find(" --num-distributed-optimizer-instances 4"),
            std::string::npos);
}

// gpt3-175b at t 8, p 8 over 16 nodes: the reduce-scatter and the all-gather within an instance of
// 4 data ranks (4 nodes), each shard all-reduced across the 4 instances. The simulator runs both
// parts of the reduction after the flush, as the closed form charges them; with FSDP only the
// all-reduce is left after the flush.
TEST(OptimizerInstances, ReductionWithinAndAcrossInstances) {
  auto m = LoadModel("gpt3-175b");
  ASSERT_TRUE(m.ok());
  ClusterSpec cluster = H100s(1024);
  cluster.software.overlap_grad_reduce.value = false;  // every collective after the flush
  cluster.software.overlap_param_gather.value = false;
  ParallelConfig c;
  c.tp = 8;
  c.pp = 8;
  c.dp = 16;
  c.mbs = 1;
  c.global_batch = 128;
  c.precision = Precision::kBf16;
  c.sequence_parallel = c.distributed_optimizer = c.grad_accumulation_fusion = true;
  c.fused_attention = true;
  const costmodel::CostTable whole = costmodel::BuildCostTable(*m, cluster, c);
  c.optimizer_instances = 4;
  ASSERT_TRUE(c.Validate(*m).ok());
  const costmodel::CostTable split = costmodel::BuildCostTable(*m, cluster, c);
  const int r = 3;
  ASSERT_EQ(whole.dp_collectives[r].size(), 2u);
  ASSERT_EQ(split.dp_collectives[r].size(), 3u);
  EXPECT_EQ(split.ReductionEntries(r), 2);
  EXPECT_EQ(whole.ReductionEntries(r), 1);
  // A quarter of the group: the reduce-scatter and the all-gather each send 4/16 of the ring's
  // steps' bytes... fewer ranks, so each moves (n-1)/n of the buffer with n = 4, not 16.
  EXPECT_LT(split.dp_collectives[r][0].nic_bytes, whole.dp_collectives[r][0].nic_bytes);
  EXPECT_GT(split.dp_collectives[r][1].Time(), 0.0);  // the shard all-reduced across instances
  EXPECT_EQ(split.dp_param_gather[r], split.dp_collectives[r][2].Time());
  double listed = 0;
  for (const auto& one : split.dp_collectives[r]) listed += one.Time();
  EXPECT_NEAR(split.dp_allreduce[r], listed, 1e-12);
  // The simulator's reduction after the flush on that rank (a middle one: no embedding group)
  // is the three collectives, one after another on its NICs.
  auto sim = sim::SimulateLayout(*m, cluster, c);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  const double sim_reduce = ToSeconds(sim->result.ranks[size_t(r)].allreduce_ns);
  EXPECT_NEAR(sim_reduce, listed, 0.01 * listed);
  // Without its all-reduce across instances it would be that much shorter: more than the
  // tolerance above, so the check sees a dropped entry.
  ASSERT_GT(split.dp_collectives[r][1].Time(), 0.05 * listed);
  c.fsdp = true;
  const costmodel::CostTable fsdp = costmodel::BuildCostTable(*m, cluster, c);
  ASSERT_EQ(fsdp.dp_collectives[r].size(), 1u);
  EXPECT_EQ(fsdp.dp_param_gather[r], 0.0);
  EXPECT_NEAR(fsdp.dp_collectives[r][0].Time(), split.dp_collectives[r][1].Time(), 1e-12);
}

// Hybrid sharding inside a node: t 1 on nodes of 8 leaves 8 data ranks a node, so d 256 is 32
// instances of 8; t 8 leaves one (nothing to shard inside a node); the node holding every rank is
// no split.
TEST(OptimizerInstances, NodeShardInstances) {
  EXPECT_EQ(NodeShardInstances(1, 256, 8), 32);
  EXPECT_EQ(NodeShardInstances(2, 64, 8), 16);
  EXPECT_EQ(NodeShardInstances(8, 32, 8), 0);
  EXPECT_EQ(NodeShardInstances(1, 8, 8), 0);
  EXPECT_EQ(NodeShardInstances(3, 12, 8), 0);
}

// With --fsdp the search tries each FSDP layout whole and hybrid-sharded inside a node, and --emit
// megatron states the instances; without --fsdp neither (and here nothing fits).
TEST(OptimizerInstances, SearchedBesideFullSharding) {
  auto m = LoadModel("llama3-8b");
  ASSERT_TRUE(m.ok());
  const ClusterSpec cluster = H100s(64);
  SearchOptions o = Bf16Search(128, "tp=1,pp=1,mbs=1,recompute=none");
  o.keep = 1000;
  // Without it nothing of t = p = 1 and no recomputation fits (88 GiB a GPU).
  auto plain = Search(*m, cluster, o);
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.status().code(), StatusCode::kDoesNotFit);
  o.fsdp = true;
  auto both = Search(*m, cluster, o);
  ASSERT_TRUE(both.ok()) << both.status().message();
  bool whole = false, hybrid = false;
  for (const auto& cand : both->top) {
    const ParallelConfig& l = cand.layout;
    if (!l.fsdp) continue;
    whole = whole || l.optimizer_instances == 1;
    if (l.optimizer_instances > 1) {
      hybrid = true;
      EXPECT_EQ(l.OptimizerShardRanks(), 8) << l.ToString();  // one node's data ranks
      EXPECT_NE(MegatronArgs(*m, l).find(" --num-distributed-optimizer-instances " +
                                         std::to_string(l.optimizer_instances)),
                std::string::npos);
    }
  }
  EXPECT_TRUE(whole);
  EXPECT_TRUE(hybrid);
}

// A mixture of experts reduces its experts' gradients over their own group after the dense
// weights': with the distributed optimizer [dense reduce-scatter, experts' reduce-scatter, dense
// all-gather, experts' all-gather], without it two all-reduces. The simulator runs every entry
// after the flush, as the closed form charges them (it ran the first and the last alone once).
TEST(DataParallelCollectives, SimulatorRunsEveryEntryOfAMixture) {
  auto m = LoadModel("qwen3-30b-a3b");
  ASSERT_TRUE(m.ok());
  ClusterSpec cluster = H100s(32);
  cluster.software.overlap_grad_reduce.value = false;
  cluster.software.overlap_param_gather.value = false;
  ParallelConfig c;
  c.dp = 32;
  c.ep = 8;
  c.etp = 1;
  c.mbs = 1;
  c.global_batch = 64;
  c.precision = Precision::kBf16;
  c.fused_attention = c.grad_accumulation_fusion = true;
  for (bool sharded : {true, false}) {
    c.distributed_optimizer = sharded;
    ASSERT_TRUE(c.Validate(*m).ok()) << c.Validate(*m).message();
    const costmodel::CostTable t = costmodel::BuildCostTable(*m, cluster, c);
    ASSERT_EQ(t.dp_collectives[0].size(), sharded ? 4u : 2u);
    EXPECT_EQ(t.ReductionEntries(0), 2);
    double listed = 0;
    for (const auto& one : t.dp_collectives[0]) listed += one.Time();
    auto sim = sim::SimulateLayout(*m, cluster, c);
    ASSERT_TRUE(sim.ok()) << sim.status().ToString();
    const double sim_reduce = ToSeconds(sim->result.ranks[0].allreduce_ns);
    // Rank 0 also holds the tied embedding group's all-reduce when pp > 1; here pp = 1.
    EXPECT_NEAR(sim_reduce, listed, 0.01 * listed) << (sharded ? "distributed optimizer" : "ddp");
    // Each entry is more than the tolerance: a dropped one shows.
    for (const auto& one : t.dp_collectives[0]) ASSERT_GT(one.Time(), 0.01 * listed);
  }
}

}  // namespace
}  // namespace ptdp::planner
