// The ledger: the ONE place that turns shapes (core/shapes.h) and a layout into bytes and FLOPs.
// The planner's prediction, `ptdp simulate`'s memory, the runtime's accounting and memory limit,
// and the trainer's TFLOP/s all call these functions; nothing else multiplies element counts by
// bytes or counts FLOPs.
//
// Parameter state per element (BytesPerParameter):
//   fp32:                        weight 4, grad 4, optimizer 8 (Adam m, v)           = 16
//   bf16, or fp16 with fusion:   weight 2 (compute copy), grad 4 (fp32 main grads),
//                                optimizer 12 (fp32 master + Adam m, v)              = 18
//   fp16 without fusion:         weight 2, grad 2 (Megatron-LM 2021's fp16 grads), optimizer 12 =
//   16
//   bf16 with grad_reduce_bf16:  weight 2, grad 2 (bf16 gradient buffer), optimizer 12 = 16
//   optimizer_state_bf16:        optimizer 6 in place of 12 (bf16 Adam m, v, and the master's
//                                low 16 bits beside the bf16 weight)
// With the distributed optimizer the optimizer bytes are divided over the data-parallel group.
// fp8 is bf16's 18, plus the FP8 copies of the four Linears' weights in each layer (1 byte, and 1
// for the transposed copy Transformer Engine keeps for the weight gradient on Hopper), counted
// with the weights (Fp8WeightCopyBytes); the embedding, output layer and norms have none.
//
// Activations are in the compute dtype, but in fp8 training the four Linears' inputs kept for the
// backward (ActKind::kLinearInput) are their 1-byte FP8 copies.
// Activations, per (microbatch, chunk) in flight: each layer's stash (LayerStash: the full list,
// or the checkpoint with full recomputation), the embedding's (first virtual stage) and the
// head's (last virtual stage). The runtime allocates exactly these lists and frees them in this
// order, which is what the Program walk (PeakActivationBytes with a Program) replays:
//   kRecvAct / kForward  the chunk's whole stash for the microbatch becomes live;
//   kBackward            the head's backward runs first and frees the head's stash; then layer by
//                        layer from the last: with recomputation the layer's working set
//                        (RecomputeWorkingSet) is rebuilt, and the layer's backward frees its
//                        working set and its stash; finally the embedding's stash is freed.
//   kBackwardInput       the zero-bubble split (core/program.h, core/shapes.h
//                        LayerWeightGradStash): as kBackward's phases, but the head's phase keeps
//                        its logits' gradient and the output layer's input, and each layer's
//                        phase allocates its four Linear output gradients (on top of the stash and
//                        working set) and then frees all but LayerWeightGradStash; the embedding's
//                        stash is freed;
//   kBackwardWeight      frees the chunk's weight-gradient stash.
// Transient buffers (gradients in flight between layers, received or outgoing messages, the
// logits' gradient) are the runtime's workspace (MemTag::kWorkspace): not in MemoryLedger's Total
// (which the runtime's measured peak without workspace equals), but PeakWorkspaceBytes states
// them, and the planner's fit test and `ptdp train`'s report add them (TotalWithWorkspace).
// Collectives' scratch is the communicator's (host or library memory), in neither.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "core/program.h"
#include "core/shapes.h"
#include "core/units.h"

namespace ptdp {

struct ParamBytes {
  int weight = 4;     // what the layers read: fp32 weights, or their 16-bit compute copy
  int grad = 4;       // the gradient buffer (fp32 main gradients, or 16-bit)
  int optimizer = 8;  // Adam m and v, plus the fp32 master weights in 16-bit training
  int Total() const { return weight + grad + optimizer; }
};
// fp32 main gradients: fp32 and bf16 (fp8) unless grad_reduce_bf16, fp16 with
// grad_accumulation_fusion.
bool Fp32MainGrads(const ParallelConfig& c);
ParamBytes BytesPerParameter(const ParallelConfig& c);

// One GPU's memory, by what it holds (workspace is the profile's, added by the planner).
struct MemoryLedger {
  Bytes weights = 0;
  Bytes grads = 0;
  Bytes optimizer = 0;
  Bytes activations = 0;  // the peak of the in-flight stash plus the recompute working set
  Bytes workspace = 0;  // what the runtime's transient buffers add at its peak (PeakWorkspaceBytes)
  Bytes Total() const { return weights + grads + optimizer + activations; }
  // An upper bound on the peak of everything the runtime holds (see PeakWorkspaceBytes).
  Bytes TotalWithWorkspace() const { return Total() + workspace; }
};

// Bytes of an activation list in the layout's precision.
Bytes ListBytes(const std::vector<ActTensor>& acts, const ParallelConfig& c);
// The distributed optimizer's shard: each of the d cp ranks holding a parameter (WeightReplicas,
// or one instance's OptimizerShardRanks with optimizer_instances > 1, the 1/d then a 1/(d cp / N);
// an expert's: ExpertWeightReplicas) keeps the optimizer state of a contiguous 1/d of the
// gradient buffer, in whole elements, so the weight and gradient buffers are padded to d times the
// shard (Megatron-Core pads its buffers to a multiple of d as well; runtime/model/params.h holds
// such a buffer). Without it the state is whole and nothing is padded.
struct OptimizerShards {
  int64_t owned = 0;   // elements whose optimizer state one rank keeps
  int64_t padded = 0;  // elements of its weight and gradient buffers
};
// ceil(elements / shards): one rank's share of a buffer of `elements`.
int64_t OptimizerShardElements(int64_t elements, int shards);
OptimizerShards OptimizerShardsOf(const ParallelConfig& c, int64_t params,
                                  int64_t expert_params = 0);
// Optimizer-state bytes for `params` elements, of which `expert_params` are experts' (core/
// experts.h): the owned elements' above.
Bytes OptimizerBytes(const ParallelConfig& c, int64_t params, int64_t expert_params = 0);
// Weights, gradients and optimizer state of one GPU of `pp_rank` (activations 0), and the same
// for a known count of parameter elements (StageParameterElements, which callers may cache).
MemoryLedger ParameterMemory(const ModelSpec& m, const ParallelConfig& c, int pp_rank);
MemoryLedger ParameterMemory(const ParallelConfig& c, int64_t params, int64_t expert_params = 0);
// The FP8 weight copies of `pp_rank`'s layers (0 unless c.precision is fp8): part of the weights
// the first ParameterMemory counts, which the second (a bare element count) cannot. The second
// form takes the per-layer counts (Fp8LayerWeights) once for every rank of a layout.
struct Fp8LayerWeights {
  int64_t own = 0;    // linear weight elements of a layer of the model's own kind
  int64_t dense = 0;  // of a mixture's leading dense layer (0 without them)
};
Fp8LayerWeights Fp8LayerWeightsOf(const ModelSpec& m, const ParallelConfig& c);
Bytes Fp8WeightCopyBytes(const ModelSpec& m, const ParallelConfig& c, int pp_rank);
Bytes Fp8WeightCopyBytes(const ModelSpec& m, const ParallelConfig& c, int pp_rank,
                         const Fp8LayerWeights& per_layer);
// The routers' expert biases of `pp_rank`'s mixture layers (model.moe_router_expert_bias: E fp32
// buffers per layer, replicated on every rank of the stage; 0 without them): part of the weights.
Bytes RouterBiasBytes(const ModelSpec& m, const ParallelConfig& c, int pp_rank);
// What a GPU of `pp_rank` holds beyond the parameters the second ParameterMemory counts: the
// expert biases, the FP8
// weight copies, and with FSDP (ParallelConfig::fsdp) the units whose weights and gradients are
// whole at once (core/fsdp.h) in place of whole copies of every layer. The first ParameterMemory
// is the second plus this; the planner adds it to cached element counts.
MemoryLedger WholeCopyMemory(const ModelSpec& m, const ParallelConfig& c, int pp_rank,
                             const Fp8LayerWeights& fp8_per_layer);

// What one microbatch costs in activation bytes, priced once per layout: a layer's stash
// (LayerStash), the embedding's (EmbeddingActivations, first virtual stage), the head's
// (HeadActivations, last virtual stage), and one layer's recompute working set.
struct StashPrices {
  Bytes layer = 0;
  // A mixture's leading dense layer's stash (ModelSpec::moe_dense_layers; 0 without them); the
  // working set is then the larger of the two kinds'.
  Bytes dense_layer = 0;
  Bytes embedding = 0;
  Bytes head = 0;
  // What the head's chunk has freed when its backward first rebuilds a layer (recomputation): the
  // head's whole stash, or with prediction depths (ModelSpec::mtp_layers) the last depth's head
  // alone, whose layer is rebuilt next while the model's head and the other depths keep theirs
  // (runtime/model/mtp.cc).
  Bytes head_before_rebuild = 0;
  // One layer's recompute working set: the larger of the mixture's and its dense layers' (each
  // kind's below; a chunk's is the largest of the kinds it holds, ChunkWorkingSetBytes).
  Bytes working_set = 0;
  Bytes layer_working_set = 0, dense_working_set = 0;
  // The split backward's (core/shapes.h): one layer's and the head's weight-gradient stash, and
  // the parts of them allocated by the input half (the layer's output gradients, the logits').
  Bytes layer_wgrad = 0;
  Bytes layer_output_grads = 0;
  Bytes head_wgrad = 0;
  Bytes head_logits_grad = 0;
  // Under sequence parallelism the input half also gathers the inputs the weight half reads whole
  // (the QKV and fc1 inputs, the output layer's) beside the stash, which keeps them sharded.
  Bytes layer_gathered_inputs = 0;
  Bytes head_gathered_input = 0;
};
StashPrices StashPricesOf(const ModelSpec& m, const ParallelConfig& c);

// Bytes one microbatch keeps on `chunk` of `pp_rank` from its forward to its backward.
Bytes ChunkStashBytes(const ModelSpec& m, const ParallelConfig& c, int pp_rank, int chunk);
Bytes ChunkStashBytes(const StashPrices& prices, const ModelSpec& m, const ParallelConfig& c,
                      int pp_rank, int chunk);
// What one layer's backward holds on top of the stash (RecomputeWorkingSet).
Bytes RecomputeWorkingSetBytes(const ModelSpec& m, const ParallelConfig& c);
// The working set of `chunk` of `pp_rank` above its stash: of the kinds of layer it holds (a
// mixture's leading dense layers sit on the first stages), each layer's less the stash the layers
// behind it in the chunk have freed by its backward; of all of `pp_rank`'s chunks (chunk < 0).
Bytes ChunkWorkingSetBytes(const StashPrices& prices, const ModelSpec& m, const ParallelConfig& c,
                           int pp_rank, int chunk);
// Chunk-microbatches in flight on `pp_rank` at the end of the warm-up (+1 in 1F1B's steady state):
//   GPipe m; 1F1B min(m, p - r); interleaved min(m v, 2 (p - r - 1) + (v - 1) G + 1) with G the
//   microbatch group (core/interleaved_order.h; p when p divides m, so (v - 1)(G - p) more
//   otherwise); and the zero-bubble schedules' most (forward done, weight half not yet) on any
//   rank: ZB-H1 min(m, p), ZB-H2 min(m, 2p - 1) (Qi et al. 2024). Interleaved with p = 2 and odd
//   m: an upper bound (the extra microbatch the generator drops would have been in flight too).
int64_t InFlightChunkMicrobatches(const ParallelConfig& c, int pp_rank);
// Peak activation bytes of `pp_rank`: the closed form (for the search, which scores hundreds of
// thousands of layouts; O(p v), no Program built; O(m) for the zero-bubble orders, replayed on
// byte counts), and the walk of the rank's instructions in
// `program`. They are equal for every Program schedule::BuildProgram makes (tests/core prove it
// over GPipe, 1F1B and interleaved layouts); the closed form's comment says why.
Bytes PeakActivationBytes(const ModelSpec& m, const ParallelConfig& c, int pp_rank);
Bytes PeakActivationBytes(const StashPrices& prices, const ModelSpec& m, const ParallelConfig& c,
                          int pp_rank);
Bytes PeakActivationBytes(const ModelSpec& m, const ParallelConfig& c, const Program& program,
                          int pp_rank);
// The runtime's transient workspace (runtime/model/gpt_layers.cc, runtime/executor/stage.cc and
// executor.cc: every MemTag::kWorkspace allocation), as what its peak adds to the ledger's, in the
// compute dtype (a) and fp32 (wide), with N = mbs s tokens, hd = h/t, f = ffn/t, V = padded
// vocab/t:
//   head forward      the row sums and target logits, 2 N wide (+ N wide, the local max, t > 1);
//   layer forward     the projection's or fc2's partial sum, N h a; the outgoing message N h a
//                     (a chunk that is not the last virtual stage); with full recomputation the
//                     layer's whole stash but its input (RecomputeWorkingSet), transient there,
//                     no more above the ledger's peak than a head's stash (see ledger.cc);
//   head backward     dy + the logits' gradient N V a + the final norm's input gradient N h a
//                     (the split backward keeps the logits' gradient as stash: not workspace);
//   layer backward    dy + dx (2 N h a) + the largest set of the block's gradients in its order:
//                     MLP max(N h + N f, 2 N f, 2 N h), attention N h + max(N h + N hd, 4 N hd,
//                     3 N hd + N h) (the split backward keeps the Linears' output gradients as
//                     stash: MLP max(N f, 2 N h), attention N h + max(N hd, N h));
//   embedding backward  dy + the dropout's gradient, 2 N h a;
// the largest of these, plus the loss's two fp64 accumulators for the whole run and, with more
// than one virtual stage, boundary messages N h a held beside them (a received gradient, or a sent
// message the peer has not yet received): one with one chunk per rank, three with several (an
// observed count, the CPU runtime's interleaved p 2 v 2 holding three; a causal walk of the
// Program would derive it). Where every chunk of the
// rank with layers or the embedding holds the head (one virtual stage, or the last stage without
// interleaving), their backward runs after the head's freed its stash: less what a layer's phase
// holds in its place (working set; the split backward's weight-gradient stash and output
// gradients), that much is taken off them, the ledger's live bytes being at least that below its
// peak then. MemoryLedger's TotalWithWorkspace bounds the peak of everything the runtime holds
// (each phase's live ledger bytes are at most its peak, or that much below it) on one virtual
// stage; with more, only while sends complete in time (a lagging receiver leaves more sends held
// than the count above, since a send's buffer lives until the peer receives it); it is equal to it
// where the largest phase runs at the ledger's peak: one virtual stage without recomputation,
// where the head's backward runs with every microbatch's stash live, and the last stage of a
// pipeline (less the held message). Sequence parallelism (planned, not executed by the runtime)
// is priced as without it. With head_dim, hd = a dh / t. A mixture of experts' MLP term is on its
// experts' N_e = ExpertTokens copies (core/experts.h): max(N_e h + N_e f, 2 N_e f, 2 N_e h) with
// f = moe_ffn_hidden / etp. Under context parallelism N = b s / cp, and a layer's phase also holds
// the ring's buffers (ContextRingBytes).
Bytes PeakWorkspaceBytes(const StashPrices& prices, const ModelSpec& m, const ParallelConfig& c,
                         int pp_rank);
Bytes PeakWorkspaceBytes(const ModelSpec& m, const ParallelConfig& c, int pp_rank);
// Multi-latent attention's block indices, which the runtime keeps from its first layer on
// (runtime/model/mla.h MlaIndexCache): per token and local head 4 nn + 5 nr + 4 nv int32, where
// dh = nn g, rope = nr g, dv = nv g and g = ModelSpec::MlaBlock; 0 without MLA. Counted in
// PeakWorkspaceBytes beside every phase.
Bytes MlaIndexBytes(const ModelSpec& m, const ParallelConfig& c);
// The features of one token's keys and values that a context-parallel ring carries, over all
// tensor ranks: 2 kv dh; under multi-latent attention 2 a dqk, the values padded to dqk as the
// runtime packs them (runtime/model/mla.h; Megatron-Core's ring would carry a (dqk + dv)).
int64_t ContextRingKvFeatures(const ModelSpec& m);
// The ring attention's buffers a context-parallel layer holds while it runs (0 with cp = 1), in
// chunks of keys and values of s / cp tokens, N ContextRingKvFeatures / t elements each: forward,
// every step's
// received chunk until the layer's forward ends (Transformer Engine's AttnFuncWithCPAndKVP2P keeps
// them in its p2p_comm_buffers list: cp); backward, the chunk and its gradient, double-buffered
// (4); the larger of the two. Its fp32 accumulators of the output and dQ are not counted.
Bytes ContextRingBytes(const ModelSpec& m, const ParallelConfig& c);
MemoryLedger MemoryOf(const ModelSpec& m, const ParallelConfig& c, int pp_rank);
MemoryLedger MemoryOf(const ModelSpec& m, const ParallelConfig& c, const Program& program,
                      int pp_rank);

// Bytes of one pipeline message (activation or gradient at a stage boundary) per tensor rank.
Bytes PipelineMessageBytes(const ModelSpec& m, const ParallelConfig& c);

// FLOPs per iteration (the paper's eq. 3 family, GEMMs only), with the padded vocabulary that runs:
//   one layer's forward for B sequences: QKV 6 B s h^2, projection 2 B s h^2, MLP 4 B s h f,
//     scores and scores.V 4 B s^2 h (24 B s h^2 + 4 B s^2 h with f = 4h); backward 2x; a
//     Llama-style layer (grouped-query attention, SwiGLU): QKV 2 B s h (h + 2 kv dh), projection
//     2 B s h^2, MLP 6 B s h f, the same 4 B s^2 h;
//   logits 6 B s h V forward + backward (never recomputed). A mixture of experts (core/experts.h):
//     the router 2 B s h E, k experts' SwiGLU 6 B s h f_moe k and a shared expert's 6 B s h f_s in
//     place of the MLP, its leading dense layers a dense layer's. Multi-latent attention: its
//     down and up projections (core/shapes.h MlaProjections), Q K^T over dqk and P V over dv.
//     Multi-token prediction: each depth a layer of the last layer's kind, eh_proj 4 B s h^2
//     and the logits again (implemented in core/ledger_flops.cc).
//   Model FLOPs (MFU's convention) = 3 l layer-forwards + logits = 72 B s l h^2 (1 + s/6h +
//   V/12lh). Hardware FLOPs add what runs again under c.recompute: full, one more forward of every
//   layer (eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh)); selective, every layer's attention core 4 B
//   s^2 h. With c.fused_attention the backward recomputes Q K^T: 2 B s^2 h per layer more
//   (FlashAttention-2's backward is 2.5x its forward); model FLOPs are unchanged.
FlopCount ModelIterationFlops(const ModelSpec& m, const ParallelConfig& c);
FlopCount HardwareIterationFlops(const ModelSpec& m, const ParallelConfig& c);
// The same hardware FLOPs for one rank of pipeline rank `pp_rank` (its layers for its data
// replica's B/dp sequences, over t tensor ranks; the logits on the last stage): the compute a rank
// is expected to do per iteration, by which the runtime's monitor compares ranks of different
// stages.
FlopCount PipelineRankFlops(const ModelSpec& m, const ParallelConfig& c, int pp_rank);

}  // namespace ptdp
