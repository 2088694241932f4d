// ParallelConfig: one layout of a model on n = tp * pp * dp GPUs, with its microbatching,
// pipeline schedule and memory options.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "core/model.h"
#include "core/precision.h"
#include "core/status.h"

namespace ptdp {

enum class ScheduleKind {
  kGPipe,        // all forwards, then all backwards (Huang et al. 2019)
  k1F1B,         // PipeDream-Flush: warm-up, one-forward-one-backward, cool-down
  kInterleaved,  // Megatron-LM's interleaved 1F1B with vp model chunks per rank
  // Zero-bubble schedules (Qi et al., ICLR 2024), with the backward split into its input- and
  // weight-gradient halves (core/program.h); one chunk per rank (vp = 1). The runtime executes
  // the halves (runtime/model/gpt_layers.h DeferredWeightGrad); the ledger prices what the
  // split keeps (core/shapes.h LayerWeightGradStash).
  kZbH1,  // ZB-H1: 1F1B's memory, W passes delayed to fill the cool-down
  kZbH2,  // ZB-H2: up to 2p - 1 microbatches in flight, no bubble when F = B = W
  // ZB-V (Qi et al., "Pipeline Parallelism with Controllable Memory", NeurIPS 2024): two chunks
  // per rank placed in a V (StageOfChunk), the backward split; 1F1B's activation memory and no
  // bubble when F = B = W.
  kZbV,
};
// A schedule whose Program splits the backward (kBackwardInput / kBackwardWeight).
inline bool SplitsBackward(ScheduleKind k) {
  return k == ScheduleKind::kZbH1 || k == ScheduleKind::kZbH2 || k == ScheduleKind::kZbV;
}
// A schedule whose chunks sit in a V: chunk 0 of rank r on stage r, chunk 1 on stage 2p - 1 - r.
inline bool VShaped(ScheduleKind k) {
  return k == ScheduleKind::kZbV;
}

// The one placement of model chunks on pipeline stages, which the ledger, the cost table, the
// schedules, the simulator, the runtime and the checkpoints all follow. Stage k of the pp * vp
// virtual stages holds the k-th slice of the layers; stage 0 the embedding, the last the head.
//   V-shaped (ZB-V, vp = 2):  chunk 0 of rank r -> stage r, chunk 1 -> stage 2 pp - 1 - r; the
//                            forward turns around on rank pp - 1 without a message and the loss
//                            is computed on rank 0.
//   otherwise:               stage chunk * pp + rank (Megatron-LM's interleaved assignment).
inline int StageOfChunk(ScheduleKind k, int pp, int pp_rank, int chunk) {
  if (VShaped(k)) return chunk == 0 ? pp_rank : 2 * pp - 1 - pp_rank;
  return chunk * pp + pp_rank;
}
struct StageHolder {
  int pp_rank = 0;
  int chunk = 0;
};
// The inverse: which (rank, chunk) holds virtual stage `stage` (0 <= stage < pp vp).
inline StageHolder HolderOfStage(ScheduleKind k, int pp, int stage) {
  if (VShaped(k)) return stage < pp ? StageHolder{stage, 0} : StageHolder{2 * pp - 1 - stage, 1};
  return {stage % pp, stage / pp};
}
enum class Recompute {
  kNone,       // keep every activation the backward needs
  kFull,       // keep only each layer's input; redo the layer's forward in the backward
  kSelective,  // Korthikanti et al. 2022: drop the attention core's s^2 activations (softmax,
               // dropout mask and output) and redo the core attention in the backward
};

// "gpipe" | "1f1b" | "interleaved" | "zb-h1" | "zb-h2" | "zb-v"
const char* ScheduleName(ScheduleKind k);
Result<ScheduleKind> ParseSchedule(const std::string& s);
const char* RecomputeName(Recompute r);  // "none" | "full" | "selective"
Result<Recompute> ParseRecompute(const std::string& s);

// What selective recomputation redoes (ParallelConfig::recompute_modules; Megatron-Core's
// --recompute-modules, transformer_config.py): bits of this enum, 0 for Megatron-Core's default,
// core_attn alone. core_attn drops the attention core's s^2 tensors (Korthikanti et al. 2022);
// mla_up_proj multi-latent attention's up projections' outputs with their rotary embedding (the
// q, k and v attention reads); mlp a dense layer's MLP inside (its input kept, as a checkpoint);
// moe_act the experts' SwiGLU output (fc2's input); layernorm a mixture layer's pre-MLP norm
// output (the router's input: Transformer Engine's layers fuse the other norms into the Linear
// after them, which keeps their output as its input, so Megatron-Core has nothing else to drop);
// moe a mixture layer's whole MoE block from its input (router, dispatch, experts, combine and
// shared expert: megatron/core/transformer/moe/moe_layer.py checkpoints the block's forward);
// shared_experts a mixture layer's shared expert from its input. Each is redone in the backward.
enum RecomputeModule : uint8_t {
  kRecomputeCoreAttn = 1,
  kRecomputeMlaUpProj = 2,
  kRecomputeMlp = 4,
  kRecomputeMoeAct = 8,
  kRecomputeLayernorm = 16,
  kRecomputeMoe = 32,
  kRecomputeSharedExperts = 64,
};
// Every bit above.
inline constexpr uint8_t kRecomputeAllModules = 127;
// "core_attn+mla_up_proj" (Megatron-Core's names, joined by '+'; "" for 0).
std::string RecomputeModulesText(uint8_t modules);
// The inverse; names the unknown module. `field` prefixes the error.
Result<uint8_t> ParseRecomputeModules(const std::string& s, const std::string& field);

// How a mixture of experts' tokens reach their experts (ParallelConfig::moe_dispatcher).
enum class MoeDispatcher {
  kAllToAll,  // Megatron-Core's alltoall dispatcher: NCCL all-to-alls of every token copy
  kDeepEp,    // its flex dispatcher with the DeepEP backend: a token once per node, then NVLink
};
const char* MoeDispatcherName(MoeDispatcher d);  // "alltoall" | "deepep"
Result<MoeDispatcher> ParseMoeDispatcher(const std::string& s);

// Ranges of the layout fields, checked by ParallelConfig::Validate: tp [1, 4096], pp [1, 10000],
// dp [1, 1048576], cp [1, 1024], ep [1, 4096], etp [0, 4096], mbs [1, 65536], vp [1, 10000],
// global_batch [1, 2^40], and tp*cp*pp*dp at most kMaxWorldSize GPUs. Products are formed in
// checked int64, never in int.
inline constexpr int64_t kMaxTp = 4096;
inline constexpr int64_t kMaxPp = 10000;
inline constexpr int64_t kMaxDp = int64_t(1) << 20;
inline constexpr int64_t kMaxCp = 1024;
inline constexpr int64_t kMaxEp = 4096;
inline constexpr int64_t kMaxMbs = 65536;
inline constexpr int64_t kMaxVp = 10000;
inline constexpr int64_t kMaxGlobalBatch = int64_t(1) << 40;
inline constexpr int64_t kMaxWorldSize = int64_t(1) << 20;  // 1048576 GPUs

struct ParallelConfig {
  int tp = 1;  // tensor-parallel size t
  int pp = 1;  // pipeline-parallel size p
  int dp = 1;  // data-parallel size d
  // Context-parallel size (Megatron-Core's --context-parallel-size, Transformer Engine's ring
  // attention): each sequence is split over cp ranks, each holding s / cp tokens (two chunks of
  // s / 2cp, the i-th and the (2cp-1-i)-th, so causal attention's work is even); a layer's
  // attention passes the keys and values around the ring (cp - 1 steps, each beside the attention
  // of the block it has), every other op and every activation is on s / cp tokens. The cp ranks
  // hold the same weights, so the gradients are reduced, and the distributed optimizer shards,
  // over d * cp ranks (WeightReplicas). Ranks in Megatron-Core's order tp-cp-dp-pp. Needs
  // fused_attention (TE runs the ring only in its fused kernels) and 2 cp | s.
  int cp = 1;
  // Expert parallelism (Megatron-Core's --expert-model-parallel-size and
  // --expert-tensor-parallel-size; a mixture-of-experts model only, docs/moe.md): the E experts of
  // a layer are split over ep ranks, E / ep each, and each expert's matrices over etp ranks (0: as
  // the tensor group, tp, Megatron-Core's default). The expert layers fold their own grid over the
  // tp cp dp ranks of a pipeline stage (etp-ep-edp order), so ep etp must divide tp cp dp, and an
  // expert's weights are held by ExpertWeightReplicas() = tp cp dp / (ep etp) ranks, over which
  // their gradients are reduced and the distributed optimizer shards them. Tokens reach their
  // experts by an all-to-all over the ep group (Megatron-Core's alltoall dispatcher).
  int ep = 1;
  int etp = 0;
  int mbs = 1;  // microbatch size b (sequences)
  int vp = 1;   // model chunks per pipeline rank v (> 1 only when interleaved)
  ScheduleKind schedule = ScheduleKind::k1F1B;
  Recompute recompute = Recompute::kNone;
  // With recompute == kSelective: the modules redone (RecomputeModule bits; 0: core_attn, as
  // Megatron-Core's default). Validate refuses them without selective recomputation.
  uint8_t recompute_modules = 0;
  // Whether this layout's selective recomputation redoes `module`.
  bool Recomputes(RecomputeModule module) const {
    if (recompute != Recompute::kSelective) return false;
    return recompute_modules == 0 ? module == kRecomputeCoreAttn
                                  : (recompute_modules & module) != 0;
  }
  bool scatter_gather = true;  // the paper's scatter/gather of pipeline messages across tp ranks
  // Megatron-LM's sequence parallelism (Korthikanti et al. 2022): LayerNorm, dropout and residual
  // work on s/t tokens per tensor rank; each tensor-parallel all-reduce becomes a reduce-scatter
  // and an all-gather. Needs tp > 1. Pipeline messages are then already split across the tensor
  // ranks.
  bool sequence_parallel = false;
  // Megatron-LM's distributed optimizer (ZeRO stage 1): the fp32 master weights and Adam moments
  // are sharded over the data-parallel group; gradients are reduce-scattered and the updated
  // weights all-gathered (the same bus bytes as the all-reduce it replaces).
  bool distributed_optimizer = false;
  // Fully sharded data parallelism (ZeRO stage 3; Megatron-Core's --use-megatron-fsdp with
  // --data-parallel-sharding-strategy optim_grads_params, PyTorch's FSDP2 as torchtitan runs it):
  // the weights and gradients are sharded as the distributed optimizer's state is; each layer's
  // weights are all-gathered before its forward and again before its backward, and its gradients
  // reduce-scattered after its backward, on every microbatch, beside the next layer's compute
  // (core/fsdp.h has the rules and the memory, costmodel/fsdp_cost.h the time). Needs
  // distributed_optimizer.
  bool fsdp = false;
  // Megatron-Core's --num-distributed-optimizer-instances: the d cp ranks holding a weight split
  // into this many instances of consecutive data ranks, and the distributed optimizer (and FSDP)
  // shards over the ranks of one instance (OptimizerShardRanks) and keeps one copy per instance.
  // The gradients are reduce-scattered within an instance and each shard all-reduced across the
  // instances; the updated weights all-gathered within one. With fsdp this is hybrid sharding
  // (HSDP: Megatron-FSDP's outer data-parallel group, torchtitan's dp_replicate). 1: one instance,
  // the whole group. Needs distributed_optimizer and a dense model; instances divide d cp.
  int optimizer_instances = 1;
  // Megatron-LM's --gradient-accumulation-fusion: each weight-gradient GEMM accumulates into the
  // gradient buffer, so the profile's separate per-microbatch add (grad_accumulate_bytes_per_param,
  // what the paper's 2021 code ran) is not paid.
  bool grad_accumulation_fusion = false;
  // Megatron-LM's --grad-reduce-in-bf16 (NeMo's optim.grad_sync_dtype=bf16): the gradient buffer
  // holds bf16, not fp32 main gradients, so it takes 2 bytes per parameter in place of 4 and the
  // data-parallel reduction moves half the bytes; the optimizer casts its shard to fp32 before
  // the step (core/ledger.h BytesPerParameter; costmodel OptimizerBytesPerParam). A numerics
  // choice (bf16 accumulation over microbatches and ranks), so the planner never picks it alone:
  // `ptdp plan --grad-reduce-in-bf16` or --fix. Needs precision bf16 or fp8.
  bool grad_reduce_bf16 = false;
  // The precisions grad_reduce_bf16 is for: bf16 and fp8 (16-bit parameters with fp32 main
  // gradients to replace). Validate, the search and --fix ask this one rule.
  static bool Bf16GradsAllowed(Precision p) {
    return p == Precision::kBf16 || p == Precision::kFp8;
  }
  // The optimizer's state in 16 bits: Adam's two moments in bf16, and the fp32 master weights
  // kept as the 16 bits the bf16 weights lack (6 bytes per parameter, not 12). Megatron-Core's
  // --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 (Transformer
  // Engine's FusedAdam, store_param_remainders on by default); NeMo's distributed_fused_adam with
  // dtype bf16 (Apex: the master copy and both moments in bf16) holds the same bytes. A numerics
  // choice like grad_reduce_bf16: never searched alone. Needs bf16 or fp8 and the distributed
  // optimizer, as Megatron-Core asserts.
  bool optimizer_state_bf16 = false;
  // A fused (FlashAttention-class) attention kernel, Megatron-LM's --use-flash-attn: the attention
  // core stores no s^2 tensor, only the fp32 log-sum-exp of each score row, and its backward
  // recomputes the probabilities (and regenerates the dropout mask from the counter generator).
  // Selective recomputation of core_attn then drops only the log-sum-exp and redoes the kernel's
  // forward (Megatron-Core checkpoints the core whatever its backend): allowed (not with cp > 1),
  // never searched (it costs time for a few bytes), taken where --fix asks for both.
  bool fused_attention = false;
  // Megatron-Core's --overlap-moe-expert-parallel-comm with --delay-wgrad-compute (Megatron-
  // Bridge's moe_a2a_overlap; a mixture of experts with ep > 1): in the steady state the forward
  // of one microbatch and the backward of another run as one combined step, layer by layer, the
  // all-to-alls of each on a second stream beside the other's compute (combined 1F1B,
  // megatron/core/pipeline_parallel/combined_1f1b.py). One more warm-up forward per rank makes the
  // pair independent. Needs pp = 1 (1F1B) or the interleaved schedule, no full recomputation, at
  // most one multi-token prediction depth and 16-bit compute, as Megatron-Core asserts. The
  // Program marks each combined forward (Instr::paired); docs/moe.md has the cost.
  bool moe_a2a_overlap = false;
  // The token dispatcher (a mixture of experts only): Megatron-Core's alltoall, or its flex
  // dispatcher on DeepEP (--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend
  // deepep), whose inter-node kernels send a token once to each node holding one of its experts
  // and forward it over NVLink there (deepseek-ai/DeepEP's README: "asymmetric-domain bandwidth
  // forwarding"). costmodel/moe_cost.h prices the two.
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  // Megatron-Core's --moe-shared-expert-overlap (a mixture with a shared expert): the shared
  // expert runs on a second stream beside the token dispatcher, its fc1 and activation beside the
  // dispatch's all-to-all, its fc2 and tensor-parallel reduce-scatter beside the combine's, and
  // the backward alike (megatron/core/transformer/moe/shared_experts.py and token_dispatcher.py at
  // d98e8a64: the backward ordered by the autograd sequence numbers it sets). Not with
  // moe_a2a_overlap, as Megatron-Core asserts. costmodel/moe_cost.h prices it.
  bool moe_shared_expert_overlap = false;
  // Uneven pipeline stages: the layers of the first and of the last pipeline rank, 0 for the
  // even share. Lighter first and last stages offset the embedding and the output layer they also
  // hold. The placement itself is core/shapes.h's ChunkLayers; two of Megatron-LM's forms:
  //   vp = 1 (--decoder-first/last-pipeline-num-layers): any counts; the ranks between share the
  //     other layers evenly.
  //   vp > 1, interleaved (--account-for-embedding/loss-in-pipeline-split): the embedding (first
  //     set) and the loss (last set) count as one layer each, so with q = (l + e + o) / pp the
  //     layers per rank between, first = q - 1 and last = q - 1: virtual stage 0 (rank 0, chunk
  //     0) and the last (rank pp-1, chunk vp-1) hold one layer fewer than the others' q / vp.
  //     Every virtual stage keeps at least one layer (q / vp >= 2). Not ZB-V's V.
  int first_stage_layers = 0;
  int last_stage_layers = 0;
  // Any split (Megatron-Core's --pipeline-model-parallel-layout): the layers of each virtual
  // stage in order, pp vp of them (with vp = 1 each pipeline rank's, rank 0 first; with vp > 1,
  // interleaved, virtual stage k = chunk pp + rank, and the first and the last may hold none:
  // the embedding alone, the head alone); empty for none. Exclusive with first/last_stage_layers,
  // and never normalised into them: a split they could express stays in this form (ToString
  // tells them apart). The re-planner (tools/train_replan.cc) gives a slow middle rank fewer
  // layers with it.
  std::vector<int> stage_layers;
  int64_t global_batch = 1;  // B: sequences per iteration
  // How the run stores and computes numbers (core/precision.h); the plan records it and the
  // runtime follows it. The planner's default is the cluster profile's.
  Precision precision = Precision::kFp32;

  int WorldSize() const { return tp * cp * pp * dp; }
  // Ranks holding the same weights: the data-parallel gradient reduction's group and the
  // distributed optimizer's shard count (the context-parallel ranks of each replica included).
  int WeightReplicas() const { return dp * cp; }
  // The ranks the distributed optimizer (and FSDP) shards over: one instance's
  // (optimizer_instances), all the weight's replicas by default.
  int OptimizerShardRanks() const {
    return optimizer_instances > 0 ? WeightReplicas() / optimizer_instances : WeightReplicas();
  }
  // The expert tensor-parallel size (etp, or tp when 0) and the ranks holding the same expert
  // weights (1 when ep etp does not divide tp cp dp, which Validate refuses).
  int ExpertTp() const { return etp > 0 ? etp : tp; }
  int ExpertWeightReplicas() const {
    const int64_t stage = int64_t(tp) * cp * dp, split = int64_t(ep) * ExpertTp();
    return split > 0 && stage % split == 0 ? int(stage / split) : 1;
  }
  // m = B / (b d): microbatches each pipeline runs per iteration.
  int64_t Microbatches() const { return global_batch / (int64_t(mbs) * dp); }
  int VirtualStages() const { return pp * vp; }
  bool Uneven() const {
    return first_stage_layers > 0 || last_stage_layers > 0 || !stage_layers.empty();
  }

  // Checks the layout against the model: positive sizes, cp (2 cp | s, fused_attention, with
  // sequence parallelism t | s / cp), heads % tp, kv_heads % tp, layers % (pp
  // vp) (uneven stages: pp >= 2, at least one layer per stage and the middle layers an equal
  // share of the middle stages; vp > 1 the form above; stage_layers: ValidateStageLayers), B % (b
  // d), the schedule's needs (interleaved: vp >= 2, pp >= 2 and m >= pp; others vp == 1),
  // fused_attention without selective recomputation, grad_reduce_bf16 only in bf16 or fp8,
  // optimizer_state_bf16 only there and with distributed_optimizer, fsdp's
  // (core/fsdp.h ValidateFsdp). The message names the field and the reason.
  Status Validate(const ModelSpec& m) const;
  // The layer-split part of Validate: layers % (pp vp), or the uneven stages' rules.
  Status ValidateStageSplit(const ModelSpec& m) const;
  // Validate's rules for cp > 1 (above); Ok when cp == 1.
  Status ValidateContextParallel(const ModelSpec& m) const;
  // Validate's rules for ep and etp: a mixture-of-experts model for ep > 1 or etp set; ep divides
  // the experts, etp the expert inner size, ep etp the tp cp dp ranks of a stage; sequence
  // parallelism where tp > 1 (Megatron-Core refuses a mixture of experts with tensor parallelism
  // without it).
  Status ValidateExperts(const ModelSpec& m) const;
  // ValidateExperts' rules for moe_a2a_overlap (its comment above), past ep > 1.
  Status ValidateA2aOverlap(const ModelSpec& m) const;
  // ValidateStageSplit's stage_layers form: pp >= 2, pp vp counts of at least one layer each
  // (with vp > 1, interleaved, the first and the last may be 0) that sum to the model's layers,
  // first/last_stage_layers unset.
  Status ValidateStageLayers(const ModelSpec& m) const;
  // ValidateStageSplit's vp > 1 form; `field` names the end that is set.
  Status ValidateInterleavedEnds(const ModelSpec& m, const std::string& field) const;
  std::string ToString() const;  // "tp=8,pp=64,dp=6,mbs=1,vp=1,schedule=1f1b,..."
};

// The rules for recompute_modules (core/recompute.cc), which Validate applies: only with selective
// recomputation; core_attn not with fused_attention; mla_up_proj with multi-latent attention;
// moe_act and moe with a mixture of experts; shared_experts with a shared expert; Megatron-Core's
// refusals of moe with the combined 1F1B and of shared_experts beside the dispatcher.
Status ValidateRecomputeModules(const ParallelConfig& c, const ModelSpec& m);

// The contract's "layout" object: {tp, pp, dp, mbs, vp, schedule, recompute, scatter_gather}, plus
// cp and ep (written only when > 1, optional when read, 1 by default), etp (written only when set
// and not tp, optional, 0 = tp),
// sequence_parallel, distributed_optimizer, grad_accumulation_fusion and fused_attention (optional
// when read, false by default), first_stage_layers and last_stage_layers (optional, 0 by default)
// and precision (optional when read, `base`'s by default); stage_layers (a list of integers) and
// grad_reduce_bf16 (true), optimizer_state_bf16 (true), fsdp (true), optimizer_instances (> 1),
// moe_a2a_overlap (true), moe_dispatcher ("deepep") and moe_shared_expert_overlap (true), each
// written only when set and optional when read.
OrderedJson LayoutToJson(const ParallelConfig& c);

// Megatron-LM's --account-for-embedding/loss-in-pipeline-split on pp ranks of vp chunks (the vp >
// 1 form above), the embedding counted as a layer when `embedding`, the loss when `loss`: the
// layers of a virtual stage between the two ends (each set end holds one fewer), or an error
// naming `field` when l + e + o does not divide into pp vp virtual stages or a short end would
// hold none. The one statement of the rule: Validate, InterleavedShortEnds, the placement
// (core/shapes.h ChunkLayers) and --emit megatron ask it.
Result<int> ShortEndsVirtualStageLayers(const ModelSpec& m, int pp, int vp, bool embedding,
                                        bool loss, const std::string& field);
// The short-end splits the rule above allows on pp ranks of vp chunks, as (first_stage_layers,
// last_stage_layers): the embedding, the loss or both counted as a layer, where
// ShortEndsVirtualStageLayers accepts it; a set end holds q - 1 layers, an end not set is 0. What
// the planner's search and `ptdp train --adapt`'s re-planner enumerate.
std::vector<std::pair<int, int>> InterleavedShortEnds(const ModelSpec& m, int pp, int vp);
// The uneven vp = 1 splits worth trying on pp > 1 ranks, as (first_stage_layers,
// last_stage_layers): the first and the last stage lighter than the q layers of each stage between
// by 0..K layers each (l = pp q - the two offsets), K the output layer's weight in layers, about
// V / (12 h) (its logit GEMMs per token, 2 h V forward, against a layer's 24 h^2), clamped to
// [2, 8]: a lighter last stage pays for the head, a lighter first one for the embedding. The even
// split is left out; at most (K+1)^2 / pp splits. The one statement of the rule: the planner's
// search and `ptdp train --adapt`'s candidates of another t, p, d enumerate it.
std::vector<std::pair<int, int>> UnevenStageSplits(const ModelSpec& m, int pp);
// "9/3/8/4": per-stage layer counts as ToString and --fix stage_layers write them.
std::string StageLayersText(const std::vector<int>& counts);
// Reads a layout object (global_batch is kept from `base`, which also supplies defaults).
Result<ParallelConfig> LayoutFromJson(const Json& j, const std::string& path,
                                      const ParallelConfig& base = ParallelConfig());

}  // namespace ptdp
