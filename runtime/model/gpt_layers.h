// The GPT's layers with explicit forward and backward (no autograd), tensor-parallel as Megatron-LM
// does it: column-parallel QKV and fc1, row-parallel proj and fc2 (bias added once, after the
// all-reduce), heads split over the tensor group, the f (identity forward / all-reduce backward)
// and g (all-reduce forward / identity backward) operators, a vocabulary-parallel embedding and a
// vocabulary-parallel cross-entropy whose padded columns are masked out of the softmax.
//
// Every layer is pre-LayerNorm:  x2 = x + drop(proj(attn(ln1(x)))),  y = x2 +
// drop(fc2(gelu(fc1(ln2(x2))))). Llama's layers (LayerArch) differ in parts: RMSNorm for the
// norms, rotary embeddings of q and k before attention, grouped-query attention, SwiGLU for the
// GeLU, and no biases (their weights are then empty views). Dropout masks are drawn by the backend
// from the counter-based generator keyed by (site, step) and indexed by the GLOBAL element (global
// sequence, position, column or global head), so they are the same in every layout and on every
// backend; they are STORED (1 byte per element) from the forward to the backward, as core/shapes.h
// lists them, but the attention dropout's with fused attention, which the backend regenerates from
// its key.
//
// All compute goes through the device's Ops and all communication through the Communicator: no
// element of a tensor is touched on the host. Each stash holds exactly the tensors of its
// core/shapes.h list (LayerActivations / LayerCheckpoint, HeadActivations,
// EmbeddingActivations), in the dtypes core/ledger.h prices them at.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/model.h"
#include "core/status.h"
#include "runtime/backend/device.h"
#include "runtime/comm/communicator.h"

namespace ptdp::runtime {

// Local sizes of one tensor rank for one microbatch.
struct LayerDims {
  int64_t b = 1;      // microbatch size (sequences)
  int64_t s = 1;      // sequence length
  int64_t h = 1;      // hidden size
  int64_t heads = 1;  // heads of the whole model
  int64_t heads_local = 1;
  // Grouped-query attention: key/value heads on this rank (0: heads_local, multi-head). QKV rows
  // are [kv_heads_local][group + 2][D] (kernels/reference/qkv_layout.h).
  int64_t kv_heads_local = 0;
  int64_t head0 = 0;  // global index of this rank's first head
  // Features per head (ModelSpec::head_dim; Qwen3's 128 at any hidden size); 0: h / heads. The
  // attention's output, the projection's input, is heads_local D wide.
  int64_t head_dim = 0;
  // Multi-latent attention (model.mla_kv_lora > 0; runtime/model/mla.h): the query and key
  // latents' widths (q 0: queries straight from the hidden state), the rotated features each head
  // adds to its head_dim - mla_rope unrotated ones, and the value's width. head_dim is then the
  // query/key head's whole dqk and each head has its own key and value (kv_heads_local =
  // heads_local); the attention's output is heads_local mla_v wide (AttnWidth).
  // Its copies move blocks of mla_block features (ModelSpec::MlaBlock).
  int64_t mla_q_lora = 0, mla_kv_lora = 0, mla_rope = 0, mla_v = 0, mla_block = 0;
  int64_t f_local = 1;         // MLP inner size / t
  int64_t expert_f_local = 0;  // a mixture's expert inner size / t (the expert tensor group is t)
  int64_t shared_f_local = 0;  // a mixture's shared expert's inner size / t (0: none)
  int64_t v_local = 1;         // padded vocabulary / t
  int64_t vocab_begin = 0;     // first global vocabulary row of this rank's shard
  int64_t vocab_real = 1;      // unpadded vocabulary: columns >= this are masked
  // Sequence parallelism (layout.sequence_parallel; Korthikanti et al. 2022): the residual
  // stream, the LayerNorms, dropouts and residual adds hold `sp_rank`'s block of R = N / sp of
  // the microbatch's N rows (sp = t; 1 without it). A contiguous block of rows, not a slice of
  // every sequence: those ops are row-wise, and an all-gather of the blocks is [N][h] in order.
  int64_t sp = 1;
  int64_t sp_rank = 0;
  // Context parallelism (layout.cp): `s` stays the whole sequence and this rank holds its
  // S = s / cp positions of kernels/reference/context_chunks.h, two chunks of every sequence;
  // every row-wise tensor is [b][S] rows and attention meets the group's keys
  // (runtime/model/context_attention.h).
  int cp = 1;
  int cp_rank = 0;
  int64_t S() const { return s / cp; }
  int64_t N() const { return b * S(); }
  int64_t R() const { return N() / sp; }
  int64_t D() const { return head_dim > 0 ? head_dim : h / heads; }
  int64_t KvLocal() const { return kv_heads_local > 0 ? kv_heads_local : heads_local; }
  int64_t Group() const { return heads_local / KvLocal(); }
  int64_t QkvWidth() const { return (heads_local + 2 * KvLocal()) * D(); }
  bool Mla() const { return mla_kv_lora > 0; }
  int64_t V() const { return Mla() ? mla_v : D(); }  // a value head's features
  int64_t AttnWidth() const { return heads_local * V(); }
};

// The widths of model m's layers on tensor rank tp_rank of t (one place for the trainer and
// `ptdp forward`); b, s and the sequence and context split are the caller's.
LayerDims LayerDimsOf(const ModelSpec& m, int t, int tp_rank);

// The layer's architecture (core/model.h ModelSpec): GPT's by default, Llama's with all three.
struct LayerArch {
  bool rmsnorm = false;  // every norm an RMSNorm (no mean, no bias)
  // SwiGLU MLP: fc1 gives each inner feature's gate and up side by side ([N][f/t][2]), the
  // activation silu(gate) up; else GeLU.
  bool swiglu = false;
  bool rotary = false;  // rotary position embedding of q and k (and no position table)
  // Its frequencies: base (ModelSpec::rotary_base) and Llama 3.1's or YaRN's scaling
  // (rope_scaling_*), with YaRN's concentration (ModelSpec::RopeAttentionFactor).
  RopeSpec rope;
  // Multi-latent attention's softmax scale over 1/sqrt(dqk) (ModelSpec::MlaSoftmaxFactor: YaRN's
  // mscale squared), folded into the queries (runtime/model/mla.h).
  double mla_softmax_factor = 1.0;
  double norm_eps = 1e-5;  // RMSNorm's (LayerNorm keeps kernels/reference kLayerNormEps)
  // QK norm (Qwen3's): each query and key head RMSNormed (norm_eps) before the rotation.
  bool qk_norm = false;
  // LayerNorm1P: every LayerNorm's weight stored as its offset from 1 (the kernels add the 1).
  bool layernorm_1p = false;
  // Squared ReLU in place of the GeLU of the two-matrix MLP (Nemotron-4's): fc1 then relu^2.
  bool squared_relu = false;
  // Sliding-window attention (model.window_size, window_full_every): which layers are windowed
  // is core/model.h WindowedLayer's, the rule ModelSpec::IsWindowLayer applies.
  int64_t window_size = 0;
  int window_full_every = 0;
  // A mixture of experts (model.moe_experts; runtime/model/moe_layer.h): the layers whose
  // weights hold a router run it in place of the MLP, each token through its moe_topk experts.
  int moe_experts = 0;
  int moe_topk = 0;
  int moe_router_groups = 0, moe_router_group_topk = 0;  // group-limited routing (0: none)
  bool moe_router_pre_softmax = false;  // the softmax over all E (model.moe_router_pre_softmax)
  bool moe_router_sigmoid = false;      // DeepSeek-V3's sigmoid scores (model.moe_router_sigmoid)
  double moe_router_topk_scale = 1.0;   // the top k's weights times this
  // Token dropping (model.moe_capacity_factor; 0: dropless), per sequence of the microbatch on
  // this context-parallel rank (runtime/model/moe_route.h DropInSequence).
  double moe_capacity_factor = 0;
  bool moe_drop_by_position = false;
  bool moe_pad_to_capacity = false;
};

// The dtypes of a run: `act` for activations, pipeline messages, tensor-parallel collectives and
// the weights the layers read (the compute dtype); `wide` for parameter gradients and the fp32
// statistics (LayerNorm, softmax, logits). Training: act = compute dtype, wide = fp32. The
// finite-difference tests run everything in fp64.
struct DTypes {
  DType act = DType::kFp32;
  DType wide = DType::kFp32;
};

// Where a microbatch's rows sit globally, for dropout.
struct DropoutCtx {
  double p = 0.0;    // 0: no dropout
  int64_t step = 0;  // iteration: masks differ per step
  int64_t seq0 = 0;  // global sequence index of the microbatch's first sample
  // Key of a dropout site ("layer3.attn", "layer3.attn_residual", "layer3.mlp_residual",
  // "embedding") for this step.
  uint64_t Key(const std::string& site) const;
};

// A tensor the model lacks (a bias, RMSNorm's bias, the QK norm's weights) is an empty view. A
// mixture-of-experts layer has no fc1 and fc2 but a router [E][h] and each expert's fc1 [2f/t][h]
// and fc2 [h][f/t] (a dense layer: an empty router and no experts).
struct LayerWeights {
  ConstRef ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b;
  ConstRef ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  ConstRef q_norm_w, k_norm_w;  // multi-latent attention: q_norm_w is the query latent's norm
  ConstRef router_w;
  std::vector<ConstRef> expert_fc1, expert_fc2;
  ConstRef shared_fc1, shared_fc2;  // a mixture's shared expert (model.moe_shared_ffn_hidden)
  ConstRef shared_gate;             // its gate [1][h] (model.moe_shared_gate), or empty
  // Auxiliary-loss-free balance (model.moe_router_expert_bias): the router's expert bias [E] (wide;
  // it moves the choice and weighs nothing), and the host counters [E] the backward adds the
  // microbatch's tokens per expert to (RouterBiases reads them at the step); empty / nullptr: none.
  ConstRef expert_bias;
  int64_t* expert_tokens = nullptr;
  // Multi-latent attention (core/shapes.h AppendMlaProjections; qkv_w empty): the query latent's
  // down projection [q_lora][h] and up projection [a dqk / t][q_lora] (without a query latent
  // q_up_w is attn.q.weight [a dqk / t][h] and q_down_w empty), the key/value latent's down
  // projection [kv_lora + rope][h], its norm [kv_lora] and up projection [a (dh + dv) /
  // t][kv_lora].
  ConstRef q_down_w, q_up_w, kv_down_w, kv_norm_w, kv_up_w;
};
struct LayerGrads {
  TensorRef ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b;
  TensorRef ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  TensorRef q_norm_w, k_norm_w;
  TensorRef router_w;
  std::vector<TensorRef> expert_fc1, expert_fc2;
  TensorRef shared_fc1, shared_fc2;
  TensorRef shared_gate;
  TensorRef q_down_w, q_up_w, kv_down_w, kv_norm_w, kv_up_w;  // as LayerWeights'
};

// What a layer keeps for its backward: core/shapes.h LayerActivations, entry by entry. With full
// recomputation only `x` lives between forward and backward (LayerCheckpoint).
struct LayerStash {
  Tensor x;                   // ln1.input [N][h]
  Tensor ln1_mean, ln1_rstd;  // ln1.mean, ln1.rstd [N] wide
  Tensor ln1_out;             // attn.qkv.input [N][h]
  // QK norm: attn.q_norm.input and attn.k_norm.input as one [N][kv][group + 1][D] (each
  // group's query heads, then its key, before the norm) and attn.qk_norm.rstd [N][kv][group + 1]
  Tensor qk_in, qk_rstd;
  Tensor qkv;  // attn.q/k/v [N][QkvWidth], q and k normed (qk_norm) and rotated (rotary)
  Tensor probs, att_mask, att_dropped;  // attn.softmax.output, attn.dropout.mask/.output
  Tensor att_lse;                       // attn.softmax.lse [b][a/t][s] wide (fused attention)
  Tensor attn_out;                      // attn.proj.input [N][heads_local D]
  Tensor attn_res_mask;                 // attn.residual_dropout.mask [N][h] u8
  Tensor x2;                            // ln2.input [N][h]
  Tensor ln2_mean, ln2_rstd;            // ln2.mean, ln2.rstd
  Tensor ln2_out;                       // mlp.fc1.input [N][h] (a mixture: moe.router.input [R][h])
  Tensor fc1_out;                       // mlp.gelu.input [N][f/t] (mlp.swiglu.input [N][2f/t])
  Tensor gelu_out;                      // mlp.fc2.input [N][f/t]
  // A mixture of experts (core/experts.h ExpertActivations): moe.router.logits [R][E] and
  // moe.router.probs [R][k] (wide), and moe.fc1.input [N k][h], the token copies in the experts'
  // order; fc1_out and gelu_out are then moe.swiglu.input [N k][2f/t] and moe.fc2.input
  // [N k][f/t] (the activation times the token's probability).
  Tensor router_logits, router_probs, moe_in;
  // Its shared expert's moe.shared.swiglu.input [N][2fs/t] and moe.shared.fc2.input [N][fs/t].
  Tensor shared_fc1_out, shared_act;
  Tensor mlp_res_mask;  // mlp.residual_dropout.mask [N][h] u8
  // Multi-latent attention (core/shapes.h AppendMlaActivations): ln1_out is attn.q_down.input;
  // each latent's attn.{q,kv}_norm.input [R][lora] and .rstd [R] (wide; with the latent norms)
  // and attn.{q,kv}_up.input [R][lora]; attn.q and attn.k [N][a/t][dqk] (each head's dh
  // unrotated features, then its mla_rope rotated ones: the up projection's order, before the
  // rotation, which the attention's input redoes) and attn.v [N][a/t][dv]. qkv stays empty.
  Tensor mla_q_in, mla_q_rstd, mla_q_up_in, mla_kv_in, mla_kv_rstd, mla_kv_up_in;
  Tensor mla_q, mla_k, mla_v;
};

// A Linear's weight-gradient GEMM, dw (+ dbias) += dout^T x, deferred by the input half of a split
// backward (zero-bubble BackwardInput) to its weight half (BackwardWeight), with its operands: the
// output gradient (owned here, tagged activations: core/shapes.h LayerOutputGrads) and the input,
// which the stash keeps until the weight half (LayerWeightGradStash).
struct DeferredWeightGrad {
  TensorRef dw, dbias;
  Tensor dout;
  ConstRef x;
  Tensor x_owned;  // under sequence parallelism: the gathered input x points into, kept here
  int64_t n = 0, c = 0, oc = 0;
};
using WeightGradQueue = std::vector<DeferredWeightGrad>;
class MlaIndexCache;  // runtime/model/mla.h

// Everything a layer call needs but its tensors.
struct LayerCtx {
  Device* dev = nullptr;
  Communicator* tp = nullptr;  // nullptr: a tensor group of one
  Communicator* cp = nullptr;  // the context-parallel group (LayerDims::cp > 1 only)
  // The expert-parallel group (layout.ep > 1 only; runtime/model/moe_layer.h): its members hold
  // E / ep experts each, in member order, and exchange the token copies.
  Communicator* ep = nullptr;
  LayerDims d;
  LayerArch arch;
  DTypes types;
  DropoutCtx drop;
  // layout.fused_attention: the attention stash is the log-sum-exp (AttentionStash's fused form).
  bool fused_attention = false;
  // layout.recompute selective (Korthikanti et al. 2022; core/shapes.h): the attention core's s^2
  // tensors (probabilities, dropout mask and output) are dropped right after the forward, and
  // the backward first runs the core's forward again from the stashed QKV (the same dropout key,
  // so the same tensors) before the core's backward.
  bool redo_attention_core = false;
  // recompute_modules mlp (Megatron-Core): the MLP's inside (ln2's statistics and output, fc1's
  // output and the GeLU's) is dropped after the forward and rebuilt from the stashed ln2 input
  // right before the MLP's backward, then dropped again before the attention side's backward.
  bool redo_mlp = false;
  // recompute_modules mla_up_proj: multi-latent attention's q, k and v (the up projections'
  // outputs) are dropped after the attention's forward and rebuilt from the stashed latents right
  // before its backward (runtime/model/mla.h MlaUpProjForward).
  bool redo_mla_up_proj = false;
  // recompute_modules moe_act: a mixture layer's fc2 input (the experts' SwiGLU output scaled by
  // the routing probabilities) is dropped after fc2's forward and rebuilt from fc1's stashed
  // output right before fc2's backward, then dropped again.
  bool redo_moe_act = false;
  // recompute_modules layernorm: a mixture layer's pre-MLP norm output (the router's and the
  // shared expert's input) is dropped once the forward has read it and rebuilt from the stashed
  // norm input and statistics at the start of the mixture's backward, dropped again at its end.
  bool redo_moe_norm = false;
  // recompute_modules moe: a mixture layer's MoE block is kept as its input only (the pre-MLP norm
  // output); the router's logits and probabilities, the dispatched tokens, fc1's and SwiGLU's
  // outputs and the shared expert's inside are dropped after the forward and rebuilt (the router,
  // the dispatch with its all-to-all, fc1, the activation) at the start of the mixture's backward,
  // then dropped again at its end. fc2 and the combine are not run again: their outputs are not
  // read by the backward.
  bool redo_moe_block = false;
  // recompute_modules shared_experts: the shared expert's fc1 and SwiGLU outputs are dropped after
  // its forward and rebuilt from its input right before its backward, then dropped again.
  bool redo_shared_expert = false;
  // Multi-latent attention's block indices kept across layers and microbatches (the trainer's;
  // nullptr: built on every call). runtime/model/mla.h.
  MlaIndexCache* mla_indices = nullptr;
  // Set: the backward calls run as the input half of a split backward. The Linears' weight
  // gradients are appended here instead of computed, and each stash keeps what they read
  // (LayerBackward keeps the four Linear inputs, HeadBackward the output layer's input); the
  // LayerNorm, bias and embedding gradients are computed as in the whole backward.
  WeightGradQueue* defer_weight_grads = nullptr;
  // A mixture of experts' auxiliary load-balancing loss (--moe-aux-loss-coeff): the factor of its
  // gradient, coeff E / (T^2 k) times the microbatch's weight in the objective and the loss scale
  // (0: none; runtime/model/moe_layer.h).
  double moe_aux_grad = 0;
  // With it, its value without coeff (E / (T^2 k) sum_e P_e c_e, the factor
  // `moe_aux_value_scale`: Megatron-Core logs aux_loss / coeff) is added to *moe_aux_sum by the
  // backward on the ranks that report it (every rank computes it).
  double moe_aux_value_scale = 0;
  double* moe_aux_sum = nullptr;
  // Megatron-Core's seq_aux_loss (--moe-router-load-balancing-type): the loss per sequence of the
  // microbatch, their mean (the factors above then hold E / (S^2 k mbs)).
  bool moe_aux_per_sequence = false;
  // The router's z-loss (--moe-z-loss-coeff): coeff / T times the microbatch's weight and the loss
  // scale (the gradient's factor; 0: none), 1 / T (the value's, without coeff), and where it goes.
  double moe_z_grad = 0;
  double moe_z_value_scale = 0;
  double* moe_z_sum = nullptr;
  // Token dropping (model.moe_capacity_factor): the backward adds the microbatch's routed copies
  // and the ones dropped of them to these (tensor rank 0 of each group of routed tokens).
  double* moe_routed_copies = nullptr;
  double* moe_dropped_copies = nullptr;
};

// Allocates st.x (the checkpoint, tagged activations).
Status AllocLayerInput(const LayerCtx& c, LayerStash* st);

// REQUIRES: st->x holds the layer input. Fills the stash (tagged `stash_tag`: activations, or
// workspace for the forward of full recomputation, whose stash is transient) and writes y [R][h].
Status LayerForward(const LayerCtx& c, const LayerWeights& w, int layer, MemTag stash_tag,
                    LayerStash* st, TensorRef y);
// The same with the output allocated by `out` when the layer needs it: at once, or under
// recompute_modules mlp once the MLP's inside is dropped (so that the two never coexist: an
// output that is the head's stashed input would otherwise sit beside the inside, which the
// ledger, like Megatron-Core's memory, never holds at once).
using LayerOutput = std::function<Result<TensorRef>()>;
Status LayerForward(const LayerCtx& c, const LayerWeights& w, int layer, MemTag stash_tag,
                    LayerStash* st, const LayerOutput& out);
// dy [N][h] -> dx [N][h] (overwritten); parameter gradients accumulate. Frees the stash's
// activations except x (and, with c.defer_weight_grads, the four Linear inputs).
Status LayerBackward(const LayerCtx& c, const LayerWeights& w, const LayerGrads& g, int layer,
                     LayerStash* st, ConstRef dy, TensorRef dx);
// Frees everything but x.
void DropLayerActivations(LayerStash* st);
// The weight half of a split backward: runs the deferred GEMMs in order and empties the queue
// (freeing the output gradients). The caller then frees the stashes they read.
Status RunDeferredWeightGrads(const LayerCtx& c, WeightGradQueue* queue);

// The embedding's stash (core/shapes.h EmbeddingActivations): the token ids and the dropout mask.
struct EmbeddingStash {
  Tensor tokens;  // embedding.tokens [N] i32
  Tensor mask;    // embedding.dropout.mask [N][h] u8
};
// out [N][h] = drop(wte shard rows of tokens summed over the tensor group + wpe).
// REQUIRES: st->tokens holds the microbatch's inputs.
// `site`: the dropout site (a prediction depth's embedding has its own).
Status EmbeddingForwardTp(const LayerCtx& c, ConstRef wte_local, ConstRef wpe, EmbeddingStash* st,
                          TensorRef out, const std::string& site = "embedding");
Status EmbeddingBackwardTp(const LayerCtx& c, TensorRef dwte_local, TensorRef dwpe,
                           EmbeddingStash* st, ConstRef dout);

// The head: final LayerNorm, logits against the (tied) vocabulary shard, cross-entropy
// (core/shapes.h HeadActivations).
struct HeadStash {
  Tensor x;                 // final_ln.input [N][h]
  Tensor ln_mean, ln_rstd;  // final_ln.mean/rstd [N] wide
  Tensor ln_out;            // output.input [N][h]
  Tensor logits;            // output.logits [N][V/t] wide
  Tensor row_max, row_sum;  // output.row_max/row_sum [N] wide
  Tensor targets;           // output.targets [N] i32
};
struct HeadWeights {
  ConstRef lnf_w, lnf_b, wout_local;
};
struct HeadGrads {
  TensorRef lnf_w, lnf_b, wout_local;
};
// loss_sum: an fp64 device scalar the tokens' losses are added to.
Status HeadForward(const LayerCtx& c, const HeadWeights& w, HeadStash* st, TensorRef loss_sum);
// dloss: the gradient of the objective with respect to each token's loss (times the loss scale).
// d_out_extra [R][h] (optional): a further gradient of the output layer's input, from the
// multi-token prediction depth that reads it (runtime/model/mtp.h).
// Frees the head's stash (but ln_out, with c.defer_weight_grads).
Status HeadBackward(const LayerCtx& c, const HeadWeights& w, const HeadGrads& g, double dloss,
                    HeadStash* st, TensorRef dx, ConstRef d_out_extra = {});

}  // namespace ptdp::runtime
