// The GPT's layers with explicit forward and backward (no autograd), tensor-parallel as Megatron-LM
// does it: column-parallel QKV and fc1, row-parallel proj and fc2 (bias added once, after the
// all-reduce), heads split over the tensor group, the f (identity forward / all-reduce backward)
// and g (all-reduce forward / identity backward) operators, a vocabulary-parallel embedding and a
// vocabulary-parallel cross-entropy whose padded columns are masked out of the softmax.
//
// Every layer is pre-LayerNorm:  x2 = x + drop(proj(attn(ln1(x)))),  y = x2 +
// drop(fc2(gelu(fc1(ln2(x2))))). Dropout masks are drawn from the counter-based generator keyed by
// (site, step) and indexed by the GLOBAL element (global sequence, position, column or global
// head), so they are the same in every layout; they are regenerated in the backward instead of
// being stored.
//
// Templated on T: float for training, double for the finite-difference tests (which run with a
// tensor group of one, since the communicators move fp32 only).
#pragma once

#include <cstdint>
#include <string>

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
  int64_t head0 = 0;        // global index of this rank's first head
  int64_t f_local = 1;      // MLP inner size / t
  int64_t v_local = 1;      // padded vocabulary / t
  int64_t vocab_begin = 0;  // first global vocabulary row of this rank's shard
  int64_t vocab_real = 1;   // unpadded vocabulary: columns >= this are masked
  int64_t N() const { return b * s; }
  int64_t D() const { return h / heads; }
};

// Where a microbatch's rows sit globally, for dropout.
struct DropoutCtx {
  double p = 0.0;    // 0: no dropout
  int64_t step = 0;  // iteration: masks differ per step
  int64_t seq0 = 0;  // global sequence index of the microbatch's first sample
  // Key of a dropout site ("layer3.attn", "layer3.attn_residual", "layer3.mlp_residual",
  // "embedding").
  uint64_t Key(const std::string& site) const;
};

template <typename T>
struct LayerWeights {
  const T *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
  const T *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
};
template <typename T>
struct LayerGrads {
  T *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
  T *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
};

// What a layer keeps for its backward (core/shapes.h LayerActivations, dropout masks excepted:
// they are regenerated). With full recomputation only `x` is allocated between forward and
// backward (core/shapes.h LayerCheckpoint).
template <typename T>
struct LayerStash {
  Buffer<T> x;                            // ln1.input [N][h]
  Buffer<T> ln1_out, ln1_mean, ln1_rstd;  // attn.qkv.input [N][h], [N], [N]
  Buffer<T> qkv;                          // attn.q/k/v [N][3h/t]
  Buffer<T> att;                          // attn.softmax.output [b][a/t][s][s]
  Buffer<T> attn_out;                     // attn.proj.input [N][h/t]
  Buffer<T> x2;                           // ln2.input [N][h]
  Buffer<T> ln2_out, ln2_mean, ln2_rstd;  // mlp.fc1.input [N][h]
  Buffer<T> fc1_out;                      // mlp.gelu.input [N][f/t]
  Buffer<T> gelu_out;                     // mlp.fc2.input [N][f/t]
};

// Allocates st.x (the checkpoint); the forward allocates the rest.
template <typename T>
Status AllocLayerInput(Device* dev, const LayerDims& d, LayerStash<T>* st);

// REQUIRES: st->x holds the layer input. Fills the stash and writes the output y [N][h].
template <typename T>
Status LayerForward(Device* dev, Communicator* tp, const LayerDims& d, const LayerWeights<T>& w,
                    const DropoutCtx& drop, int layer, LayerStash<T>* st, T* y);
// dy [N][h] -> dx [N][h] (overwritten); parameter gradients accumulate. Frees the stash's
// activations except x.
template <typename T>
Status LayerBackward(Device* dev, Communicator* tp, const LayerDims& d, const LayerWeights<T>& w,
                     const LayerGrads<T>& g, const DropoutCtx& drop, int layer, LayerStash<T>* st,
                     const T* dy, T* dx);
// Frees everything but x.
template <typename T>
void DropLayerActivations(LayerStash<T>* st);

// Embedding: out [N][h] = drop(wte shard rows of tokens summed over the tensor group + wpe).
template <typename T>
Status EmbeddingForwardTp(Communicator* tp, const LayerDims& d, const T* wte_local, const T* wpe,
                          const int32_t* tokens, const DropoutCtx& drop, T* out);
template <typename T>
Status EmbeddingBackwardTp(Device* dev, const LayerDims& d, T* dwte_local, T* dwpe,
                           const int32_t* tokens, const DropoutCtx& drop, const T* dout);

// The head: final LayerNorm, logits against the (tied) vocabulary shard, cross-entropy.
template <typename T>
struct HeadStash {
  Buffer<T> x;                         // final_ln.input [N][h]
  Buffer<T> ln_out, ln_mean, ln_rstd;  // output.input [N][h]
  Buffer<T> logits;                    // output.logits [N][V/t] (fp32 on the CPU)
  Buffer<T> row_max, row_sum;          // [N] softmax statistics over the whole vocabulary
  Buffer<T> loss;                      // [N] per-token loss
};
template <typename T>
Status HeadForward(Device* dev, Communicator* tp, const LayerDims& d, const T* lnf_w,
                   const T* lnf_b, const T* wout_local, const int32_t* targets, HeadStash<T>* st,
                   double* loss_sum);
// dloss: the gradient of the objective with respect to each token's loss (1 / global tokens).
template <typename T>
Status HeadBackward(Device* dev, Communicator* tp, const LayerDims& d, const T* lnf_w,
                    const T* wout_local, T* dlnf_w, T* dlnf_b, T* dwout_local,
                    const int32_t* targets, double dloss, HeadStash<T>* st, T* dx);

}  // namespace ptdp::runtime
