// The dgx-h200 cluster preset (profiles/derive_dgx_h200.py): eight of h200-measured's GPU per node
// on dgx-h100's links. Its GPU prices as h200-measured's, its nodes as dgx-h100's, and its 141 GB
// fit layouts an H100 cannot hold.
#include <gtest/gtest.h>

#include "core/cluster.h"
#include "core/model.h"
#include "core/software.h"
#include "planner/fix.h"
#include "planner/search.h"

namespace ptdp::planner {
namespace {

Result<SearchResult> Plan(const std::string& model, const std::string& cluster_name, int gpus,
                          int global_batch, const std::string& fix) {
  auto m = LoadModel(model);
  if (!m.ok()) return m.status();
  auto cluster = LoadCluster(cluster_name, gpus);
  if (!cluster.ok()) return cluster.status();
  cluster->software = *LoadSoftware("megatron-core");
  SearchOptions o;
  o.global_batch = global_batch;
  auto parsed = ParseFix(fix);
  if (!parsed.ok()) return parsed.status();
  o.fix = *parsed;
  o.distributed_optimizer = o.sequence_parallel = o.fused_attention = true;
  o.grad_accumulation_fusion = true;
  return Search(*m, *cluster, o);
}

TEST(DgxH200, EightGpusANodeOnTheDgxH100sLinks) {
  auto c = LoadCluster("dgx-h200", 64);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->nodes, 8);
  EXPECT_EQ(c->gpus_per_node, 8);
  auto h100 = LoadProfile("dgx-h100");
  auto measured = LoadProfile("h200-measured");
  ASSERT_TRUE(h100.ok() && measured.ok());
  EXPECT_EQ(c->profile.inter_node.send_recv_GBps.value, h100->inter_node.send_recv_GBps.value);
  EXPECT_EQ(c->profile.intra_node.all_reduce_busbw_GBps.value,
            h100->intra_node.all_reduce_busbw_GBps.value);
  EXPECT_EQ(c->profile.memory_GiB.value, measured->memory_GiB.value);
  EXPECT_GT(c->profile.memory_GiB.value, 1.5 * h100->memory_GiB.value);
}

// One GPU, nothing to communicate: the same iteration as on h200-measured, whose GPU it is.
TEST(DgxH200, OneGpuPricesAsTheMeasuredH200) {
  const std::string fix = "tp=1,pp=1,mbs=2,recompute=none,precision=bf16";
  auto node = Plan("llama3.2-1b", "dgx-h200", 1, 8, fix);
  auto gpu = Plan("llama3.2-1b", "h200-measured", 1, 8, fix);
  ASSERT_TRUE(node.ok()) << node.status().message();
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  EXPECT_DOUBLE_EQ(node->top.front().prediction.iteration_s,
                   gpu->top.front().prediction.iteration_s);
}

// Llama 3 70B at t 8 without context parallelism needs about 86 GiB a GPU: beyond an H100's 80,
// within an H200's 141.
TEST(DgxH200, HoldsWhatAnH100CannotFit) {
  const std::string fix = "tp=8,pp=1,cp=1,mbs=1,recompute=none,precision=bf16";
  auto h100 = Plan("llama3-70b", "dgx-h100", 64, 128, fix);
  ASSERT_FALSE(h100.ok());
  EXPECT_EQ(h100.status().code(), StatusCode::kDoesNotFit);
  auto h200 = Plan("llama3-70b", "dgx-h200", 64, 128, fix);
  ASSERT_TRUE(h200.ok()) << h200.status().message();
  EXPECT_GT(h200->top.front().prediction.peak_memory, Bytes(80) << 30);
}

// FP8 needs an FP8 peak: dgx-h200 states the datasheet's; h200-measured (one GPU's measured
// figures) has none and refuses it.
TEST(DgxH200, PlansFp8) {
  const std::string fix = "tp=1,pp=1,mbs=1,recompute=none,precision=fp8";
  auto node = Plan("llama3-8b", "dgx-h200", 8, 64, fix);
  ASSERT_TRUE(node.ok()) << node.status().message();
  EXPECT_FALSE(Plan("llama3-8b", "h200-measured", 8, 64, fix).ok());
}

}  // namespace
}  // namespace ptdp::planner
