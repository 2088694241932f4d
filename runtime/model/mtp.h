// Multi-token prediction (DeepSeek-V3, GLM-4.5; Megatron-Core's --mtp-num-layers): after the
// model's head, each depth k = 1, ..., mtp_layers predicts the token k + 1 places on. Depth k
// reads the hidden state the head before it normed (the model's final norm's output, then the
// previous depth's), and the embedding of the tokens k places on, and runs
//   x = eh_proj([enorm(embed(tokens << k)); hnorm(hidden)]),  y = layer(x),
//   loss_k = cross-entropy(output(final_norm(y)), targets << k)
// where << k moves a sequence k places to the left; the last k positions have no target and are
// left out of the loss (Megatron-Core's roll_tensor and loss mask). The embedding and the output
// matrix are the model's (on a head's stage without the embedding, its tied copy
// mtp.embedding_copy); eh_proj is column-parallel ([h/t][2h]), its output gathered over the
// tensor group (and scattered to this rank's rows under sequence parallelism); the layer is of
// the model's last layer's kind. The objective adds mtp_loss_scale / mtp_layers times each
// depth's mean token loss. Everything runs on the head's stage (core/shapes.h AppendHead,
// MtpActivations), in the microbatch's forward after the head and in its backward before it.
#pragma once

#include "runtime/model/gpt_layers.h"

namespace ptdp::runtime {

struct MtpWeights {
  ConstRef enorm_w, enorm_b, hnorm_w, hnorm_b;
  ConstRef eh_proj_local;  // [h/t][2h]
  LayerWeights layer;
  HeadWeights head;    // the depth's final norm, the model's output matrix
  ConstRef wte_local;  // the word embedding's vocabulary shard
};
struct MtpGrads {
  TensorRef enorm_w, enorm_b, hnorm_w, hnorm_b;
  TensorRef eh_proj_local;
  LayerGrads layer;
  HeadGrads head;
  TensorRef wte_local;
};

// One depth's stash per microbatch (core/shapes.h MtpActivations, entry by entry).
struct MtpStash {
  EmbeddingStash embedding;  // embedding.tokens: the inputs k places on (the caller's)
  Tensor e;                  // mtp.enorm.input [R][h]: the embedding's output
  Tensor e_mean, e_rstd;     // mtp.enorm.mean/rstd
  Tensor h_mean, h_rstd;     // mtp.hnorm.mean/rstd (its input is the previous head's ln_out)
  Tensor eh_in;              // mtp.eh_proj.input [R][2h]: enorm's row beside hnorm's
  LayerStash layer;
  HeadStash head;  // output.targets: the targets k places on, -1 where there is none (caller's)
};

// REQUIRES: st->embedding.tokens and st->head.targets hold the depth's inputs and targets.
// `hidden` [R][h]: the output layer's input of the head before (kept until MtpBackward);
// `layer`: the global index of the depth's layer (model.layers + depth: its dropout sites and
// router bias); `recompute`: the layer keeps only its input, as the model's do under full
// recomputation. The depth's token losses are added to loss_sum (fp64 device scalar).
Status MtpForward(const LayerCtx& c, const MtpWeights& w, int layer, bool recompute, MtpStash* st,
                  ConstRef hidden, TensorRef loss_sum);
// dloss: the gradient of the objective with respect to each of the depth's token losses;
// d_out_extra: the next depth's gradient of this depth's ln_out (or empty). *dhidden receives the
// gradient of `hidden` [R][h] (a transient, allocated once the depth's transients are gone, so
// that its backward holds no more than the head's and a layer's: core/ledger.h). Frees the stash.
Status MtpBackward(const LayerCtx& c, const MtpWeights& w, const MtpGrads& g, int layer,
                   bool recompute, double dloss, MtpStash* st, ConstRef hidden,
                   ConstRef d_out_extra, Tensor* dhidden);

}  // namespace ptdp::runtime
