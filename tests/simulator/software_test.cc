// Software profiles (core/software.h): the loader's strictness, the shipped stacks' defaults, the
// overlaps in the closed form and the simulator alike, and model FLOPs utilisation by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/cluster.h"
#include "core/model.h"
#include "core/rank_grid.h"
#include "core/software.h"
#include "costmodel/collectives.h"
#include "costmodel/estimate.h"
#include "costmodel/layer_cost.h"
#include "schedule/schedule.h"
#include "simulator/simulator.h"
#include "tests/costmodel/test_profile.h"

namespace ptdp {
namespace {

using costmodel::BuildCostTable;
using costmodel::CostTable;
using costmodel::Predict;
using testing::RoundCluster;

Json CoreJson() {
  auto p = LoadSoftware("megatron-core");
  EXPECT_TRUE(p.ok()) << p.status().message();
  return Json::parse(SoftwareProfileToJson(*p).dump());
}

std::string ErrorOf(const Json& j) {
  auto p = SoftwareProfileFromJson(j, "sw");
  return p.ok() ? "ok" : p.status().message();
}

TEST(SoftwareProfile, ShippedProfilesLoadAndRoundTrip) {
  for (const char* name : {"megatron-lm-2021", "megatron-core", "ptdp"}) {
    auto p = LoadSoftware(name);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().message();
    EXPECT_EQ(p->name, name);
    const std::string written = SoftwareProfileToJson(*p).dump();
    auto again = SoftwareProfileFromJson(Json::parse(written), name);
    ASSERT_TRUE(again.ok()) << again.status().message();
    EXPECT_EQ(SoftwareProfileToJson(*again).dump(), written);
  }
}

// What each stack searches by default (the plan's options) and what it overlaps.
TEST(SoftwareProfile, Defaults) {
  auto core = LoadSoftware("megatron-core");
  auto paper = LoadSoftware("megatron-lm-2021");
  auto own = LoadSoftware("ptdp");
  ASSERT_TRUE(core.ok() && paper.ok() && own.ok());
  for (const SoftwareSearchDefaults* s : {&core->search, &paper->search, &own->search}) {
    const bool is_core = s == &core->search, is_own = s == &own->search;
    // The runtime executes sequence parallelism (2026-11-29).
    EXPECT_EQ(s->sequence_parallel.value, is_core || is_own);
    // The runtime executes selective recomputation of the attention core (2026-11-29).
    EXPECT_EQ(s->selective_recompute.value, is_core || is_own);
    // The runtime executes the distributed optimizer (2026-11-29).
    EXPECT_EQ(s->distributed_optimizer.value, is_core || is_own);
    EXPECT_EQ(s->fused_attention.value, is_core || is_own);
    EXPECT_EQ(s->grad_accumulation_fusion.value, is_core || is_own);
  }
  EXPECT_GT(core->tp_comm_overlap_fraction.value, 0);
  EXPECT_TRUE(core->overlap_grad_reduce.value && core->overlap_param_gather.value);
  EXPECT_EQ(paper->tp_comm_overlap_fraction.value, 0);
  EXPECT_FALSE(paper->overlap_grad_reduce.value || paper->overlap_param_gather.value);
  EXPECT_EQ(paper->grad_accumulate_bytes_per_param.value, 6);
  EXPECT_EQ(paper->ddp_grad_copy_bytes_per_param.value, 12);
  EXPECT_FALSE(own->overlap_grad_reduce.value);
  // The paper's rows up to 18B ran torch DDP: its facts replace the local DDP's, nothing else.
  ASSERT_TRUE(paper->torch_ddp.has_value());
  auto torch = paper->WithTorchDdp();
  ASSERT_TRUE(torch.ok()) << torch.status().message();
  EXPECT_TRUE(torch->overlap_grad_reduce.value);
  EXPECT_EQ(torch->BucketParams(32), 25.0 * 1024 * 1024 / 2);  // 25 MiB of fp16 gradients
  EXPECT_EQ(torch->ddp_grad_copy_bytes_per_param.value, 8);
  EXPECT_EQ(torch->overlap_compute_slowdown.value, core->overlap_compute_slowdown.value);
  EXPECT_EQ(torch->grad_accumulate_bytes_per_param.value, 6);
  EXPECT_FALSE(core->torch_ddp.has_value());
  auto none = core->WithTorchDdp();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "software profile megatron-core: states no torch_ddp facts");
  // Megatron-Core's bucket: max(40M, 1M x d) parameters.
  EXPECT_EQ(core->BucketParams(8), 40e6);
  EXPECT_EQ(core->BucketParams(64), 64e6);
}

TEST(SoftwareProfile, BadInputNamesTheFieldAndTheReason) {
  Json j = CoreJson();
  j["tp_comm_overlap_fraction"]["value"] = 1.5;
  EXPECT_EQ(ErrorOf(j), "sw.tp_comm_overlap_fraction.value: 1.5 is outside [0, 1]");
  j = CoreJson();
  j["tp_comm_overlap_fraction"]["source"] = "";
  EXPECT_NE(ErrorOf(j).find("sw.tp_comm_overlap_fraction.source: must name"), std::string::npos);
  j = CoreJson();
  j["overlap_grad_reduce"] = true;  // a fact without its source
  EXPECT_NE(ErrorOf(j).find("sw.overlap_grad_reduce: expected an object"), std::string::npos);
  j = CoreJson();
  j["search"].erase("fused_attention");
  EXPECT_NE(ErrorOf(j).find("sw.search.fused_attention"), std::string::npos) << ErrorOf(j);
  j = CoreJson();
  j["overlap_everything"] = {{"value", true}, {"source", "x"}};
  EXPECT_NE(ErrorOf(j).find("overlap_everything"), std::string::npos) << ErrorOf(j);
  j = CoreJson();
  j["grad_bucket_params"]["value"] = 0;
  EXPECT_NE(ErrorOf(j).find("sw.grad_bucket_params.value: 0 is outside (0,"), std::string::npos);
  j = CoreJson();
  j["search"]["distributed_optimizer"]["value"] = false;
  EXPECT_NE(ErrorOf(j).find("sw.overlap_param_gather: needs search.distributed_optimizer"),
            std::string::npos)
      << ErrorOf(j);
  auto paper = LoadSoftware("megatron-lm-2021");
  ASSERT_TRUE(paper.ok());
  j = Json::parse(SoftwareProfileToJson(*paper).dump());
  j["torch_ddp"]["overlap_compute_slowdown"]["value"] = 1.5;
  EXPECT_EQ(ErrorOf(j), "sw.torch_ddp.overlap_compute_slowdown.value: 1.5 is outside [0, 1]");
  j = Json::parse(SoftwareProfileToJson(*paper).dump());
  j["torch_ddp"].erase("grad_bucket_params");
  EXPECT_NE(ErrorOf(j).find("sw.torch_ddp.grad_bucket_params"), std::string::npos) << ErrorOf(j);
  j = CoreJson();
  j["host_sync_gaps_per_pass"]["value"] = -1;
  EXPECT_NE(ErrorOf(j).find("sw.host_sync_gaps_per_pass.value: -1 is outside [0, 100]"),
            std::string::npos)
      << ErrorOf(j);
  auto missing = LoadSoftware("megatron-2019");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("--software: \"megatron-2019\" is neither"),
            std::string::npos);
}

// gelu_gemm_epilogue is optional: absent it is false and not written; present it round-trips
// with its source, and a bare value or an empty source is refused naming the key.
TEST(SoftwareProfile, OptionalGeluEpilogueFact) {
  Json j = CoreJson();
  j.erase("gelu_gemm_epilogue");
  auto absent = SoftwareProfileFromJson(j, "sw");
  ASSERT_TRUE(absent.ok()) << absent.status().message();
  EXPECT_FALSE(absent->gelu_gemm_epilogue.value);
  EXPECT_FALSE(SoftwareProfileToJson(*absent).contains("gelu_gemm_epilogue"));
  j["gelu_gemm_epilogue"] = {{"value", true}, {"source", "runtime/cuda/cuda_ops.cc"}};
  auto with = SoftwareProfileFromJson(j, "sw");
  ASSERT_TRUE(with.ok()) << with.status().message();
  auto back = SoftwareProfileFromJson(Json::parse(SoftwareProfileToJson(*with).dump()), "sw");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back->gelu_gemm_epilogue.value);
  EXPECT_EQ(back->gelu_gemm_epilogue.source, "runtime/cuda/cuda_ops.cc");
  j["gelu_gemm_epilogue"] = true;
  EXPECT_NE(ErrorOf(j).find("sw.gelu_gemm_epilogue: expected an object"), std::string::npos)
      << ErrorOf(j);
  j["gelu_gemm_epilogue"] = {{"value", true}, {"source", ""}};
  EXPECT_NE(ErrorOf(j).find("sw.gelu_gemm_epilogue.source"), std::string::npos) << ErrorOf(j);
}

// te_layer, grad_buffer_passes and grad_scale_passes are optional: megatron-core states them
// (2 and 2 passes, TE on), the 2021 stack does not (false, 0, and none written); a count out of
// [0, 100] is refused naming the key.
TEST(SoftwareProfile, OptionalTransformerEngineAndGradientBufferFacts) {
  auto core = LoadSoftware("megatron-core");
  auto paper = LoadSoftware("megatron-lm-2021");
  ASSERT_TRUE(core.ok() && paper.ok());
  EXPECT_TRUE(core->te_layer.value);
  EXPECT_EQ(core->grad_buffer_passes.value, 2);
  EXPECT_EQ(core->grad_scale_passes.value, 2);
  EXPECT_FALSE(paper->te_layer.value);
  EXPECT_EQ(paper->grad_buffer_passes.value + paper->grad_scale_passes.value, 0);
  const OrderedJson written = SoftwareProfileToJson(*paper);
  for (const char* key : {"te_layer", "grad_buffer_passes", "grad_scale_passes"}) {
    EXPECT_FALSE(written.contains(key)) << key;
  }
  Json j = CoreJson();
  j["grad_scale_passes"] = {{"value", -1}, {"source", "test"}};
  EXPECT_NE(ErrorOf(j).find("sw.grad_scale_passes"), std::string::npos) << ErrorOf(j);
  j = CoreJson();
  j["grad_buffer_passes"] = {{"value", 101}, {"source", "test"}};
  EXPECT_NE(ErrorOf(j).find("sw.grad_buffer_passes"), std::string::npos) << ErrorOf(j);
  j = CoreJson();
  j["te_layer"] = 1;
  EXPECT_NE(ErrorOf(j).find("sw.te_layer"), std::string::npos) << ErrorOf(j);
}

// fused_cross_entropy and fused_optimizer_step are optional: ptdp states both (and its one
// gradient-zeroing pass), megatron-core neither (false, not written); a non-object is refused.
TEST(SoftwareProfile, OptionalFusedHeadAndOptimizerFacts) {
  auto ptdp = LoadSoftware("ptdp");
  auto core = LoadSoftware("megatron-core");
  ASSERT_TRUE(ptdp.ok() && core.ok());
  EXPECT_TRUE(ptdp->fused_cross_entropy.value);
  EXPECT_TRUE(ptdp->fused_optimizer_step.value);
  EXPECT_EQ(ptdp->grad_buffer_passes.value, 1);
  EXPECT_FALSE(core->fused_cross_entropy.value);
  EXPECT_FALSE(core->fused_optimizer_step.value);
  // Megatron-Core's optimizer takes the fp32 main gradients in place (core_r0.8.0).
  EXPECT_TRUE(core->optimizer_main_grads_in_place.value);
  EXPECT_FALSE(ptdp->optimizer_main_grads_in_place.value);
  auto paper = LoadSoftware("megatron-lm-2021");
  ASSERT_TRUE(paper.ok());
  EXPECT_FALSE(paper->optimizer_main_grads_in_place.value);
  EXPECT_FALSE(SoftwareProfileToJson(*paper).contains("optimizer_main_grads_in_place"));
  const OrderedJson written = SoftwareProfileToJson(*core);
  EXPECT_TRUE(written.contains("optimizer_main_grads_in_place"));
  EXPECT_FALSE(written.contains("fused_cross_entropy"));
  EXPECT_FALSE(written.contains("fused_optimizer_step"));
  const OrderedJson round = SoftwareProfileToJson(*ptdp);
  ASSERT_TRUE(round.contains("fused_cross_entropy"));
  EXPECT_TRUE(round["fused_optimizer_step"]["value"].get<bool>());
  Json j = CoreJson();
  j["fused_cross_entropy"] = true;
  EXPECT_NE(ErrorOf(j).find("sw.fused_cross_entropy"), std::string::npos) << ErrorOf(j);
}

ParallelConfig Layout(int tp, int pp, int dp, int mbs, int64_t batch) {
  ParallelConfig c;
  c.tp = tp, c.pp = pp, c.dp = dp, c.mbs = mbs, c.global_batch = batch;
  c.precision = Precision::kFp16;
  return c;
}

// --tp-comm-overlap hides its fraction of each layer's collectives behind the layer's GEMMs,
// with sequence parallelism only; the embedding's and the head's stay exposed.
TEST(SoftwareOverlap, TensorParallelShareHiddenBehindTheGemms) {
  auto model = LoadModel("gpt-1.7b");
  ASSERT_TRUE(model.ok());
  ClusterSpec plain = RoundCluster(8);
  ClusterSpec core = plain;
  core.software = *LoadSoftware("megatron-core");
  ParallelConfig c = Layout(8, 1, 1, 2, 8);
  c.sequence_parallel = true;
  const CostTable with = BuildCostTable(*model, core, c);
  const CostTable without = BuildCostTable(*model, plain, c);
  // One all-gather and one reduce-scatter of b s h 16-bit elements per pair, two pairs each way.
  const auto grid = *RankGrid::Create(8, 1, 1);
  const costmodel::GroupSpan span = costmodel::SpanOf(grid.TensorGroup(0), 8);
  const Bytes bsh = Bytes(2) * model->seq_len * model->hidden * 2;
  const Seconds pair =
      costmodel::CollectiveTime(core.profile, costmodel::Collective::kAllGather, bsh, span, 8) +
      costmodel::CollectiveTime(core.profile, costmodel::Collective::kReduceScatter, bsh, span, 8);
  const double f = core.software.tp_comm_overlap_fraction.value;
  const auto layer =
      costmodel::TransformerLayerCost(*model, core.profile, c.precision, 8, 2, pair, true, false);
  ASSERT_NEAR(layer.forward.tp_comm, 2 * pair, 1e-15);
  ASSERT_LT(f * layer.forward.tp_comm, layer.forward.gemm);  // the GEMMs can hold the share
  const double hidden = model->layers * f * 2 * pair;
  EXPECT_NEAR(without.chunks[0].forward.tp_comm - with.chunks[0].forward.tp_comm, hidden, 1e-12);
  EXPECT_NEAR(without.chunks[0].backward.tp_comm - with.chunks[0].backward.tp_comm, hidden, 1e-12);
  // The GEMMs beside the hidden share run slower: s / (1 + s) of what they hide, s = 18.9%.
  const double s = core.software.overlap_compute_slowdown.value;
  ASSERT_GT(s, 0);
  EXPECT_NEAR(with.chunks[0].forward.gemm - without.chunks[0].forward.gemm, hidden * s / (1 + s),
              1e-12);
  // Without sequence parallelism Megatron-LM refuses the overlap: nothing changes.
  c.sequence_parallel = false;
  EXPECT_EQ(BuildCostTable(*model, core, c).chunks[0].forward.tp_comm,
            BuildCostTable(*model, plain, c).chunks[0].forward.tp_comm);
}

// The closed form's exposed data-parallel time and the simulator's replay of the buckets agree,
// where the backward hides all but the last bucket (NVSwitch) and where it cannot (one GPU per
// node, every data-parallel collective across a network slowed to 1 GB/s).
TEST(SoftwareOverlap, ClosedFormAndSimulatorAgree) {
  auto model = LoadModel("gpt-1.7b");
  ASSERT_TRUE(model.ok());
  for (int gpus_per_node : {8, 1}) {
    ClusterSpec cluster = RoundCluster(8, gpus_per_node);
    cluster.software = *LoadSoftware("megatron-core");
    const bool slow = gpus_per_node == 1;
    if (slow) {
      cluster.profile.inter_node.reduce_scatter_busbw_GBps = testing::S(1);
      cluster.profile.inter_node.all_gather_busbw_GBps = testing::S(1);
    }
    ParallelConfig c = Layout(1, 1, 8, 2, 64);
    c.distributed_optimizer = true;
    c.grad_accumulation_fusion = true;
    const CostTable t = BuildCostTable(*model, cluster, c);
    ASSERT_TRUE(t.overlap_grad_reduce && t.overlap_param_gather);
    ASSERT_GT(t.dp_param_gather[0], 0);
    const Seconds reduce = t.dp_allreduce[0] - t.dp_param_gather[0];
    ASSERT_EQ(reduce > t.chunks[0].BackwardTime(), slow);  // the regime each case is for
    ASSERT_EQ(t.dp_param_gather[0] > t.chunks[0].ForwardTime(), slow);
    const costmodel::Prediction closed = Predict(*model, cluster, c, t);
    auto program = schedule::BuildProgram(*model, c);
    ASSERT_TRUE(program.ok());
    auto sim = sim::Simulate(*program, t);
    ASSERT_TRUE(sim.ok()) << sim.status().message();
    EXPECT_NEAR(ToSeconds(sim->iteration_ns), closed.iteration_s, 1e-7) << gpus_per_node;
    // And the overlap pays: less than the same table replayed with nothing overlapped.
    CostTable serial = t;
    serial.overlap_grad_reduce = serial.overlap_param_gather = false;
    const Seconds serial_s = Predict(*model, cluster, c, serial).iteration_s;
    EXPECT_LT(closed.iteration_s, serial_s);
    EXPECT_NEAR(serial_s - closed.iteration_s,
                t.dp_allreduce[0] - costmodel::ExposedDataParallelTime(t, c, 0), 1e-12);
    // What the overlap hides costs the compute beside it s / (1 + s) of it, in both models.
    CostTable free_overlap = t;
    free_overlap.overlap_compute_slowdown = 0;
    const Seconds free_exposed = costmodel::ExposedDataParallelTime(free_overlap, c, 0);
    const double s = t.overlap_compute_slowdown;
    ASSERT_GT(s, 0);
    EXPECT_NEAR(costmodel::ExposedDataParallelTime(t, c, 0) - free_exposed,
                (t.dp_allreduce[0] - free_exposed) * s / (1 + s), 1e-12);
    auto free_sim = sim::Simulate(*program, free_overlap);
    ASSERT_TRUE(free_sim.ok());
    EXPECT_NEAR(ToSeconds(sim->iteration_ns - free_sim->iteration_ns),
                closed.iteration_s - Predict(*model, cluster, c, free_overlap).iteration_s, 1e-7);
  }
}

// The 2021 stack prices exactly what the cost model priced before software profiles: nothing
// hidden, the whole data-parallel time after the flush, fp16 gradients added apart (and the 2021
// training loop's bookkeeping, which tests/costmodel/host_overheads_test.cc derives).
TEST(SoftwareOverlap, PaperStackChangesNothing) {
  auto model = LoadModel("gpt-1.7b");
  ASSERT_TRUE(model.ok());
  ClusterSpec bare = RoundCluster(64);
  bare.software.grad_accumulate_bytes_per_param = testing::S(6);
  ClusterSpec paper = RoundCluster(64);
  paper.software = *LoadSoftware("megatron-lm-2021");
  bare.software.host_sync_gaps_per_pass = paper.software.host_sync_gaps_per_pass;
  bare.software.loss_dp_allreduces_per_microbatch =
      paper.software.loss_dp_allreduces_per_microbatch;
  bare.software.ddp_grad_copy_bytes_per_param = paper.software.ddp_grad_copy_bytes_per_param;
  bare.software.optimizer_small_allreduces = paper.software.optimizer_small_allreduces;
  ParallelConfig c = Layout(8, 2, 4, 1, 64);
  c.sequence_parallel = c.distributed_optimizer = true;
  const CostTable a = BuildCostTable(*model, paper, c), b = BuildCostTable(*model, bare, c);
  for (size_t i = 0; i < a.chunks.size(); ++i) {
    EXPECT_EQ(a.chunks[i].forward.tp_comm, b.chunks[i].forward.tp_comm);
    EXPECT_EQ(a.chunks[i].backward.Total(), b.chunks[i].backward.Total());
  }
  EXPECT_FALSE(a.overlap_grad_reduce || a.overlap_param_gather);
  for (int r = 0; r < c.pp; ++r) {
    EXPECT_EQ(costmodel::ExposedDataParallelTime(a, c, r), a.dp_allreduce[r]);
  }
  EXPECT_EQ(Predict(*model, paper, c, a).iteration_s, Predict(*model, bare, c, b).iteration_s);
}

// MFU by hand for one layout: 72 B s l h^2 (1 + s/6h + V/12lh) model FLOPs (no recomputation,
// whatever the layout recomputes) over iteration x GPUs x peak.
TEST(SoftwareOverlap, ModelFlopsUtilisationByHand) {
  auto model = LoadModel("gpt-1.7b");
  ASSERT_TRUE(model.ok());
  const ClusterSpec cluster = RoundCluster(8);
  ParallelConfig c = Layout(2, 2, 2, 2, 16);
  c.recompute = Recompute::kFull;
  const costmodel::Prediction p = Predict(*model, cluster, c, BuildCostTable(*model, cluster, c));
  const double B = 16, s = model->seq_len, l = model->layers, h = model->hidden;
  const double V = PaddedVocab(*model, 2);
  const double flops = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
  const double mfu = 100 * flops / (p.iteration_s * 8 * 200e12);
  EXPECT_NEAR(p.model_flops_utilization, mfu, 1e-9 * mfu);
  // Full recomputation runs one more forward: the hardware figure is higher, MFU is not.
  EXPECT_GT(p.percent_of_peak, p.model_flops_utilization);
}

}  // namespace
}  // namespace ptdp
