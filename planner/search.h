// The layout search (docs/cost_model.md, "Search"): enumerate every layout of a model on a cluster,
// reject the impossible ones with a reason (counted by reason), score the rest with the cost
// model, rank by predicted iteration time, and refine every layout that fits (or the top K) with a
// better pipeline model (the simulator) through a Refiner, on several threads.
//
// Enumerated: cp (ContextParallelSizes), t | GPUs/cp, p | GPUs/(cp t), d = GPUs/(cp t p); b | B;
// schedules (p = 1: 1F1B only; p > 1: GPipe, 1F1B, and interleaved with every v >= 2 such that p v
// | l); for GPipe and 1F1B the even split and uneven ones with the first and the last stage lighter
// by a few layers (core/parallel.h UnevenStageSplits); interleaved also with the first and/or the
// last stage one layer short where l + 1 or l + 2 divides into p v virtual stages
// (InterleavedShortEnds); recompute none/full; scatter/gather on/off where it matters (t > 1 and p
// > 1); for a mixture of experts each ExpertSplit. Rejected, by reason:
//   tp_exceeds_node           t > GPUs per node (unless allowed, or t is fixed by --fix)
//   heads_not_divisible_by_tp a % t != 0
//   layers_not_divisible      l % (p v) != 0 (even split)
//   batch_not_divisible       B % (b d) != 0
//   microbatches_fewer_than_pp   interleaved needs m >= p
//   out_of_memory             a stage's peak memory exceeds the device memory
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/hardware.h"
#include "core/model.h"
#include "core/parallel.h"
#include "costmodel/estimate.h"
#include "planner/fix.h"

namespace ptdp::planner {

// Bounds on the search's inputs, checked before any work proportional to them. The batch bound
// keeps every divisor (a micro-batch size) within int.
// The GPU count is the layout's world size, whose range core states (core/parallel.h).
inline constexpr int kMaxGpus = static_cast<int>(kMaxWorldSize);
inline constexpr int64_t kMaxGlobalBatch = int64_t(1) << 30;

// Re-scores one layout's pipeline (the next issue's simulator implements it): returns the time
// from the first forward to the last backward and the bubble within it, replacing the closed form.
using Refiner = std::function<Result<costmodel::PipelineTime>(
    const ModelSpec&, const ClusterSpec&, const ParallelConfig&, const costmodel::CostTable&)>;

struct SearchOptions {
  int64_t global_batch = 1;
  FixedLayout fix;
  bool allow_cross_node_tp = false;
  // Options beyond the paper's 2021 Megatron-LM, off by default (--fix may still set them):
  // recompute=selective is searched beside none and full; sequence parallelism beside none when
  // tp > 1; the distributed optimizer is used whenever d cp > 1, or a mixture's experts have
  // ExpertWeightReplicas > 1 (it dominates: the same bus bytes, less memory, a d-th of the step).
  bool selective_recompute = false;
  bool sequence_parallel = false;
  bool distributed_optimizer = false;
  bool grad_accumulation_fusion = false;  // dominates too: used on every layout when allowed
  // bf16 gradients (ParallelConfig::grad_reduce_bf16), a numerics choice the user makes: used on
  // every bf16 or fp8 layout when allowed (less memory, half the data-parallel bytes).
  bool grad_reduce_bf16 = false;
  // 16-bit optimizer state (ParallelConfig::optimizer_state_bf16), likewise the user's: used on
  // every bf16 or fp8 layout with the distributed optimizer.
  bool optimizer_state_bf16 = false;
  // Fully sharded data parallelism (ParallelConfig::fsdp) is searched beside the distributed
  // optimizer where d cp > 1 on a dense model, whole and hybrid-sharded inside a node
  // (optimizer_instances: core/fsdp.h NodeShardInstances) (`ptdp plan --fsdp`; off by default:
  // Megatron-Core's default is the distributed optimizer alone, and FSDP trades collectives on
  // every microbatch for memory).
  bool fsdp = false;
  // The combined 1F1B (ParallelConfig::moe_a2a_overlap) is searched beside the plain schedule
  // for a mixture of experts with ep > 1 (off by default, as in Megatron-Core: it holds one more
  // microbatch's activations; the layouts with it are replayed by the event interpreter).
  bool moe_a2a_overlap = false;
  // Megatron-Core's --moe-shared-expert-overlap (ParallelConfig::moe_shared_expert_overlap) on
  // every layout of a mixture with a shared expert but those of the combined 1F1B (`ptdp plan
  // --moe-shared-expert-overlap`; off by default, as in Megatron-Core). Not searched against its
  // absence: the cost model never prices it slower.
  bool moe_shared_expert_overlap = false;
  // Selective recomputation of Megatron-Core's other modules (ParallelConfig::recompute_modules:
  // mla_up_proj, mlp, moe_act, layernorm, moe, shared_experts, each set the model has:
  // RecomputeChoices) is searched beside the attention core's,
  // with fused attention too (`ptdp plan --recompute-modules`; off by default: Megatron-Core's
  // default is core_attn alone, and recipes fix their modules).
  bool recompute_modules = false;
  // Context parallelism (ParallelConfig::cp) is searched beside none: ContextParallelSizes.
  bool context_parallel = false;
  // Fused attention is searched beside unfused (it needs less memory but its backward recomputes
  // Q K^T, so it does not dominate in time), never with selective recomputation.
  bool fused_attention = false;
  // The precision of every candidate (`ptdp plan --precision`, or --fix precision=); unset: the
  // cluster profile's default. Its element width must be the GEMM table's.
  std::optional<Precision> precision;
  int keep = 10;  // candidates kept in the result, best first
  // How many of the best by the closed form the refiner re-scores; negative: every layout that
  // fits, so the ranking (and the best interleaved and zero-bubble layouts) is the refiner's.
  int refine_top = -1;
  // Empty (and no make_refiner): closed form only. Called from o.threads threads at once.
  Refiner refiner;
  // One refiner per refining thread, for refiners with state (sim::MakeReplayRefiner caches a
  // pipeline shape's schedule); used instead of `refiner` when set.
  std::function<Refiner()> make_refiner;
  // Threads that refine (at least 1). The result is the same for any count.
  int threads = 1;
  // Called now and then with (layouts done, layouts total, seconds so far).
  std::function<void(int64_t, int64_t, double)> progress;
};

struct Candidate {
  ParallelConfig layout;
  costmodel::Prediction prediction;
  bool refined = false;  // prediction's pipeline time comes from the refiner (the simulator)
  // The closed-form numbers, kept beside the refined ones so both can be shown.
  Seconds closed_form_iteration_s = 0;
  double closed_form_bubble_fraction = 0;
};

struct SearchResult {
  std::vector<Candidate> top;  // best first
  // The best scored layout of the interleaved schedule and of the zero-bubble ones (ZB-H1, ZB-H2),
  // every stage evaluated and refined as the top layouts are: the report compares them.
  std::optional<Candidate> best_interleaved, best_zero_bubble;
  int64_t zero_bubble_evaluated = 0;           // zero-bubble layouts that reached the cost model
  int64_t zero_bubble_out_of_memory = 0;       // of which out of memory
  int64_t considered = 0;                      // layouts enumerated
  int64_t feasible = 0;                        // scored
  std::map<std::string, int64_t> rejected;     // reason -> count
  std::map<std::string, std::string> example;  // reason -> one message
  double seconds = 0;
  double EvaluationsPerSecond() const { return seconds > 0 ? considered / seconds : 0; }
};

// The shortest s / cp the search gives a context-parallel rank: a choice of scope, not a law
// (--fix cp= plans any cp), which keeps cp out of the searches of short sequences (s = 2048:
// none) and tries cp = 2 at s = 8192 and up to 32 at 128K, the sizes Megatron-Core's published
// runs use there (docs/validation-h100.md).
inline constexpr int64_t kMinContextShardTokens = 4096;
// The context-parallel sizes Search tries: --fix's cp alone (none when it does not divide the
// GPU count); else 1, and with
// options.context_parallel every power of two cp >= 2 dividing the GPU count with 2 cp | s and
// s / cp >= kMinContextShardTokens.
std::vector<int> ContextParallelSizes(const ModelSpec& m, int gpus, const SearchOptions& options);

// A mixture of experts' split of a stage (ParallelConfig::ep, etp; etp 0 = tp).
struct ExpertSplit {
  int ep = 1;
  int etp = 0;
};
// The splits Search tries on a stage of tp cp dp ranks: for a dense model one, (--fix's ep or 1,
// 0); for a mixture of experts every ep dividing the experts, with etp = tp (stored 0) and, where
// tp > 1, etp = 1, such that ep etp divides tp cp dp; --fix's etp in place of those, and --fix's ep
// in place of the ep (as fixed: a value that cannot be is refused by Validate, which says why).
std::vector<ExpertSplit> ExpertSplits(const ModelSpec& m, int tp, int cp, int dp,
                                      const FixedLayout& fix);

// A schedule, its chunks per rank and its stage split (layers of the first and the last stage;
// 0, 0: the even split).
struct PipelineShape {
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int vp = 1;
  int first = 0;
  int last = 0;
  std::vector<int> stages;  // --fix stage_layers: per-(virtual-)stage counts; empty otherwise
};

// What the search enumerates for p stages: p = 1, 1F1B (and GPipe when fixed); p > 1, GPipe and
// 1F1B with the even split and core's UnevenStageSplits (only the --fix split when one is fixed;
// with --fix stage_layers only the vp = 1 schedules, with those counts),
// ZB-H1 and ZB-H2 with the even (or fixed) split, and interleaved with every v >= 2 such that
// p v | l, and with core's InterleavedShortEnds (or the fixed split).
std::vector<PipelineShape> PipelineShapes(const ModelSpec& m, int p, const FixedLayout& fx);

// With multi-token prediction the last virtual stage also runs the depths: interleaved splits on
// p ranks of v chunks whose last virtual stage holds 2 to mtp_layers + 2 layers fewer than each
// stage between, as per-virtual-stage counts (none without the depths; splits.cc).
std::vector<std::vector<int>> LightLastStageSplits(const ModelSpec& m, int p, int v);

// Fails (kDoesNotFit / kInvalidArgument) when no layout survives, naming the commonest reason with
// an example.
// The command-line counts, checked before a cluster is built from them: --gpus and --nodes in
// 0..kMaxGpus (0: not given), --global-batch in 1..kMaxGlobalBatch.
Status CheckSearchCounts(int gpus, int nodes, int64_t global_batch);

Result<SearchResult> Search(const ModelSpec& m, const ClusterSpec& cluster,
                            const SearchOptions& options);

// Empty when `cluster`'s GEMM table was measured at `precision`'s width; otherwise a one-line
// caveat the tools print: a table measured in 16 bits says nothing of fp32 throughput and the
// reverse, so the times are the table's, while memory and messages follow `precision`. (The CPU
// backend computes bf16/fp16 in fp32 and rounds, so its fp32 table is what it runs at.)
std::string PrecisionCaveat(const ClusterSpec& cluster, Precision precision);
// The numerics Search gives every candidate (the user's choices, never searched; planner/
// numerics.cc): the precision (--fix's, else options.precision, else the profile's), and the
// 16-bit gradient buffer and optimizer state where fixed on, or asked for in the options and
// allowed at that precision. Errors name the option that the precision refuses.
struct SearchNumerics {
  Precision precision = Precision::kFp32;
  bool grad_reduce_bf16 = false;
  bool optimizer_state_bf16 = false;  // where the distributed optimizer is on (Compose)
  // SearchOptions::moe_shared_expert_overlap where the model has a shared expert (Search sets it).
  bool shared_expert_overlap = false;
};
Result<SearchNumerics> ResolveSearchNumerics(const ClusterSpec& cluster,
                                             const SearchOptions& options);

// Scores one layout (used by Search and by callers evaluating a given layout). Returns the
// rejection as an error (out of memory: kDoesNotFit naming the stage and bytes).
Result<Candidate> Evaluate(const ModelSpec& m, const ClusterSpec& cluster, const ParallelConfig& c,
                           const std::vector<int64_t>* param_elements = nullptr,
                           bool all_stages = true);

}  // namespace ptdp::planner
