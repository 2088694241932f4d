// The ledger's FLOP counts (core/ledger.h: ModelIterationFlops, HardwareIterationFlops,
// PipelineRankFlops), apart from its byte counts in core/ledger.cc.
#include "core/ledger.h"
#include "core/shapes.h"

namespace ptdp {

namespace {

// One layer's forward GEMM FLOPs for `sequences` sequences: QKV 6 B s h^2, projection 2 B s h^2,
// MLP 2 x 2 B s h f, scores and scores.V 2 x 2 B s^2 h. A Llama-style layer: QKV 2 B s h (h + 2
// kv dh), projection 2 B s h^2, SwiGLU 3 x 2 B s h f, the same attention core (every query head
// scores all s keys); RMSNorm, rotary and the SwiGLU product are not GEMMs.
double LayerForwardFlops(const ModelSpec& m, double sequences) {
  const double s = m.seq_len, h = m.hidden, f = m.FfnHidden();
  if (m.IsGpt()) {  // the 2021 expression, so GPT figures stay bit for bit
    return 8 * sequences * s * h * h + 4 * sequences * s * h * f + 4 * sequences * s * s * h;
  }
  // a: the queries' width (h unless head_dim says otherwise), what the projection reads and the
  // attention core's products span.
  const double qkv = double(m.QkvOut()), mlp_matrices = m.swiglu ? 3 : 2, a = double(m.AttnWidth());
  // The MLP: a mixture's router ([T, E] logits), its k SwiGLU experts of moe_ffn_hidden and its
  // shared expert's SwiGLU of moe_shared_ffn_hidden (0 without one); else the dense MLP.
  const double E = m.moe_experts, k = m.moe_topk, f_moe = double(m.MoeFfnHidden());
  const double mlp =
      m.IsMoe() ? 2 * sequences * s * h * E +
                      2 * 3 * (k * f_moe + double(m.moe_shared_ffn_hidden)) * sequences * s * h
                : 2 * mlp_matrices * sequences * s * h * f;
  if (m.IsMla()) {
    // Multi-latent attention: its down and up projections (core/shapes.h MlaProjections, all of
    // a sequence's tokens on one rank), the projection from a dv, Q K^T over dqk and P V over dv.
    double projections = 0;
    for (const LinearShape& g : MlaProjections(m, 1, int64_t(s), false)) {
      projections += 2 * sequences * double(g.rows) * double(g.out) * double(g.in);
    }
    return projections + 2 * sequences * s * h * a + mlp +
           2 * sequences * s * s * (double(m.QkWidth()) + a);
  }
  return 2 * sequences * s * h * qkv + 2 * sequences * s * h * a + mlp + 4 * sequences * s * s * a;
}

// The transformer layers a pass runs: the model's and its multi-token prediction depths'.
double TransformerLayers(const ModelSpec& m) {
  return double(m.layers) + m.mtp_layers;
}

// The layers' attention cores counted as full ones: a windowed layer scores WindowPairShare of a
// full layer's query-key pairs (ModelSpec::window_size; never with MLA or prediction depths).
double AttentionLayers(const ModelSpec& m) {
  return TransformerLayers(m) - m.WindowLayersIn(0, m.layers) * (1.0 - m.WindowPairShare());
}

// Every layer's forward GEMM FLOPs: l of them, a mixture's dense layers at their own, and each
// multi-token prediction depth's layer at the last layer's; windowed layers' attention cores at
// their share of the pairs.
double LayersForwardFlops(const ModelSpec& m, double sequences) {
  const int dense = MixtureDenseLayersIn(m, 0, m.layers);
  double flops = (m.layers - dense) * LayerForwardFlops(m, sequences);
  if (m.window_size > 0) {
    const double s = m.seq_len, a = double(m.AttnWidth());
    flops -= (TransformerLayers(m) - AttentionLayers(m)) * 4 * sequences * s * s * a;
  }
  if (dense > 0) flops += dense * LayerForwardFlops(DenseLayerModel(m), sequences);
  if (m.mtp_layers > 0) {
    flops += m.mtp_layers * LayerForwardFlops(LayerModel(m, m.layers - 1), sequences);
  }
  return flops;
}

// The output layer's GEMMs, forward and backward (never recomputed), over the padded vocabulary.
double LogitsFlops(const ModelSpec& m, const ParallelConfig& c) {
  return 6.0 * double(c.global_batch) * m.seq_len * double(m.hidden) * double(PaddedVocab(m, c.tp));
}

}  // namespace

FlopCount ModelIterationFlops(const ModelSpec& m, const ParallelConfig& c) {
  const double B = double(c.global_batch);
  if (m.mtp_layers > 0) {
    // Each depth: its layer (in LayersForwardFlops), eh_proj [T, h] = [T, 2h] x [2h, h] and the
    // logits again.
    const double eh_proj = 2.0 * B * m.seq_len * 2.0 * double(m.hidden) * double(m.hidden);
    return 3.0 * LayersForwardFlops(m, B) + LogitsFlops(m, c) +
           m.mtp_layers * (3.0 * eh_proj + LogitsFlops(m, c));
  }
  if (m.HasDenseLayers() || m.window_size > 0) {
    return 3.0 * LayersForwardFlops(m, B) + LogitsFlops(m, c);
  }
  return 3.0 * m.layers * LayerForwardFlops(m, B) + LogitsFlops(m, c);
}

// What a fused attention kernel's backward runs again per layer: the scores Q K^T, 2 B s^2 h
// (FlashAttention-2, Dao 2023, section 3.1.2: the backward recomputes S = Q K^T from the stored
// log-sum-exp; 5 GEMMs backward against 2 forward, 2.5x the forward's FLOPs where the unfused
// backward's 4 GEMMs are 2x).
double FusedAttentionRecomputeFlops(const ModelSpec& m, const ParallelConfig& c) {
  if (!c.fused_attention) return 0;
  const double B = double(c.global_batch);
  return AttentionLayers(m) * 2.0 * B * m.seq_len * m.seq_len * double(m.QkWidth());
}

// What selective recomputation redoes (ParallelConfig::recompute_modules), per iteration:
// core_attn Q K^T and P V, 4 B s^2 a dh (dqk and dv under MLA); mla_up_proj the up projections,
// 2 B s (q_lora a dqk + kv_lora a (dqk_nope + dv)); mlp a dense layer's fc1 and fc2, 2 B s (h fc1 +
// f h), on the dense layers (a mixture's leading ones; not a prediction depth's); moe_act an
// elementwise pass, no FLOPs; moe a mixture layer's MLP forward, router, k experts and shared
// expert, 2 B s h (E + 3 (k f_moe + f_s)), on its mixture layers and prediction depths of that
// kind; shared_experts its shared expert's, 6 B s h f_s, on the same layers (once more with moe:
// Megatron-Core's checkpoint of the shared expert nests inside the block's). Fused attention's own
// backward recomputation on top (FusedAttentionRecomputeFlops), core_attn redone or not.
double SelectiveRecomputeFlops(const ModelSpec& m, const ParallelConfig& c) {
  const double B = double(c.global_batch), s = m.seq_len, layers = TransformerLayers(m);
  // The fused kernel's backward recomputes S = Q K^T whether or not its forward is redone.
  double flops = FusedAttentionRecomputeFlops(m, c);
  if (c.Recomputes(kRecomputeCoreAttn)) {
    flops += m.IsMla() ? layers * 2.0 * B * s * s * double(m.QkWidth() + m.AttnWidth())
                       : AttentionLayers(m) * 4.0 * B * s * s * double(m.AttnWidth());
  }
  if (c.Recomputes(kRecomputeMlaUpProj) && m.IsMla()) {
    const double a = m.heads;
    const double q_up = m.mla_q_lora > 0 ? double(m.mla_q_lora) * a * m.QkHeadDim() : 0.0;
    const double kv_up = double(m.mla_kv_lora) * a * double(m.HeadDim() + m.VHeadDim());
    flops += layers * 2.0 * B * s * (q_up + kv_up);
  }
  if (c.Recomputes(kRecomputeMlp)) {
    const double dense = m.IsMoe() ? MixtureDenseLayersIn(m, 0, m.layers) : layers;
    const double h = m.hidden;
    flops += dense * 2.0 * B * s * (h * double(m.Fc1Out()) + double(m.FfnHidden()) * h);
  }
  if (m.IsMoe() && (c.Recomputes(kRecomputeMoe) || c.Recomputes(kRecomputeSharedExperts))) {
    const double mixtures = m.layers - MixtureDenseLayersIn(m, 0, m.layers) +
                            (m.IsMoeLayer(m.layers - 1) ? m.mtp_layers : 0);
    const double h = m.hidden, shared = 6.0 * B * s * h * double(m.moe_shared_ffn_hidden);
    if (c.Recomputes(kRecomputeMoe)) {
      const double routed = 2.0 * B * s * h * m.moe_experts +
                            6.0 * B * s * h * double(m.moe_topk) * double(m.MoeFfnHidden());
      flops += mixtures * (routed + shared);
    }
    if (c.Recomputes(kRecomputeSharedExperts)) flops += mixtures * shared;
  }
  return flops;
}

FlopCount HardwareIterationFlops(const ModelSpec& m, const ParallelConfig& c) {
  const double B = double(c.global_batch);
  switch (c.recompute) {
    case Recompute::kNone:
      return ModelIterationFlops(m, c) + FusedAttentionRecomputeFlops(m, c);
    case Recompute::kFull:
      return ModelIterationFlops(m, c) + LayersForwardFlops(m, B) +
             FusedAttentionRecomputeFlops(m, c);
    case Recompute::kSelective:
      return ModelIterationFlops(m, c) + SelectiveRecomputeFlops(m, c);
  }
  return 0;
}

// The iteration's FLOPs (HardwareIterationFlops, the one count) split by where they run: each
// layer's share on the rank holding it, the logits on the last stage; a rank computes for B/d
// sequences over t tensor ranks.
FlopCount PipelineRankFlops(const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  if (m.mtp_layers > 0) {  // the main model's share, and the depths' all on the head's rank
    ModelSpec main = m;
    main.mtp_layers = 0;
    const double depths = HardwareIterationFlops(m, c) - HardwareIterationFlops(main, c);
    return PipelineRankFlops(main, c, pp_rank) +
           (pp_rank == HeadRank(c) ? depths / (double(c.dp) * c.cp * c.tp) : 0.0);
  }
  const double logits = LogitsFlops(m, c);
  double flops = 0;
  if (m.window_size > 0) {  // a full layer's share, less what each windowed layer on the rank saves
    ModelSpec full = m;
    full.window_size = full.window_full_every = 0;
    const double full_flops = HardwareIterationFlops(full, c) - logits;
    const int windowed = m.WindowLayersIn(0, m.layers);
    const double saved =
        windowed > 0 ? (full_flops + logits - HardwareIterationFlops(m, c)) / windowed : 0.0;
    for (int chunk = 0; chunk < c.vp; ++chunk) {
      const LayerRange layers = ChunkLayers(m, c, pp_rank, chunk);
      flops += double(layers.size()) * full_flops / m.layers -
               m.WindowLayersIn(layers.begin, layers.end) * saved;
      if (HoldsHead(c, pp_rank, chunk)) flops += logits;
    }
    return flops / (double(c.dp) * c.cp * c.tp);
  }
  const double per_layer = (HardwareIterationFlops(m, c) - logits) / m.layers;
  if (m.HasDenseLayers()) {
    // Each kind's share: the iteration's FLOPs of a model of that kind alone, per layer.
    const ModelSpec dense = DenseLayerModel(m);
    const int dense_count = MixtureDenseLayersIn(m, 0, m.layers);
    const double per_moe_layer =
        (HardwareIterationFlops(m, c) - logits -
         (HardwareIterationFlops(dense, c) - logits) * dense_count / m.layers) /
        (m.layers - dense_count);
    const double per_dense_layer = (HardwareIterationFlops(dense, c) - logits) / m.layers;
    for (int chunk = 0; chunk < c.vp; ++chunk) {
      const int dense_layers = ChunkDenseLayers(m, c, pp_rank, chunk);
      flops += (ChunkLayers(m, c, pp_rank, chunk).size() - dense_layers) * per_moe_layer +
               dense_layers * per_dense_layer;
      if (HoldsHead(c, pp_rank, chunk)) flops += logits;
    }
    return flops / (double(c.dp) * c.cp * c.tp);
  }
  for (int chunk = 0; chunk < c.vp; ++chunk) {
    flops += ChunkLayers(m, c, pp_rank, chunk).size() * per_layer;
    if (HoldsHead(c, pp_rank, chunk)) flops += logits;
  }
  return flops / (double(c.dp) * c.cp * c.tp);
}

}  // namespace ptdp
