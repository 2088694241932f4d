// From (model, cluster, layout) to a CostTable and to a Prediction of one training iteration.
//
// Iteration time (docs/cost_model.md, "Iteration"):
//   per microbatch on pipeline rank r:  T_r = sum over its chunks of (forward + backward +
//     recompute) + 2 v x p2p   (one transfer in the forward phase and one in the backward phase per
//     chunk; Megatron-LM's p2p of 2021 is not overlapped with compute)
//   pipeline (a PipelineModel; ClosedFormPipeline: the paper's bubble):
//     ideal = m max_r T_r,  bubble = (p - 1)/(v m) x ideal  (GPipe and 1F1B: v = 1); ZB-H1 and
//     ZB-H2: (p - 1)(T - 2 T_W) and (p - 1) max(0, T - 3 T_W) of the slowest stage (Qi et al.)
//   after the flush: max over r of (data-parallel all-reduce + embedding all-reduce + optimizer)
//     (not overlapped with the backward, as in the paper's Megatron-LM; a software profile that
//     overlaps it leaves only the exposed part, ExposedDataParallelTime)
// The software profile (ClusterSpec::software, core/software.h) also hides its share of each
// layer's tensor-parallel collectives behind the layer's GEMMs (sequence parallelism only), in the
// CostTable itself, so the closed form and the simulator see the same chunk times.
#pragma once

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/hardware.h"
#include "core/ledger.h"
#include "core/model.h"
#include "core/parallel.h"
#include "costmodel/a2a_overlap.h"
#include "costmodel/cost_table.h"
#include "costmodel/layer_cost.h"

namespace ptdp::costmodel {

// Parameter elements held by one GPU of each pipeline rank (core/shapes.h StageParameterElements),
// what BuildCostTable and Predict read the ledger's parameter bytes from; callers may cache it.
std::vector<int64_t> StageParameterCounts(const ModelSpec& m, const ParallelConfig& c);

// Builds the simulator's CostTable. `param_elements` (StageParameterCounts) may be passed in by a
// caller that caches it; when null it is computed; so are `prices` (StashPricesOf(m, c)), which a
// caller scoring the layout with Predict too can compute once for both. REQUIRES:
// layout.Validate(model) is ok and layout.WorldSize() == cluster.Gpus().
CostTable BuildCostTable(const ModelSpec& m, const ClusterSpec& cluster, const ParallelConfig& c,
                         const std::vector<int64_t>* param_elements = nullptr,
                         const StashPrices* prices = nullptr, struct PieceCostMemo* memo = nullptr);

// A layer's, the embedding's and the head's prices, which depend on a layout only through the
// key below (its tp, mbs, precision, sequence parallelism, fused attention, selective
// recomputation, tensor-parallel collectives' times, cp and whether the context-parallel ring
// crosses nodes, ep, etp, the experts' all-to-all and all-gather times and whether the shared
// expert overlaps them): the search prices thousands of layouts on a few hundred keys.
// REQUIRES: one memo serves one model on one cluster.
struct PieceCostMemo {
  using Key = std::tuple<int, int, Precision, bool, bool, int, Seconds, Seconds, Seconds, Seconds,
                         int, bool, int, int, Seconds, Seconds, bool>;
  struct Pieces {
    PieceCost layer, embed, head;
    // A mixture's leading dense layer (ModelSpec::moe_dense_layers; zero without them).
    PieceCost dense_layer;
    // One multi-token prediction depth (ModelSpec::mtp_layers; zero without them): all of it,
    // and its transformer layer alone (what full recomputation redoes).
    PieceCost mtp, mtp_layer;
    // What selective recomputation redoes per layer (costmodel/recompute_cost.h): a layer of the
    // model's own kind, and a mixture's leading dense layer.
    ComputeBreakdown core, dense_core;
    // A mixture layer in the pieces the combined 1F1B interleaves (costmodel/a2a_overlap.h).
    MoeLayerPhases moe_phases;
    // What a windowed layer's fused kernel does not run of a full one's, forward and backward
    // (ModelSpec::window_size; zero without windows): 1 - WindowPairShare of its GEMM time.
    Seconds window_cut_forward = 0, window_cut_backward = 0;
  };
  std::map<Key, Pieces> pieces;
};

// Per-microbatch time of each pipeline rank, p2p included (T_r above).
std::vector<Seconds> StageMicrobatchTimes(const CostTable& t);

// Time from the first forward to the last backward of an iteration. The simulator replaces the
// closed form with a replay of the Program.
struct PipelineTime {
  Seconds total = 0;  // ideal + bubble
  Seconds bubble = 0;
};
class PipelineModel {
 public:
  virtual ~PipelineModel() = default;
  virtual PipelineTime Time(const CostTable& t, const ParallelConfig& c) const = 0;
};
class ClosedFormPipeline : public PipelineModel {
 public:
  PipelineTime Time(const CostTable& t, const ParallelConfig& c) const override;
};
// ClosedFormPipeline's bubble for the schedule in symbols, as a share of the ideal time m T
// (T: the slowest stage's microbatch time): Narayanan et al.'s (p-1)/(v m) for GPipe, 1F1B and
// interleaved, Qi et al.'s forms for the zero-bubble schedules, where (p-1)/(v m) does not hold.
const char* ClosedFormBubbleName(ScheduleKind k);

// Most buckets per chunk the software profile's bucket size makes (CostTable::dp_buckets).
inline constexpr int kMaxDataParallelBuckets = 4096;

// Exposed time of `comm` split into `buckets` equal buckets run one after another, bucket i ready
// at (i + 1)/buckets of `window` (the compute it overlaps with): the last bucket always shows, and
// whatever of the rest the window cannot hold: comm/k + max(0, comm - window)(k - 1)/k.
Seconds BucketedExposedTime(Seconds comm, Seconds window, int buckets);
// The data-parallel time rank r pays after its flush (gradient reduction and parameter all-gather),
// what remains of t.dp_allreduce[r] once the overlaps of t hide their share: the reduction behind
// the rank's last backwards (split schedules: their W passes), the all-gather behind its first
// forward, each in t.dp_buckets x vp buckets, plus what the hidden part cost the compute beside it
// (t.overlap_compute_slowdown, OverlapStretch). Without overlap: t.dp_allreduce[r] exactly.
Seconds ExposedDataParallelTime(const CostTable& t, const ParallelConfig& c, int r);

struct Breakdown {
  Seconds compute = 0;  // GEMM + memory-bound (+ recompute) of the slowest stage, m microbatches
  Seconds tp_comm = 0;  // tensor-parallel collectives of the slowest stage
  Seconds pp_comm = 0;  // pipeline p2p of the slowest stage
  Seconds bubble = 0;
  Seconds dp_comm = 0;  // exposed data-parallel + embedding all-reduce (slowest rank)
  Seconds optimizer = 0;
};

// One GPU of a pipeline rank: the ledger's MemoryOf (core/ledger.h) plus the profile's workspace.
struct StageMemory {
  int pp_rank = 0;
  Bytes weights = 0;
  Bytes grads = 0;
  Bytes optimizer = 0;
  Bytes activations = 0;
  Bytes transient = 0;  // the runtime's transient buffers at their peak (core PeakWorkspaceBytes)
  Bytes workspace = 0;  // the profile's: library workspaces and handles, outside the allocator
  Bytes Total() const { return weights + grads + optimizer + activations + transient + workspace; }
};

struct Prediction {
  Seconds iteration_s = 0;
  double tflops_per_gpu = 0;        // eq. (3): the recomputed forward counted when it runs
  double model_tflops_per_gpu = 0;  // never counting recomputation (MFU)
  double percent_of_peak = 0;       // tflops_per_gpu / profile peak
  // Model FLOPs utilisation, percent: model FLOPs per iteration (no recomputation) / (iteration
  // time x GPUs x the profile's peak_tflops); what users compare across stacks.
  double model_flops_utilization = 0;
  double bubble_fraction = 0;  // bubble / iteration
  double tokens_per_s = 0;
  Bytes peak_memory = 0;  // max over stages
  int peak_memory_stage = 0;
  Breakdown breakdown;
  std::vector<StageMemory> memory;  // per pipeline rank (see all_stages)
  // Days to train `tokens` tokens at this speed.
  double DaysToTrain(double tokens) const { return tokens / tokens_per_s / 86400.0; }
};

// Scores a layout. Element sizes and bytes per parameter follow c.precision (the layout's, not the
// profile's default). `pipeline` defaults to the closed form. `all_stages`: list the memory of
// every pipeline rank in Prediction::memory (otherwise only the first and the last, where the peak
// is). `prices`: StashPricesOf(m, c), computed when null.
Prediction Predict(const ModelSpec& m, const ClusterSpec& cluster, const ParallelConfig& c,
                   const CostTable& table, const PipelineModel* pipeline = nullptr,
                   bool all_stages = true, const StashPrices* prices = nullptr);
// Fills throughput fields from an iteration time (used after a refined iteration time too).
void SetThroughput(const ModelSpec& m, const ClusterSpec& cluster, const ParallelConfig& c,
                   Prediction* p);

}  // namespace ptdp::costmodel
