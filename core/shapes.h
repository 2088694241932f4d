// Per-rank shapes under sharding: the ONE source of truth for which parameters a rank holds and
// which activations a layer keeps for its backward. The planner's memory model and the runtime's
// allocator both count bytes from these lists, so a prediction and a measurement agree by
// construction wherever the runtime stores what is listed here.
//
// Layer placement: the model's l layers are cut into pp * vp virtual stages of l / (pp vp) layers.
// Virtual stage k = chunk * pp + pp_rank (Megatron-LM's interleaved assignment), or the V of ZB-V
// (core/parallel.h StageOfChunk, the one placement), so with vp = 1 pipeline rank r holds layers
// [r l/pp, (r+1) l/pp). With uneven stages (ParallelConfig::first_stage_layers /
// last_stage_layers) and vp = 1, rank 0 holds the first's count, rank pp-1 the last's, and the
// ranks between an equal share of the rest, in order; interleaved (vp > 1), every virtual stage
// holds (l + e + o) / (pp vp) layers but the first (e = 1 when first is set) and the last (o) one
// fewer, in order; with per-stage counts (ParallelConfig::stage_layers, vp = 1), rank r holds the
// r-th count, in order. The embedding
// lives on the first virtual stage (rank 0, chunk 0), the final LayerNorm and output layer on the
// last (rank pp-1, chunk vp-1; in a V rank 0, chunk 1, which then uses the tied embedding's own
// matrix instead of a copy). ChunkLayers is the one answer to "which layers": parameters,
// the ledger's stash, the cost table, the runtime and the checkpoints all ask it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model.h"
#include "core/parallel.h"
#include "core/units.h"

namespace ptdp {

struct LayerRange {
  int begin = 0;  // first global layer index
  int end = 0;    // one past the last
  int size() const { return end - begin; }
};

int VirtualStage(const ParallelConfig& c, int pp_rank, int chunk);  // StageOfChunk for c
// The pipeline rank that holds the head (the last virtual stage) and computes the loss.
int HeadRank(const ParallelConfig& c);
// Whether pipeline rank `pp_rank` takes part in the tied word embedding's gradient all-reduce:
// tied embeddings (or multi-token prediction, whose embedding copy is tied) with the head on
// another rank than the embedding (rank 0 and HeadRank; never in a V, whose head is on rank 0,
// nor with pp = 1).
bool InTiedEmbeddingGroup(const ModelSpec& m, const ParallelConfig& c, int pp_rank);
LayerRange ChunkLayers(const ModelSpec& m, const ParallelConfig& c, int pp_rank, int chunk);
// Layers per pipeline rank (all its chunks), rank 0 first: "3/2/3" for an uneven pp = 3.
std::vector<int> StageLayerCounts(const ModelSpec& m, const ParallelConfig& c);
// The layers of pipeline rank `pp_rank`, all its chunks: one entry of StageLayerCounts.
int RankLayerCount(const ModelSpec& m, const ParallelConfig& c, int pp_rank);
// Of those layers, the mixture's leading dense ones (ModelSpec::moe_dense_layers; 0 for a dense
// model): a chunk's or a pipeline rank's. Per-layer counts take LayerModel (core/model.h).
int ChunkDenseLayers(const ModelSpec& m, const ParallelConfig& c, int pp_rank, int chunk);
int RankDenseLayers(const ModelSpec& m, const ParallelConfig& c, int pp_rank);
// The transformer layers pipeline rank `pp_rank` runs, by kind: the model's own and a mixture's
// dense ones, the head's rank counting its multi-token prediction depths (each a layer of the
// last layer's kind) among them.
struct RankLayerKinds {
  int own = 0;
  int dense = 0;
};
RankLayerKinds RankLayersByKind(const ModelSpec& m, const ParallelConfig& c, int pp_rank);
bool HoldsEmbedding(const ParallelConfig& c, int pp_rank, int chunk);
bool HoldsHead(const ParallelConfig& c, int pp_rank, int chunk);

// Multi-latent attention's Q, K and V projections (ModelSpec::IsMla) as GEMMs [rows, out] = [rows,
// in] x [in, out] on one tensor rank for a microbatch of `tokens` (b s): q_down [q_lora, h] and
// kv_down [kv_lora + rope, h], copies on every tensor rank run on the rank's own tokens (tokens /
// t under sequence parallelism, else all of them); q_up [a dqk / t, q_lora] (or q [a dqk / t, h]
// without a query latent) and kv_up [a (dh + dv) / t, kv_lora], column-parallel, on all tokens.
// The projection after the attention is the usual row-parallel [h, a dv / t]. Order: q_down,
// q_up, kv_down, kv_up (q alone, kv_down, kv_up without a query latent).
struct LinearShape {
  int64_t rows = 0, out = 0, in = 0;
};
std::vector<LinearShape> MlaProjections(const ModelSpec& m, int tp, int64_t tokens,
                                        bool sequence_parallel);

// How a parameter is split over the tensor group.
enum class Sharding {
  kReplicated,  // every tensor rank holds all of it (LayerNorm, row-parallel biases, wpe)
  kRows,        // dim 0 split: column-parallel weights [out/t, in], their biases, vocab rows
  kCols,        // dim 1 split: row-parallel weights [out, in/t]
};

struct ParamTensor {
  std::string name;                   // "layer3.attn.qkv.weight", "embedding.word", ...
  std::vector<int64_t> local_shape;   // what one tensor rank holds
  std::vector<int64_t> global_shape;  // the unsharded tensor
  Sharding sharding = Sharding::kReplicated;
  // A second copy of a tied tensor (the output layer's copy of the word embedding on the last
  // stage when it is not the first): its gradient is all-reduced with the original over the
  // embedding group, and a global norm must not count it twice.
  bool tied_copy = false;
  // An expert's matrix (core/experts.h): split over the expert groups (E / ep experts per rank,
  // each over etp ranks), its gradient reduced over the expert data-parallel group.
  bool expert = false;
  int64_t LocalElements() const;
  int64_t GlobalElements() const;
};

// The parameters one tensor rank of (pp_rank, chunk) holds, in a fixed order.
// Experts are named by their global index: ep_rank's E / ep experts (core/experts.h).
std::vector<ParamTensor> ChunkParameters(const ModelSpec& m, const ParallelConfig& c, int pp_rank,
                                         int chunk, int ep_rank = 0);
// All chunks of a pipeline rank.
std::vector<ParamTensor> StageParameters(const ModelSpec& m, const ParallelConfig& c, int pp_rank);
// One transformer layer on one tensor rank: its parameter tensors and elements (the same list
// ChunkParameters uses). A Llama-style layer (core/model.h) has RMSNorm weights only, QKV of
// h + 2 kv_heads dh rows split by query groups, SwiGLU's gate and up as one fc1 of 2f rows, and no
// biases (Qwen2: a QKV bias); without rotary embeddings the first stage holds a position table.
struct LayerParameters {
  int tensors = 0;
  int64_t elements = 0;
  // The four Linears' weights (QKV, projection, fc1, fc2; a mixture of experts: its experts' fc1
  // and fc2, not the router): what FP8 training keeps FP8 copies of.
  int64_t linear_weight_elements = 0;
  // Of `elements`, the experts' (core/experts.h; 0 for a dense layer).
  int64_t expert_elements = 0;
};
// On one rank of `c` (its tp, and for a mixture of experts its ep and etp); the form with `tp`
// alone is the layout with ep = 1. Of `m`'s one kind of layer: a mixture's leading dense layers
// are DenseLayerModel's (core/model.h).
LayerParameters LayerParameterCounts(const ModelSpec& m, const ParallelConfig& c);
LayerParameters LayerParameterCounts(const ModelSpec& m, int tp);
// Number of parameter elements one GPU of pipeline rank `pp_rank` holds.
int64_t StageParameterElements(const ModelSpec& m, const ParallelConfig& c, int pp_rank);

// The tokens of each sequence one rank holds: s, or s / cp under context parallelism. Every
// activation list below, the boundary message and the workspace count s b with this s, so that
// with cp > 1 they are those of one context-parallel rank (fused attention: nothing in them is
// quadratic in s).
inline int64_t ContextShardLen(const ModelSpec& m, const ParallelConfig& c) {
  return m.seq_len / c.cp;
}

// Activations a layer keeps per microbatch for its backward, on one tensor rank (no sequence
// parallelism). With 16-bit activations and dropout this is Korthikanti et al. 2022's
// s b h (10 + 24/t + 5 a s / (h t)) bytes per layer, entry by entry.
enum class ActKind {
  kActivation,   // stored in the compute dtype (2 bytes in 16-bit training, 4 in fp32)
  kLinearInput,  // a Linear's input kept for its weight gradient: the compute dtype, or its 1-byte
                 // FP8 copy in fp8 training (Transformer Engine saves the cast input)
  kMask,         // dropout mask, 1 byte per element
  kFp32,         // always fp32: the logits the vocabulary-parallel cross-entropy keeps, LayerNorm
                 // and softmax statistics
  kInt32,        // token ids (the embedding's inputs, the cross-entropy's targets)
};
struct ActTensor {
  std::string name;
  int64_t elements = 0;
  ActKind kind = ActKind::kActivation;
};
// Everything a layer keeps without full recomputation. With c.recompute == kSelective the attention
// core (AttentionCoreActivations) is left out: Korthikanti's s b h (10 + 24/t); with sequence
// parallelism the s b h entries are kept as their s/t slice: s b h (34/t + 5 a s / (h t)), or
// s b h 34/t with selective recomputation.
std::vector<ActTensor> LayerActivations(const ModelSpec& m, const ParallelConfig& c, bool dropout);
// The attention core's s^2 tensors (softmax output; dropout mask and output): 5 a s^2 b / t bytes
// in 16-bit training with dropout, what selective recomputation rebuilds. With c.fused_attention
// only the fp32 log-sum-exp per score row, 4 a s b / t bytes with or without dropout (the fused
// kernel regenerates the mask); selective recomputation is refused with it (ParallelConfig).
std::vector<ActTensor> AttentionCoreActivations(const ModelSpec& m, const ParallelConfig& c,
                                                bool dropout);
// With full recomputation a layer keeps only its input (s b h, s b h / t with sequence
// parallelism); the rest is rebuilt in backward.
std::vector<ActTensor> LayerCheckpoint(const ModelSpec& m, const ParallelConfig& c);
// What a layer keeps per microbatch under c.recompute (LayerCheckpoint or LayerActivations).
std::vector<ActTensor> LayerStash(const ModelSpec& m, const ParallelConfig& c, bool dropout);
// What one layer's backward rebuilds and holds while it runs: the whole layer's activations but
// its input (the checkpoint it is rebuilt from) with full recomputation, the attention core with
// selective, nothing without.
std::vector<ActTensor> RecomputeWorkingSet(const ModelSpec& m, const ParallelConfig& c,
                                           bool dropout);
// What the last virtual stage keeps per microbatch after its layers: final LayerNorm input and its
// statistics, the output layer's input, the fp32 logits slice s b V/t, the softmax statistics
// over the whole vocabulary and the targets.
std::vector<ActTensor> HeadActivations(const ModelSpec& m, const ParallelConfig& c);
// What one multi-token prediction depth (ModelSpec::mtp_layers) keeps per microbatch on the head's
// stage: its two input norms' statistics and enorm's input (hnorm's is the previous head's
// output.input, kept already), eh_proj's [2h] input, its layer's stash
// (LayerStash of the last layer's kind), and a head's and an embedding's stash of its own.
std::vector<ActTensor> MtpActivations(const ModelSpec& m, const ParallelConfig& c, bool dropout);
// What the first virtual stage keeps per microbatch for the embedding's backward: the token ids
// and, with dropout, the embedding dropout's mask.
std::vector<ActTensor> EmbeddingActivations(const ModelSpec& m, const ParallelConfig& c,
                                            bool dropout);
// The zero-bubble split backward (BackwardInput / BackwardWeight, core/program.h): what one layer
// keeps from its input half to its weight half. The input half runs everything but the four
// Linears' weight (and bias) gradient GEMMs, dW += dout^T x, and keeps their operands: the
// gradients at the Linears' outputs (LayerOutputGrads: QKV s b QkvOut/t, projection s b h, fc1
// s b Fc1Out/t, fc2 s b h), allocated while the layer's stash is still live, and the four inputs
// (attn.qkv.input, attn.proj.input, mlp.fc1.input, mlp.fc2.input); the rest of the stash (or,
// under full recomputation, the rebuilt working set and the checkpoint) is freed by the input
// half. The LayerNorm and bias-dropout gradients stay in the input half (they are fused with it).
std::vector<ActTensor> LayerOutputGrads(const ModelSpec& m, const ParallelConfig& c);
std::vector<ActTensor> LayerWeightGradStash(const ModelSpec& m, const ParallelConfig& c);
// The head's: the output layer's input and the logits' gradient s b V/t in the compute dtype (the
// rest of the head's stash is freed by the input half). The embedding's backward (a scatter-add,
// no GEMM) runs whole in the input half.
std::vector<ActTensor> HeadWeightGradStash(const ModelSpec& m, const ParallelConfig& c);
// Bytes of a list with `act_bytes` per kActivation element (core/ledger.h prices lists by
// precision).
Bytes ActivationBytes(const std::vector<ActTensor>& acts, int act_bytes);
// ... and `linear_input_bytes` per kLinearInput element (1 in fp8 training).
Bytes ActivationBytes(const std::vector<ActTensor>& acts, int act_bytes, int linear_input_bytes);

// Elements of one pipeline message (the activation or gradient at a stage boundary) per tensor
// rank: b s h, or b s h / t with scatter/gather or sequence parallelism.
int64_t BoundaryElements(const ModelSpec& m, const ParallelConfig& c);

}  // namespace ptdp
