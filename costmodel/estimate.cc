#include "costmodel/estimate.h"

#include <algorithm>
#include <cmath>

#include "core/experts.h"
#include "core/ledger.h"
#include "core/rank_grid.h"
#include "core/shapes.h"
#include "costmodel/collectives.h"
#include "costmodel/fsdp_cost.h"
#include "costmodel/layer_cost.h"
#include "costmodel/moe_cost.h"
#include "costmodel/recompute_cost.h"
#include "costmodel/step_cost.h"

namespace ptdp::costmodel {

namespace {

// Megatron-Core's --tp-comm-overlap: `fraction` of a piece's tensor-parallel collectives run
// beside its GEMMs, never more than the GEMM time there is to hide behind; the GEMMs they run
// beside are slowed by `slowdown` (SoftwareProfile::overlap_compute_slowdown).
void HideTensorParallelComm(ComputeBreakdown* b, double fraction, double slowdown) {
  const Seconds hidden = std::min(fraction * b->tp_comm, b->gemm);
  b->tp_comm -= hidden;
  b->gemm += hidden * OverlapStretch(slowdown);
}

// Sets the software profile's data-parallel overlaps and bucket count on `t`.
void SetDataParallelOverlap(const SoftwareProfile& sw, const ParallelConfig& c, CostTable* t) {
  t->overlap_grad_reduce = sw.overlap_grad_reduce.value;
  t->overlap_param_gather = sw.overlap_param_gather.value && c.distributed_optimizer;
  if (!t->overlap_grad_reduce && !t->overlap_param_gather) return;
  t->overlap_compute_slowdown = sw.overlap_compute_slowdown.value;
  const int64_t most = *std::max_element(t->param_elements.begin(), t->param_elements.end());
  const double per_chunk = double(most) / c.vp;
  // Capped: the simulator issues one collective per bucket (a 1-parameter bucket is a profile's
  // right, not a reason to replay a billion collectives).
  t->dp_buckets = int(std::clamp(std::ceil(per_chunk / sw.BucketParams(c.WeightReplicas())), 1.0,
                                 double(kMaxDataParallelBuckets)));
}

}  // namespace

std::vector<int64_t> StageParameterCounts(const ModelSpec& m, const ParallelConfig& c) {
  std::vector<int64_t> n(c.pp, 0);
  // Every rank strictly between the first and the last holds the same shapes: count one. Not with
  // per-stage counts (any rank may hold any number of layers) nor with a mixture's dense layers
  // (a rank between may hold some of them, the next none): then count each.
  if (!c.stage_layers.empty() || m.HasDenseLayers()) {
    for (int r = 0; r < c.pp; ++r) n[r] = StageParameterElements(m, c, r);
    return n;
  }
  n[0] = StageParameterElements(m, c, 0);
  if (c.pp > 1) n[c.pp - 1] = StageParameterElements(m, c, c.pp - 1);
  if (c.pp > 2) {
    const int64_t mid = StageParameterElements(m, c, 1);
    for (int r = 1; r < c.pp - 1; ++r) n[r] = mid;
  }
  return n;
}

namespace {

// A layer's (its tensor-parallel communication partly hidden under sequence parallelism, as the
// stack says), the embedding's and the head's prices, and what selective recomputation redoes per
// layer of each kind (costmodel/recompute_cost.h): what PieceCostMemo keeps.
// `m` is the model as one context-parallel rank sees it (seq_len s / cp; the model itself when
// cp = 1) and `ring` the link between neighbouring cp ranks.
PieceCostMemo::Pieces PricePieces(const ModelSpec& m, const ClusterSpec& cluster,
                                  const ParallelConfig& c, Seconds tp_ar, Seconds tp_ag,
                                  Seconds tp_rs, Seconds tp_small_ar, const LinkCost& ring,
                                  const ExpertComm& expert_comm) {
  const HardwareProfile& hw = cluster.profile;
  const Precision pr = c.precision;
  // Sequence parallelism turns each all-reduce in a layer into a reduce-scatter and an all-gather.
  const bool sp = c.sequence_parallel;
  const Seconds tp_pair = sp ? tp_ag + tp_rs : tp_ar;
  PieceCostMemo::Pieces p;
  // A layer of `kind` (the model's own, or a mixture's dense layer) with its tensor-parallel
  // communication partly hidden and the context ring added.
  auto price_layer = [&](const ModelSpec& kind) {
    PieceCost layer = TransformerLayerCost(
        kind, hw, pr, c.tp, c.mbs, tp_pair, sp, c.fused_attention,
        cluster.software.gelu_gemm_epilogue.value, cluster.software.te_layer.value);
    // A dense MLP beside the experts, its pair hidden alike; with --moe-shared-expert-overlap
    // beside the experts' exchange instead (below), Megatron-Core turning its pair's overlap off.
    if (kind.HasSharedExpert() && !c.moe_shared_expert_overlap) {
      const PieceCost shared = SharedExpertCost(kind, hw, c, tp_ag, tp_rs, tp_ar);
      layer.forward = Add(layer.forward, shared.forward);
      layer.backward = Add(layer.backward, shared.backward);
      layer.weight_grad = Add(layer.weight_grad, shared.weight_grad);
    }
    const double tp_hidden = sp ? cluster.software.tp_comm_overlap_fraction.value : 0.0;
    if (tp_hidden > 0) {
      const double slowdown = cluster.software.overlap_compute_slowdown.value;
      HideTensorParallelComm(&layer.forward, tp_hidden, slowdown);
      HideTensorParallelComm(&layer.backward, tp_hidden, slowdown);
    }
    // The ring's exposed sends stay exposed: TE overlaps them with the attention blocks only.
    if (cluster.software.context_parallel_collectives.value) {
      AddContextCollectives(kind, hw, pr, c.tp, c.mbs, c.cp, ring, &layer);
    } else {
      AddContextRing(kind, hw, pr, c.tp, c.mbs, c.cp, ring, &layer);
    }
    return layer;
  };
  p.layer = price_layer(m);
  if (m.HasDenseLayers()) p.dense_layer = price_layer(DenseLayerModel(m));
  // A dense layer's MLP runs half its forward's tensor-parallel collectives (the attention's and
  // the MLP's are the same b s h pair).
  const PieceCost& dense = m.IsMoe() ? p.dense_layer : p.layer;
  // recompute_modules moe and shared_experts redo the mixture's forward as the layer runs it, its
  // shared expert's tensor-parallel pair hidden alike.
  MixtureForward mixture;
  if (m.IsMoe() && (c.Recomputes(kRecomputeMoe) || c.Recomputes(kRecomputeSharedExperts))) {
    mixture.block = ExpertMlpCost(m, hw, c, expert_comm).forward;
    mixture.shared = SharedExpertCost(m, hw, c, tp_ag, tp_rs, tp_ar).forward;
    const double tp_hidden = sp ? cluster.software.tp_comm_overlap_fraction.value : 0.0;
    if (tp_hidden > 0) {
      HideTensorParallelComm(&mixture.shared, tp_hidden,
                             cluster.software.overlap_compute_slowdown.value);
    }
  }
  p.core = SelectiveRecomputeCost(m, hw, c, m.IsMoe() ? 0.0 : dense.forward.tp_comm / 2, mixture);
  if (m.HasDenseLayers()) {
    p.dense_core = SelectiveRecomputeCost(DenseLayerModel(m), hw, c, dense.forward.tp_comm / 2);
  }
  if (m.IsMoe()) {  // the experts in place of the MLP, their all-to-alls not hidden either
    p.moe_phases = MoeLayerPhasesOf(p.layer, ExpertMlpPartsOf(m, hw, c), expert_comm, p.core);
    const PieceCost experts = ExpertMlpCost(m, hw, c, expert_comm);
    p.layer.forward = Add(p.layer.forward, experts.forward);
    p.layer.backward = Add(p.layer.backward, experts.backward);
    p.layer.weight_grad = Add(p.layer.weight_grad, experts.weight_grad);
    if (c.moe_shared_expert_overlap) {
      OverlapSharedExpert(SharedExpertHalvesOf(m, hw, c, tp_ag, tp_rs, tp_ar), expert_comm,
                          cluster.software.overlap_compute_slowdown.value, &p.layer);
    }
  }
  if (m.window_size > 0) {  // fused attention at cp 1 (Validate): the layer's own kernel price
    const PieceCost kernel = FusedAttentionCost(m, hw, c.tp, c.mbs);
    const double cut = 1.0 - m.WindowPairShare();
    p.window_cut_forward = cut * kernel.forward.gemm;
    p.window_cut_backward = cut * kernel.backward.gemm;
  }
  p.embed = EmbeddingCost(m, hw, pr, c.tp, c.mbs, sp ? tp_rs : tp_ar, sp);
  p.head = HeadCost(m, hw, pr, c.tp, c.mbs, sp ? tp_rs : tp_ar, tp_small_ar, sp, tp_ag,
                    cluster.software.fused_cross_entropy.value);
  if (m.mtp_layers > 0) {
    // A layer of the last layer's kind.
    p.mtp_layer = m.IsMoeLayer(m.layers - 1) || !m.IsMoe() ? p.layer : p.dense_layer;
    p.mtp = MtpDepthCost(m, hw, c, p.mtp_layer, p.embed, p.head, tp_ag, tp_rs);
  }
  return p;
}

}  // namespace

CostTable BuildCostTable(const ModelSpec& m, const ClusterSpec& cluster, const ParallelConfig& c,
                         const std::vector<int64_t>* param_elements, const StashPrices* prices_in,
                         PieceCostMemo* memo) {
  PieceCostMemo local_memo;
  const HardwareProfile& hw = cluster.profile;
  const int G = cluster.gpus_per_node;
  // Context-parallel ranks sit between the tensor and the data ranks (Megatron-Core's order
  // tp-cp-dp-pp): the grid's data groups are the d * cp ranks that reduce each gradient, and a
  // context-parallel group is the first cp of them.
  auto grid_or = RankGrid::Create(c.tp, c.WeightReplicas(), c.pp);
  PTDP_CHECK(grid_or.ok());
  const RankGrid& grid = *grid_or;
  const int e = ComputeBytes(c.precision);
  const int64_t shard_len = ContextShardLen(m, c);
  const Bytes bsh_bytes = Bytes(c.mbs) * shard_len * m.hidden * e;

  // Groups of rank 0 are representative: every group of a kind has the same span (regular grid).
  const GroupSpan tp_span = SpanOf(grid.TensorGroup(0), G);
  const GroupSpan dp_span = SpanOf(grid.DataGroup(0), G);
  const GroupSpan edp_span = m.IsMoe() ? SpanOf(ExpertDataGroup(c), G) : dp_span;
  const ShardedGroups sharded = ShardedGroupSpans(grid.DataGroup(0), c, G);
  const Seconds tp_ar = CollectiveTime(hw, Collective::kAllReduce, bsh_bytes, tp_span, G);
  const Seconds tp_ag = CollectiveTime(hw, Collective::kAllGather, bsh_bytes, tp_span, G);
  const Seconds tp_rs = CollectiveTime(hw, Collective::kReduceScatter, bsh_bytes, tp_span, G);
  const Seconds tp_small_ar =
      CollectiveTime(hw, Collective::kAllReduce, Bytes(c.mbs) * shard_len * 4, tp_span, G);
  const bool sp = c.sequence_parallel;
  // The context-parallel ring: ranks 0, t, ..., (cp - 1) t, the first cp of a data group; it
  // crosses nodes when its last rank is on another node than rank 0. Nothing of it is built for
  // cp = 1 (the search scores every layout through here).
  const bool ring_inter =
      c.cp > 1 && RankGrid::NodeOf(grid.Rank({0, c.cp - 1, 0}), G) != RankGrid::NodeOf(0, G);
  // A mixture of experts' all-to-alls and expert-tensor collectives (zero for a dense model).
  const ExpertComm expert_comm = ExpertCommTimes(m, hw, c, G);

  const Precision pr = c.precision;
  const PieceCostMemo::Key key{
      c.tp,
      c.mbs,
      pr,
      sp,
      c.fused_attention,
      c.recompute == Recompute::kSelective ? 0x100 | c.recompute_modules : 0,
      tp_ar,
      tp_ag,
      tp_rs,
      tp_small_ar,
      c.cp,
      ring_inter,
      c.ep,
      c.ExpertTp(),
      expert_comm.all_to_all,
      expert_comm.etp_allgather,
      c.moe_shared_expert_overlap};
  auto memo_it = memo ? memo->pieces.find(key) : decltype(memo->pieces.end()){};
  if (!memo || memo_it == memo->pieces.end()) {
    // What one context-parallel rank computes on: s / cp of each sequence (the model at cp = 1).
    ModelSpec shard = m;
    shard.seq_len = shard_len;
    LinkCost ring;
    if (c.cp > 1) {
      ring = SendRecvLink(hw, ring_inter,
                          Bytes(ContextRingSendBytes(shard, c.precision, c.tp, c.mbs)));
    }
    PieceCostMemo::Pieces priced =
        PricePieces(shard, cluster, c, tp_ar, tp_ag, tp_rs, tp_small_ar, ring, expert_comm);
    if (!memo) memo = &local_memo;
    memo_it = memo->pieces.emplace(key, priced).first;
  }
  const PieceCost& layer = memo_it->second.layer;
  const PieceCost& dense_layer = memo_it->second.dense_layer;
  const PieceCost& embed = memo_it->second.embed;
  const PieceCost& head = memo_it->second.head;
  const ComputeBreakdown& core = memo_it->second.core;
  const ComputeBreakdown& dense_core = memo_it->second.dense_core;
  // What one microbatch keeps on each chunk (the ledger's), for the simulator's memory counters.
  const StashPrices prices = prices_in ? *prices_in : StashPricesOf(m, c);

  // After the first microbatch, each backward adds its weight gradients to the accumulated ones;
  // with an unfused accumulation that is an elementwise kernel per parameter tensor. Charged as
  // (m-1)/m of it on every microbatch's backward, so that an iteration pays for m-1 of them.
  std::vector<int64_t> counts_local;
  if (param_elements == nullptr) {
    counts_local = StageParameterCounts(m, c);
    param_elements = &counts_local;
  }
  const double accumulate_bytes =
      c.grad_accumulation_fusion ? 0.0 : cluster.software.grad_accumulate_bytes_per_param.value;
  const int64_t microbatches = c.Microbatches();
  const double accumulate_share =
      microbatches > 1 ? double(microbatches - 1) / double(microbatches) : 0.0;
  const LayerParameters layer_params =
      accumulate_bytes > 0 ? LayerParameterCounts(m, c) : LayerParameters{};
  const LayerParameters dense_params = accumulate_bytes > 0 && m.HasDenseLayers()
                                           ? LayerParameterCounts(DenseLayerModel(m), c)
                                           : LayerParameters{};

  // The host synchronisations around each pass (and, with a pipeline, around the p2p exchange
  // after it) each leave the GPU idle for a launch before the next kernel.
  const double sync_gaps = cluster.software.host_sync_gaps_per_pass.value * (c.pp > 1 ? 2.0 : 1.0);
  const Seconds sync_gap_s = sync_gaps * hw.kernel_launch_us.value * kUs;

  // The loss averaged over the data-parallel group for logging, a blocking one-float all-reduce
  // per microbatch on the last stage (the software profile's loss_dp_allreduces_per_microbatch).
  const double loss_allreduce_count = cluster.software.loss_dp_allreduces_per_microbatch.value;
  const Seconds loss_allreduces =
      loss_allreduce_count > 0 && c.WeightReplicas() > 1
          ? loss_allreduce_count * CollectiveTime(hw, Collective::kAllReduce, 4, dp_span, G)
          : 0.0;

  CostTable t;
  t.pp = c.pp;
  t.vp = c.vp;
  t.chunks.resize(size_t(c.pp) * c.vp);
  const bool accumulate = accumulate_bytes > 0 && accumulate_share > 0;
  for (int r = 0; r < c.pp; ++r) {
    // The rank's parameters beyond its layers' (embedding, head) accumulate in the chunk holding
    // them.
    const int rank_layers = RankLayerCount(m, c, r), rank_dense = RankDenseLayers(m, c, r);
    const int64_t extra = accumulate
                              ? (*param_elements)[r] -
                                    int64_t(rank_layers - rank_dense) * layer_params.elements -
                                    int64_t(rank_dense) * dense_params.elements
                              : 0;
    for (int k = 0; k < c.vp; ++k) {
      ChunkCost& cc = t.chunks[size_t(r) * c.vp + k];
      const double dense = ChunkDenseLayers(m, c, r, k);
      const double n = ChunkLayers(m, c, r, k).size() - dense;  // layers of the model's own kind
      cc.moe_layers = m.IsMoe() ? int(n) : 0;
      cc.forward = Add(cc.forward, layer.forward, n);
      cc.backward = Add(cc.backward, layer.backward, n);
      cc.weight_grad = Add(cc.weight_grad, layer.weight_grad, n);
      if (c.recompute == Recompute::kFull) cc.recompute = Add(cc.recompute, layer.forward, n);
      if (dense > 0) {  // a mixture's dense layers
        cc.forward = Add(cc.forward, dense_layer.forward, dense);
        cc.backward = Add(cc.backward, dense_layer.backward, dense);
        cc.weight_grad = Add(cc.weight_grad, dense_layer.weight_grad, dense);
        if (c.recompute == Recompute::kFull) {
          cc.recompute = Add(cc.recompute, dense_layer.forward, dense);
        }
      }
      if (c.recompute == Recompute::kSelective) {
        cc.recompute = Add(Add(cc.recompute, core, n), dense_core, dense);
      }
      if (m.window_size > 0) {  // the chunk's windowed layers' kernels score fewer pairs
        const LayerRange held = ChunkLayers(m, c, r, k);
        const double windowed = m.WindowLayersIn(held.begin, held.end);
        const PieceCostMemo::Pieces& pieces = memo_it->second;
        cc.forward.gemm -= windowed * pieces.window_cut_forward;
        cc.backward.gemm -= windowed * pieces.window_cut_backward;
        if (c.recompute == Recompute::kFull || c.Recomputes(kRecomputeCoreAttn)) {
          cc.recompute.gemm -= windowed * pieces.window_cut_forward;
        }
      }
      if (HoldsEmbedding(c, r, k)) {
        cc.forward = Add(cc.forward, embed.forward);
        cc.backward = Add(cc.backward, embed.backward);
      }
      if (HoldsHead(c, r, k)) {
        cc.forward = Add(cc.forward, head.forward);
        cc.forward.tp_comm += loss_allreduces;
        cc.backward = Add(cc.backward, head.backward);
        cc.weight_grad = Add(cc.weight_grad, head.weight_grad);
        if (m.mtp_layers > 0) {  // the multi-token prediction depths after the head
          const PieceCost& mtp = memo_it->second.mtp;
          const double depths = m.mtp_layers;
          cc.forward = Add(cc.forward, mtp.forward, depths);
          cc.backward = Add(cc.backward, mtp.backward, depths);
          cc.weight_grad = Add(cc.weight_grad, mtp.weight_grad, depths);
          if (c.recompute == Recompute::kFull) {
            cc.recompute = Add(cc.recompute, memo_it->second.mtp_layer.forward, depths);
          }
          if (c.recompute == Recompute::kSelective) {  // a layer of the last layer's kind
            const bool own = m.IsMoeLayer(m.layers - 1) || !m.IsMoe();
            cc.recompute = Add(cc.recompute, own ? core : dense_core, depths);
          }
        }
      }
      cc.stash_bytes = ChunkStashBytes(prices, m, c, r, k);
      cc.forward.memory += sync_gap_s;
      cc.backward.memory += sync_gap_s;
      if (accumulate) {
        const bool holds_extra = HoldsEmbedding(c, r, k) || HoldsHead(c, r, k);
        const double elements = n * double(layer_params.elements) +
                                dense * double(dense_params.elements) + (holds_extra ? extra : 0);
        const int kernels = int(n) * layer_params.tensors + int(dense) * dense_params.tensors +
                            (holds_extra ? 2 : 0);
        const Seconds add =
            accumulate_share * MemoryBoundTime(hw, elements * accumulate_bytes, kernels);
        cc.backward.memory += add;
        cc.weight_grad.memory += add;  // the accumulation of the weight gradients is W's
      }
    }
  }

  // Pipeline p2p: rank r -> r+1 (and the wrap p-1 -> 0). All t tensor ranks of a stage send at
  // once, each over its own path; with scatter/gather each sends 1/t and the receiver all-gathers.
  t.p2p_bytes = PipelineMessageBytes(m, c);
  // (With sequence parallelism the boundary tensor is already split: no all-gather.)
  if (c.pp > 1 && c.scatter_gather && c.tp > 1 && !sp) {
    t.p2p_allgather = CollectiveTime(hw, Collective::kAllGather, bsh_bytes, tp_span, G);
  }
  t.p2p_link.resize(c.pp);
  for (int r = 0; r < c.pp; ++r) {
    const int a = grid.Rank({0, 0, r}), b = grid.Rank({0, 0, (r + 1) % c.pp});
    const bool inter = RankGrid::NodeOf(a, G) != RankGrid::NodeOf(b, G);
    t.p2p_link[r] = SendRecvLink(hw, inter, t.p2p_bytes);
  }

  // After the flush.
  const ParamBytes bytes_per = BytesPerParameter(c);
  const int grad_bytes = bytes_per.grad;
  const Bytes word_emb = PaddedVocab(m, c.tp) / c.tp * m.hidden * grad_bytes;
  t.dp_allreduce.assign(c.pp, 0.0);
  t.dp_param_gather.assign(c.pp, 0.0);
  t.dp_collectives.assign(c.pp, {});
  t.dp_reduction_entries.assign(c.pp, 1);
  const Seconds optimizer_small_allreduces =
      OptimizerSmallAllReducesTime(cluster.software, hw, grid, c, G);
  t.embedding_allreduce.assign(c.pp, 0.0);
  t.optimizer.assign(c.pp, 0.0);
  // A rank like the one before it (the same parameters and layers, neither in the embedding group)
  // has the same reductions and optimizer step: copied, not planned again (the ranks between the
  // first and the last, up to a hundred per layout, for every layout the search scores).
  for (int r = 0; r < c.pp; ++r) {
    const int64_t params = (*param_elements)[r];
    if (r > 0 && params == (*param_elements)[r - 1] && !InTiedEmbeddingGroup(m, c, r) &&
        !InTiedEmbeddingGroup(m, c, r - 1) &&
        RankLayerCount(m, c, r) == RankLayerCount(m, c, r - 1) &&
        RankDenseLayers(m, c, r) == RankDenseLayers(m, c, r - 1)) {
      t.dp_collectives[r] = t.dp_collectives[r - 1];
      t.dp_reduction_entries[r] = t.dp_reduction_entries[r - 1];
      t.dp_param_gather[r] = t.dp_param_gather[r - 1];
      t.dp_allreduce[r] = t.dp_allreduce[r - 1];
      t.optimizer[r] = t.optimizer[r - 1];
      continue;
    }
    // The distributed optimizer reduce-scatters the gradients and all-gathers the updated weights.
    // A mixture of experts' expert weights are reduced over their own group (ExpertDataGroup).
    std::vector<CollectiveCost>& dp = t.dp_collectives[r];
    const int64_t experts = StageExpertElements(m, c, r), dense = params - experts;
    if (c.distributed_optimizer) {
      // Within the shard group (one optimizer instance), across the instances (FSDP: only that,
      // the rest ran per microbatch, AddFsdpCollectives below).
      const ShardedFlush flush = AddShardedFlushCollectives(hw, c, dense, sharded, G, &dp);
      t.dp_param_gather[r] = flush.gather;
      t.dp_reduction_entries[r] = flush.reductions;
      if (experts > 0) {  // the experts' reduce-scatter joins the reduction, before the gathers
        dp.insert(dp.begin() + flush.reductions, PlanCollective(hw, Collective::kReduceScatter,
                                                                experts * grad_bytes, edp_span, G));
        t.dp_reduction_entries[r] += 1;
        dp.push_back(
            PlanCollective(hw, Collective::kAllGather, experts * bytes_per.weight, edp_span, G));
        t.dp_param_gather[r] += dp.back().Time();
      }
    } else {
      dp.push_back(PlanCollective(hw, Collective::kAllReduce, dense * grad_bytes, dp_span, G));
      if (experts > 0) {
        dp.push_back(PlanCollective(hw, Collective::kAllReduce, experts * grad_bytes, edp_span, G));
        t.dp_reduction_entries[r] = 2;
      }
    }
    for (const CollectiveCost& one : dp) t.dp_allreduce[r] += one.Time();
    if (InTiedEmbeddingGroup(m, c, r)) {
      const std::vector<int> emb = grid.EmbeddingGroup(grid.Rank({0, 0, r}));
      t.embedding_allreduce[r] =
          CollectiveTime(hw, Collective::kAllReduce, word_emb, SpanOf(emb, G), G);
    }
    // The distributed optimizer updates 1/(d cp) of the dense parameters on each GPU and its
    // share of the experts'.
    const int64_t updated = OptimizerShardsOf(c, params, experts).owned;
    t.optimizer[r] = OptimizerStepTime(hw, c, updated, cluster.software) +
                     optimizer_small_allreduces + DataParallelCopyTime(cluster, m, c, r, params) +
                     GradBufferPassTime(cluster.software, hw, c, params);
  }
  t.param_elements = *param_elements;
  AddFsdpCollectives(m, cluster, c, t.param_elements, sharded.shard, &t);
  if (c.moe_a2a_overlap) {
    int most = 0;
    for (const ChunkCost& cc : t.chunks) most = std::max(most, cc.moe_layers);
    t.a2a_pair_saving = PairedLayerSavings(memo_it->second.moe_phases, most,
                                           cluster.software.overlap_compute_slowdown.value);
  }
  t.dp_buckets = 1;
  SetDataParallelOverlap(cluster.software, c, &t);
  return t;
}

Seconds BucketedExposedTime(Seconds comm, Seconds window, int buckets) {
  const double k = std::max(1, buckets);
  return comm / k + std::max(0.0, comm - window) * (k - 1) / k;
}

Seconds ExposedDataParallelTime(const CostTable& t, const ParallelConfig& c, int r) {
  if (!t.overlap_grad_reduce && !t.overlap_param_gather) return t.dp_allreduce[r];
  const Seconds gather = r < int(t.dp_param_gather.size()) ? t.dp_param_gather[r] : 0.0;
  const Seconds reduce = t.dp_allreduce[r] - gather;
  const int buckets = t.dp_buckets * t.vp;
  // The rank's last backwards (their W passes in a split schedule) and its first forward.
  Seconds last_backwards = 0;
  for (int k = 0; k < t.vp; ++k) {
    const ChunkCost& cc = t.Chunk(r, k);
    last_backwards += SplitsBackward(c.schedule) ? cc.weight_grad.Total() : cc.BackwardTime();
  }
  const Seconds first_forward = t.Chunk(r, 0).ForwardTime();
  const Seconds exposed_reduce =
      t.overlap_grad_reduce ? BucketedExposedTime(reduce, last_backwards, buckets) : reduce;
  const Seconds exposed_gather =
      t.overlap_param_gather ? BucketedExposedTime(gather, first_forward, buckets) : gather;
  // What was hidden slowed the compute beside it; paid here, on the same critical path.
  const Seconds hidden = (reduce - exposed_reduce) + (gather - exposed_gather);
  return exposed_reduce + exposed_gather + hidden * OverlapStretch(t.overlap_compute_slowdown);
}

void SetThroughput(const ModelSpec& m, const ClusterSpec& cluster, const ParallelConfig& c,
                   Prediction* p) {
  const double n = c.WorldSize();
  p->tflops_per_gpu = HardwareIterationFlops(m, c) / p->iteration_s / n / kTera;
  p->model_tflops_per_gpu = ModelIterationFlops(m, c) / p->iteration_s / n / kTera;
  // Of the rank's peak: its share of the device's where ranks share one (device_share).
  const double peak = cluster.profile.peak_tflops.value / cluster.profile.DeviceCopies();
  p->percent_of_peak = 100.0 * p->tflops_per_gpu / peak;
  p->model_flops_utilization = 100.0 * p->model_tflops_per_gpu / peak;
  p->tokens_per_s = double(c.global_batch) * m.seq_len / p->iteration_s;
}

Prediction Predict(const ModelSpec& m, const ClusterSpec& cluster, const ParallelConfig& c,
                   const CostTable& t, const PipelineModel* pipeline, bool all_stages,
                   const StashPrices* prices_in) {
  static const ClosedFormPipeline kClosedForm;
  if (pipeline == nullptr) pipeline = &kClosedForm;
  Prediction p;
  const PipelineTime pt = pipeline->Time(t, c);

  // Breakdown of the slowest stage.
  const std::vector<Seconds> per = StageMicrobatchTimes(t);
  const int slow = int(std::max_element(per.begin(), per.end()) - per.begin());
  const double mb = double(c.Microbatches());
  Seconds chunk_dp = 0;  // FSDP's collectives inside the chunks (costmodel/fsdp_cost.h)
  for (int k = 0; k < t.vp; ++k) {
    const ChunkCost& cc = t.Chunk(slow, k);
    p.breakdown.compute += mb * (cc.forward.gemm + cc.forward.memory + cc.backward.gemm +
                                 cc.backward.memory + cc.recompute.gemm + cc.recompute.memory);
    p.breakdown.tp_comm += mb * (cc.forward.tp_comm + cc.backward.tp_comm + cc.recompute.tp_comm);
    chunk_dp += mb * (cc.forward.dp_comm + cc.backward.dp_comm + cc.recompute.dp_comm);
    // The combined 1F1B hides part of the all-to-alls: what each pair saves leaves the line.
    p.breakdown.tp_comm -= mb * t.PairSaving(cc, cc);
  }
  p.breakdown.tp_comm = std::max(0.0, p.breakdown.tp_comm);
  if (t.pp > 1) {
    p.breakdown.pp_comm = mb * 2.0 * t.vp * (t.p2p_link[slow].Time(t.p2p_bytes) + t.p2p_allgather);
  }
  p.breakdown.bubble = pt.bubble;
  Seconds tail = 0;
  for (int r = 0; r < t.pp; ++r) {
    const Seconds dp = ExposedDataParallelTime(t, c, r);
    const Seconds x = dp + t.embedding_allreduce[r] + t.optimizer[r];
    if (x > tail) {
      tail = x;
      p.breakdown.dp_comm = dp + t.embedding_allreduce[r];
      p.breakdown.optimizer = t.optimizer[r];
    }
  }
  p.breakdown.dp_comm += chunk_dp;
  // The pipeline total may come from a model other than the closed form (the simulator, whose
  // bubble is the busiest rank's idle time): compute and tensor-parallel time stay as the table
  // says, point-to-point time is what the busy time holds beyond them (0 when the replay hides it
  // behind compute), and if the busy time is shorter than compute (a rank other than the slowest
  // closed-form stage is the busiest) the parts are scaled to it.
  const Seconds busy = pt.total - pt.bubble;
  // (FSDP's collectives run inside the chunks' instructions, so the busy time holds them too.)
  const Seconds compute_tp = p.breakdown.compute + p.breakdown.tp_comm + chunk_dp;
  if (busy >= compute_tp) {
    p.breakdown.pp_comm = std::min(p.breakdown.pp_comm, busy - compute_tp);
    p.breakdown.bubble = pt.total - compute_tp - p.breakdown.pp_comm;
  } else if (compute_tp > 0 && busy > 0) {
    const double f = busy / compute_tp;
    p.breakdown.compute *= f;
    p.breakdown.tp_comm *= f;
    p.breakdown.dp_comm -= chunk_dp * (1 - f);
    p.breakdown.pp_comm = 0;
  }
  p.iteration_s = pt.total + tail;
  p.bubble_fraction = pt.bubble / p.iteration_s;
  SetThroughput(m, cluster, c, &p);

  // Memory: the ledger's per rank (core/ledger.h), the runtime's transient buffers at their peak
  // (PeakWorkspaceBytes: the logits' gradient, layers' gradients, messages) and the profile's
  // workspace. The peak is on the
  // first rank (most in flight, the embedding) or the last (the head), since the ranks between hold
  // the same parameters as each other and no more in flight than rank 0; `all_stages` lists every
  // rank (for reports), otherwise just those two. With uneven stages rank 1 too: it may hold more
  // layers than rank 0, and it has the most in flight of the ranks between. Per-stage counts
  // (stage_layers) may put the most layers on any rank, and a mixture's dense layers make
  // the ranks between unlike (one with only expert layers may be the heaviest), so
  // then every rank is priced.
  const StashPrices prices = prices_in ? *prices_in : StashPricesOf(m, c);
  const Bytes workspace = Bytes(cluster.profile.workspace_GiB.value * kGiB);
  const Fp8LayerWeights fp8_per_layer = Fp8LayerWeightsOf(m, c);
  for (int r = 0; r < c.pp; ++r) {
    const bool any_rank = all_stages || !c.stage_layers.empty() || m.HasDenseLayers();
    if (!any_rank && r != 0 && r != c.pp - 1 && !(c.Uneven() && r == 1)) continue;
    const MemoryLedger l = ParameterMemory(c, t.param_elements[r], StageExpertElements(m, c, r));
    const MemoryLedger whole = WholeCopyMemory(m, c, r, fp8_per_layer);
    StageMemory sm;
    sm.pp_rank = r;
    sm.weights = l.weights + whole.weights;
    sm.grads = l.grads + whole.grads;
    sm.optimizer = l.optimizer;
    sm.activations = PeakActivationBytes(prices, m, c, r);
    sm.transient = PeakWorkspaceBytes(prices, m, c, r);
    sm.workspace = workspace;
    if (sm.Total() > p.peak_memory) {
      p.peak_memory = sm.Total();
      p.peak_memory_stage = r;
    }
    p.memory.push_back(sm);
  }
  return p;
}

}  // namespace ptdp::costmodel
