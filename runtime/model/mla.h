// Multi-latent attention (DeepSeek-V2 and V3; Megatron-Core's MLASelfAttention), the attention
// side of a layer whose model sets model.mla_kv_lora (docs/mla.md):
//
//   q  = up_q(norm(down_q(x)))                  [N][a/t][dh + rope]   (or x W_q, no query latent)
//   kv = up_kv(norm(down_kv(x)[:kv_lora]))      [N][a/t][dh + dv]: each head's key part, value
//   k_pe = down_kv(x)[kv_lora:]                 [N][rope]: one rotated key part for every head
//   k  = [kv's key part | k_pe]                 [N][a/t][dh + rope]
//   attention(rotate(q), rotate(k), v)          softmax scale 1 / sqrt(dh + rope)
//
// Under YaRN that scale is multiplied by mscale^2 (LayerArch::mla_softmax_factor), as
// Megatron-Core and transformers do; the layer folds the factor into q as the up projection
// writes it (and into q's gradient), so that the backends' attention keeps one scale.
//
// The down projections and the latents' norms are whole on every tensor rank (Megatron-Core's
// duplicated Linear) and run on the rank's own rows (its s/t under sequence parallelism); the up
// projections are column-parallel by heads and read the latents all-gathered. Their input
// gradients are partial sums over the tensor group, summed (all-reduced, or reduce-scattered
// under sequence parallelism) at the latents, so the down projections' and norms' gradients are
// a tensor rank's own rows' (grad_reduce.cc sums them over the group under sequence parallelism,
// as the LayerNorms').
//
// The attention itself is the packed multi-head attention every backend has
// (Ops::AttentionForward): its input [N][a/t][3][dh + rope] holds each head's query and key with
// the rotated part first (the order of a head's features does not change q.k) and the value padded
// with zeros to dh + rope, so that RoPE on the first `rope` features (RopeSpec::percent) turns
// exactly the rotated parts, and the output's padded columns are zero. The layer stashes q, k and v
// as the ledger lists them and builds that input again for the backward (index copies through
// MoePermuteRows and MoeUnpermuteAddRows, in blocks of gcd(dh, rope, dv) features).
#pragma once

#include <array>
#include <cstdint>

#include "core/status.h"
#include "runtime/model/gpt_layers.h"

namespace ptdp::runtime {

// The int32 block indices of the copies between the projections' layouts and the packed input, one
// per kind, each built on the host and uploaded the first time a layer asks for it and kept for
// the next (every MLA layer of a rank has the same shapes): LayerCtx::mla_indices. Without one
// the layer builds and uploads each index on every call. Tagged workspace; the ledger's bound
// with workspace counts them all (core/ledger.cc, MlaIndexBytes: N a/t (4 nn + 5 nr + 4 nv)
// int32, dh = nn g, rope = nr g, dv = nv g).
class MlaIndexCache {
 public:
  static constexpr int kKinds = 9;
  // The index of `kind` for shapes `shape` (tokens, heads, g) if kept, else nullptr.
  const Tensor* Find(int kind, const std::array<int64_t, 3>& shape) const;
  const Tensor& Keep(int kind, const std::array<int64_t, 3>& shape, Tensor index);

 private:
  std::array<int64_t, 3> shape_{};
  std::array<Tensor, kKinds> index_;
};

// From the stash's ln1_out (attn.q_down.input): the latents, their norms and the up projections
// into the stash's mla_* tensors (tagged `tag`).
Status MlaQkvForward(const LayerCtx& c, const LayerWeights& w, MemTag tag, LayerStash* st);
// Its second half: from the stash's latents and ln1_out, the up projections' q, k and v (the
// rotated key's kv_down rows again); recompute_modules mla_up_proj rebuilds them with it before
// the attention's backward (LayerCtx::redo_mla_up_proj).
Status MlaUpProjForward(const LayerCtx& c, const LayerWeights& w, MemTag tag, LayerStash* st);

// The attention's packed input [N][QkvWidth] (a transient) from the stash's q, k and v, rotated.
Result<Tensor> MlaAttentionInput(const LayerCtx& c, const LayerStash& st);

// RoPE of that input: the model's frequencies over the first mla_rope features of each head.
RopeSpec MlaRope(const LayerCtx& c);

// The attention's padded output [N][a/t][dh + rope] -> out [N][a/t][dv] (the projection's input),
// and back: a transient whose padded columns are zero (the output again for a fused backward,
// and the output gradient).
Status MlaOutputUnpad(const LayerCtx& c, ConstRef padded, TensorRef out);
Result<Tensor> MlaOutputPad(const LayerCtx& c, ConstRef out);

// The backward from the attention input's gradient `dqkv` (turned back by the RoPE's inverse;
// consumed) to *dln [R][h], the gradient at ln1's output summed over the tensor group; the
// projections' and latent norms' weight gradients accumulate.
Status MlaQkvBackward(const LayerCtx& c, const LayerWeights& w, const LayerGrads& g, LayerStash* st,
                      Tensor dqkv, Tensor* dln);

}  // namespace ptdp::runtime
