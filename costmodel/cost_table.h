// CostTable: what the simulator needs to replay one layout's Program, produced by the cost model
// (costmodel/) from a ModelSpec, a ParallelConfig and a cluster's hardware profile. All times are
// per microbatch unless said otherwise; each includes the tensor-parallel communication that the
// instruction performs inside itself (Megatron's f/g all-reduces live inside forward/backward).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/units.h"

namespace ptdp::costmodel {

// Time split of one compute instruction, for breakdowns and for the simulator to draw.
struct ComputeBreakdown {
  Seconds gemm = 0;     // matrix multiplies (profiled table, interpolated)
  Seconds memory = 0;   // memory-bound ops (LayerNorm, softmax, GeLU, dropout, residual)
  Seconds tp_comm = 0;  // tensor-parallel all-reduces (or all-gathers of scatter/gather)
  // Fully sharded data parallelism's exposed all-gathers and reduce-scatters, and what hiding the
  // rest cost (costmodel/fsdp_cost.h); 0 without ParallelConfig::fsdp.
  Seconds dp_comm = 0;
  Seconds Total() const { return gemm + memory + tp_comm + dp_comm; }
};

// a + times b, term by term.
inline ComputeBreakdown Add(ComputeBreakdown a, const ComputeBreakdown& b, double times = 1.0) {
  a.gemm += times * b.gemm;
  a.memory += times * b.memory;
  a.tp_comm += times * b.tp_comm;
  a.dp_comm += times * b.dp_comm;
  return a;
}

// One model chunk on one pipeline rank, for one microbatch.
struct ChunkCost {
  ComputeBreakdown forward;
  ComputeBreakdown backward;   // input and weight gradients, not counting recomputation
  ComputeBreakdown recompute;  // the extra forward redone in the backward (zero when off)
  // The part of `backward` that is the weight-gradient GEMMs: what a split backward's W half
  // (kBackwardWeight) runs; the input-gradient half (kBackwardInput) runs the rest and the
  // recomputation. Zero when unknown (W is then free and BI is the whole backward).
  ComputeBreakdown weight_grad;
  Seconds ForwardTime() const { return forward.Total(); }
  Seconds BackwardTime() const { return backward.Total() + recompute.Total(); }
  // Bytes one microbatch in flight keeps on this chunk between its forward and its backward
  // (core/ledger.h ChunkStashBytes): what the simulator's activation counters show. Memory itself
  // is the ledger's (MemoryOf), never a sum of these.
  Bytes stash_bytes = 0;
  // Its mixture-of-experts layers (the model's own kind; not the dense ones, not the prediction
  // depths): what pairs in the combined 1F1B (ParallelConfig::moe_a2a_overlap).
  int moe_layers = 0;
};

// An alpha-beta link as one pipeline stream sees it (sharing with the other streams that cross the
// same NICs at the same time already divided into the bandwidth).
struct LinkCost {
  Seconds latency = 0;
  double bandwidth_Bps = 0;  // bytes per second
  bool inter_node = false;
  Seconds Time(Bytes bytes) const {
    return bytes <= 0 ? 0.0 : latency + double(bytes) / bandwidth_Bps;
  }
};

// One collective of a group as it is carried out (costmodel/collectives.h PlanCollective): its
// latencies, the time of its intra-node phases (NVLink: not shared with the NICs) and the bytes
// each member's NIC carries in its inter-node phase, at the rate one NIC gives them alone. The
// phases are pipelined chunk by chunk, so the collective takes the latencies plus its slowest
// phase; the simulator runs the NIC part as a flow that shares the NIC with whatever else crosses
// it.
struct CollectiveCost {
  Seconds latency = 0;
  Seconds intra = 0;
  double nic_bytes = 0;
  double nic_Bps = 0;
  Seconds NicTime() const { return nic_bytes > 0 ? nic_bytes / nic_Bps : 0.0; }
  Seconds Time() const { return latency + (intra > NicTime() ? intra : NicTime()); }
};

struct CostTable {
  int pp = 1;
  int vp = 1;
  std::vector<ChunkCost> chunks;  // index pp_rank * vp + chunk
  const ChunkCost& Chunk(int pp_rank, int chunk) const { return chunks[pp_rank * vp + chunk]; }

  // Pipeline point-to-point: bytes of one message per tensor rank (b s h or b s h / t), the
  // all-gather the receiver runs with scatter/gather, and the link from pipeline rank r to r+1
  // (index pp-1: from the last rank to the first, used by the interleaved schedule's wrap).
  Bytes p2p_bytes = 0;
  Seconds p2p_allgather = 0;
  std::vector<LinkCost> p2p_link;  // [pp_rank]

  // After the pipeline flush, per pipeline rank: the data-parallel gradient all-reduce, the
  // embedding all-reduce (first and last stage only) and the optimizer step.
  std::vector<Seconds> dp_allreduce;         // [pp_rank]: the sum of dp_collectives' Time()s
  std::vector<Seconds> embedding_allreduce;  // [pp_rank]
  std::vector<Seconds> optimizer;            // [pp_rank]
  // Of dp_allreduce, the distributed optimizer's all-gather of the updated weights (0 without it).
  std::vector<Seconds> dp_param_gather;  // [pp_rank]
  // The data-parallel collectives of each pipeline rank, in order: the gradient reduction (one
  // all-reduce, or the distributed optimizer's reduce-scatter; a mixture's experts' after the
  // dense weights'; the all-reduce across optimizer instances), then the distributed optimizer's
  // all-gathers of the weights (dp_reduction_entries says where they start). What the simulator
  // runs through the rank's NIC (costmodel/ collectives.h); empty: dp_allreduce and dp_param_gather
  // are plain delays (hand-made tables).
  std::vector<std::vector<CollectiveCost>> dp_collectives;  // [pp_rank]
  // How many of a rank's dp_collectives, from the front, are its gradient reduction (the rest are
  // the all-gathers of the weights): 2 with several optimizer instances (the reduce-scatter, then
  // the all-reduce across the instances) and with a mixture's experts (their own reduction after
  // the dense weights'); empty: 1 for every rank. ReductionEntries asks it; the simulator queues
  // those entries as the reduction and the rest as the all-gather.
  std::vector<int> dp_reduction_entries;  // [pp_rank]
  int ReductionEntries(int r) const {
    return r < int(dp_reduction_entries.size()) ? dp_reduction_entries[size_t(r)] : 1;
  }
  // The software profile's overlaps (core/software.h): the gradient reduction (dp_allreduce less
  // dp_param_gather) runs bucket by bucket during each chunk's last backward; the all-gather during
  // the first forward of the next iteration. Both the closed form (ExposedDataParallelTime) and the
  // simulator hide the same share.
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  // Buckets per chunk of the overlapped data-parallel communication.
  int dp_buckets = 1;
  // The software profile's overlap_compute_slowdown: what each hidden second of the data-parallel
  // communication costs the compute beside it (OverlapStretch), in the closed form and the
  // simulator alike. 0: overlap is free.
  double overlap_compute_slowdown = 0;

  // Parameter elements one GPU of each pipeline rank holds (core/shapes.h StageParameters).
  std::vector<int64_t> param_elements;  // [pp_rank]

  // The combined 1F1B (ParallelConfig::moe_a2a_overlap; empty without it): entry n is what a
  // forward and a backward that pair n mixture layers save against running one after the other
  // (costmodel/a2a_overlap.h PairedLayerSavings).
  std::vector<Seconds> a2a_pair_saving;
  // What a paired forward of chunk `f` and backward of chunk `b` save: their common mixture
  // layers' entry. The closed form and the simulator both ask it.
  Seconds PairSaving(const ChunkCost& f, const ChunkCost& b) const {
    const size_t n = size_t(f.moe_layers < b.moe_layers ? f.moe_layers : b.moe_layers);
    return n < a2a_pair_saving.size() ? a2a_pair_saving[n] : 0.0;
  }
};

// Compute slowed by s while a collective runs beside it advances H / (1 + s) of its work in H
// seconds: hiding H seconds of communication costs H s / (1 + s) of extra time.
inline double OverlapStretch(double slowdown) {
  return slowdown / (1.0 + slowdown);
}

}  // namespace ptdp::costmodel
