#include "costmodel/fsdp_cost.h"

#include <algorithm>

#include "core/fsdp.h"
#include "core/ledger.h"
#include "core/shapes.h"
#include "costmodel/estimate.h"

namespace ptdp::costmodel {

FsdpChunkComm PlanFsdpChunkComm(const HardwareProfile& hw, const ParallelConfig& c,
                                int64_t elements, int units, const GroupSpan& dp_span,
                                int gpus_per_node) {
  const ParamBytes bytes = BytesPerParameter(c);
  FsdpChunkComm comm;
  comm.elements = elements;
  comm.units = units;
  // The weights travel as the layers read them (16-bit in mixed precision), the gradients as the
  // gradient buffer holds them (fp32 main gradients, or bf16 with grad_reduce_bf16).
  comm.gather = CollectiveTime(hw, Collective::kAllGather, Bytes(elements) * bytes.weight, dp_span,
                               gpus_per_node);
  comm.reduce_scatter = CollectiveTime(hw, Collective::kReduceScatter, Bytes(elements) * bytes.grad,
                                       dp_span, gpus_per_node);
  return comm;
}

ShardedGroups ShardedGroupSpans(const std::vector<int>& data_group, const ParallelConfig& c,
                                int gpus_per_node) {
  const size_t shard = size_t(c.OptimizerShardRanks());
  ShardedGroups g;
  if (shard == 0 || shard >= data_group.size()) {
    g.shard = SpanOf(data_group, gpus_per_node);
    return g;
  }
  const std::vector<int> inner(data_group.begin(), data_group.begin() + long(shard));
  std::vector<int> outer;
  for (size_t i = 0; i < data_group.size(); i += shard) outer.push_back(data_group[i]);
  g.shard = SpanOf(inner, gpus_per_node);
  g.replica = SpanOf(outer, gpus_per_node);
  return g;
}

ShardedFlush AddShardedFlushCollectives(const HardwareProfile& hw, const ParallelConfig& c,
                                        int64_t dense, const ShardedGroups& groups,
                                        int gpus_per_node, std::vector<CollectiveCost>* dp) {
  const size_t before = dp->size();
  const ParamBytes bytes = BytesPerParameter(c);
  const Bytes grads = Bytes(dense) * bytes.grad;
  if (!c.fsdp) {
    dp->push_back(
        PlanCollective(hw, Collective::kReduceScatter, grads, groups.shard, gpus_per_node));
  }
  if (c.optimizer_instances > 1) {
    // One rank's shard of the gradients, the same on each instance's rank of that shard.
    const Bytes shard = Bytes(OptimizerShardElements(dense, c.OptimizerShardRanks())) * bytes.grad;
    dp->push_back(PlanCollective(hw, Collective::kAllReduce, shard, groups.replica, gpus_per_node));
  }
  ShardedFlush flush;
  flush.reductions = int(dp->size() - before);
  if (c.fsdp) return flush;
  dp->push_back(PlanCollective(hw, Collective::kAllGather, Bytes(dense) * bytes.weight,
                               groups.shard, gpus_per_node));
  flush.gather = dp->back().Time();
  return flush;
}

namespace {

// `comm` run unit by unit beside `compute`: the first unit's exposed, the rest where they outlast
// the compute, and what is hidden paid as the compute's slowdown.
Seconds ExposedBeside(Seconds comm, Seconds compute, int units, double slowdown) {
  const Seconds exposed = BucketedExposedTime(comm, compute, units);
  return exposed + (comm - exposed) * OverlapStretch(slowdown);
}

}  // namespace

void AddFsdpCollectives(const ModelSpec& m, const ClusterSpec& cluster, const ParallelConfig& c,
                        const std::vector<int64_t>& param_elements, const GroupSpan& shard_span,
                        CostTable* t) {
  if (!c.fsdp) return;
  const double slowdown = cluster.software.overlap_compute_slowdown.value;
  const int64_t layer = LayerParameterCounts(m, c).elements;
  for (int r = 0; r < c.pp; ++r) {
    // The rank's parameters beyond its layers (embedding, output layer, final norm), shared by its
    // chunks that hold an end.
    const int64_t extra = FsdpEndElements(m, c, r, param_elements[size_t(r)]);
    int end_chunks = 0;
    for (int k = 0; k < c.vp; ++k) end_chunks += HoldsEmbedding(c, r, k) || HoldsHead(c, r, k);
    for (int k = 0; k < c.vp; ++k) {
      const int layers = int(ChunkLayers(m, c, r, k).size());
      const int ends = int(HoldsEmbedding(c, r, k)) + int(HoldsHead(c, r, k));
      const int64_t elements = int64_t(layers) * layer + (ends > 0 ? extra / end_chunks : 0);
      const int units = std::max(1, layers + ends);
      const FsdpChunkComm comm =
          PlanFsdpChunkComm(cluster.profile, c, elements, units, shard_span, cluster.gpus_per_node);
      ChunkCost& cc = t->chunks[size_t(r) * c.vp + k];
      // Forward: the gathers beside the forward. Backward: the gathers again (the weights were
      // freed after the forward) and the reduce-scatters, beside the backward and what it redoes.
      cc.forward.dp_comm += ExposedBeside(comm.gather, cc.forward.Total(), units, slowdown);
      cc.backward.dp_comm +=
          ExposedBeside(comm.gather + comm.reduce_scatter,
                        cc.backward.Total() + cc.recompute.Total(), units, slowdown);
    }
  }
}

}  // namespace ptdp::costmodel
