#include "costmodel/layer_cost.h"

#include <algorithm>

#include "core/ledger.h"
#include "core/shapes.h"
#include "costmodel/attention_rate.h"
#include "costmodel/gemm.h"

namespace ptdp::costmodel {

Seconds MemoryBoundTime(const HardwareProfile& hw, double bytes, int kernels) {
  // On a share of the device the ranks stream at once: each at its share of the bandwidth.
  return hw.DeviceCopies() * bytes / GBpsToBytesPerSecond(hw.memory_bound_GBps.value) +
         kernels * hw.kernel_launch_us.value * kUs;
}

namespace {

// The layer as Megatron-Core runs it on Transformer Engine (SoftwareProfile::te_layer; TE v1.8,
// the NGC 24.07 release beside Megatron-Core r0.8.0), against the 2021 terms above:
// - the QKV bias runs in the GEMMs' epilogues: forward `tex.gemm(..., bias=bias, use_bias=...)`
//   and the bias gradient from the weight-gradient GEMM (`grad=True, use_bias=ctx.use_bias`),
//   TransformerEngine v1.8 transformer_engine/pytorch/module/layernorm_linear.py lines 269-279
//   and 636-646 (Megatron-Core's linear_qkv has skip_bias_add=False, megatron/core/transformer/
//   attention.py line 387 at core_r0.8.0): no bias pass either way;
// - each LayerNorm's backward is one `tex.layernorm_bwd` (layernorm_linear.py line 673: dx, dgamma
//   and dbeta from one read of dy and x, the weight gradients as per-block partial sums): 3e per
//   element, not apex's 5e;
// - autograd adds the two gradients that meet at each LayerNorm's input (the residual's and the
//   LayerNorm's; layernorm_linear.py lines 668-670 fuse that add only with
//   return_layernorm_output, which Megatron-Core leaves False): read 2e, write e, once per
//   LayerNorm (the 2021 stack runs the same add; docs/cost_model.md);
// - fused attention runs in the bshd format: --no-rope-fusion is opt-out (megatron/training/
//   arguments.py lines 1130-1133), and with apply_rope_fusion TEDotProductAttention sets
//   qkv_format 'bshd' whatever the position embedding (megatron/core/transformer/custom_layers/
//   transformer_engine.py lines 515-516), copies Q, K and V transposed (lines 526-527: 2e per
//   element of the T qkv/t, 3 kernels) and returns the output transposed (line 564), which the
//   projection's prepare_forward copies (TE module/base.py line 606: the 2021 context copy's
//   bytes). Backward: the output gradient made contiguous (TE attention.py line 3719: 2e T h/t)
//   and dQ, dK, dV joined by torch.split's backward, a cat (attention.py line 519: 2e T qkv/t).
void AdjustForTransformerEngine(const ModelSpec& m, double e, double T, double Th_seq, int tp,
                                bool fused_attention, LayerMemoryBytes* b) {
  if (m.HasQkvBias()) {  // its bytes are left out in LayerMemoryBytesOf (qkv_bias_pass)
    b->forward_kernels -= 1;
    b->backward_kernels -= 1;
  }
  b->backward -= 2 * (2 * e * Th_seq);  // LayerNorm backward: 3e per element, not 5e
  b->backward += 2 * (3 * e * Th_seq);  // the residual gradient added to the LayerNorm's
  b->backward_kernels += 2;
  if (fused_attention) {
    const double qkv = T * double(m.QkvOut()) / tp, context = T * double(m.AttnWidth()) / tp;
    b->forward += 2 * e * qkv;  // Q, K, V transposed to bshd
    b->forward_kernels += 3;
    b->backward += 2 * e * context + 2 * e * qkv;  // dO made contiguous; split's cat
    b->backward_kernels += 2;
  }
}

}  // namespace

LayerMemoryBytes LayerMemoryBytesOf(const ModelSpec& m, int tp, int mbs, int act_bytes,
                                    bool sequence_parallel, bool fused_attention,
                                    bool gelu_by_elements, bool gelu_epilogue,
                                    bool bias_grad_by_rate, bool te_layer) {
  const double e = act_bytes, T = double(mbs) * double(m.seq_len), h = double(m.hidden),
               f = double(m.FfnHidden()), s = double(m.seq_len);
  // LayerNorm, dropout and residual act on all T h, or on T h / t with sequence parallelism.
  const double Th_seq = sequence_parallel ? T * h / tp : T * h;
  const double S = double(mbs) * double(m.heads) / tp * s * s;  // attention scores
  // A Llama-style layer: no bias adds but Qwen2's QKV bias, a residual add without mask or bias,
  // SwiGLU (forward reads gate and up, writes f; backward reads dy, gate, up, writes their two
  // gradients) and the rotation of Q and K both ways. Each is the GPT term for a GPT.
  const double qkv = double(m.QkvOut()), kv = double(m.KvHeads()) * double(m.HeadDim());
  const double a = double(m.AttnWidth());  // the attention's output width (h unless head_dim)
  // On Transformer Engine the QKV bias runs in the GEMMs' epilogues (AdjustForTransformerEngine).
  const bool qkv_bias_pass = m.HasQkvBias() && !te_layer;
  const double qkv_bias_fwd = qkv_bias_pass ? 2 * e * T * qkv / tp : 0.0;
  // A bias gradient priced at its measured rate (BiasGradSeconds) moves no bytes here.
  const double qkv_bias_bwd = qkv_bias_pass && !bias_grad_by_rate ? e * T * qkv / tp : 0.0;
  const double residual = m.IsGpt() ? 3 * e + 1 : 3 * e;  // bias-dropout-add or a plain add
  const double residual_bwd = m.IsGpt() && bias_grad_by_rate ? 2 * e + 1 : residual;
  // The GeLU priced by its elements (GeluPassTime) moves no bytes here: 0 adds exactly; run in the
  // GEMMs' epilogues (GeluEpilogueTime), only the fc1 bias gradient's e per element is left.
  const double fc1_bias_bwd = bias_grad_by_rate ? 0 : 1;
  // A mixture of experts' MLP is priced apart (costmodel/moe_cost.h): no dense activation here.
  const double act_fwd = m.IsMoe()                           ? 0
                         : gelu_by_elements || gelu_epilogue ? 0
                         : m.swiglu                          ? 3
                                                             : 2,
               act_bwd = m.IsMoe() || gelu_by_elements ? 0
                         : gelu_epilogue               ? fc1_bias_bwd
                         : m.swiglu                    ? 5
                                                       : 3 + fc1_bias_bwd;
  // Under multi-latent attention RoPE turns the queries' rotated a dr / t features and the one
  // shared key part's dr, and Q, K and V are assembled (concatenated, the key part copied to every
  // head, V made contiguous: read and write T qkv / t), split again backward.
  const double rope = double(m.mla_rope_dim);
  const double rotary = m.IsMla()  ? 2 * e * T * (m.heads * rope / tp + rope) + 2 * e * T * qkv / tp
                        : m.rotary ? 2 * e * T * (a + kv) / tp
                                   : 0.0;
  // qk-norm: an RMSNorm over the queries' and the keys' T (a + kv) / t features (multi-latent
  // attention: over its two latents, on the rank's tokens), read and written forward; backward
  // 5e as apex's LayerNorm, 3e on Transformer Engine (AdjustForTransformerEngine's reading of its
  // norm backward).
  const double latent_rows = sequence_parallel ? T / tp : T;
  const double qk = !m.qk_norm  ? 0.0
                    : m.IsMla() ? latent_rows * double(m.mla_q_lora + m.mla_kv_lora)
                                : T * (a + kv) / tp;
  const double qk_bwd = te_layer ? 3 : 5;
  LayerMemoryBytes b;
  b.forward = 2 * (2 * e * Th_seq)        // LayerNorm x2: read x, write y
              + qkv_bias_fwd              // QKV bias add (F.linear on a 3-D input: matmul, then +=)
              + 2 * e * S                 // fused scale-mask-softmax
              + (2 * e + 1) * S           // attention dropout: read, write, mask
              + 2 * e * T * a / tp        // context permute(...).contiguous()
              + 2 * residual * Th_seq     // bias-dropout-add x2: x, residual in; out, mask
              + act_fwd * e * T * f / tp  // bias-GeLU (SwiGLU)
              + rotary                    // RoPE on Q and K
              + 2 * e * qk;               // qk-norm
  b.forward_kernels = 9 - (m.HasQkvBias() ? 0 : 1) + (m.rotary ? 1 : 0) - (gelu_epilogue ? 1 : 0) +
                      (m.qk_norm ? 2 : 0);
  b.backward = 2 * (5 * e * Th_seq)  // LayerNorm x2: dx (dy, x in, dx out); gamma/beta (dy, x)
               + qkv_bias_bwd        // QKV bias gradient (reduce over tokens)
               + 3 * e * S           // softmax: dy, y in; dx out
               + (2 * e + 1) * S     // dropout: dy, mask in; dx out
               + 2 * residual_bwd * Th_seq  // bias-dropout-add x2: dx = dy mask; bias grad
               + act_bwd * e * T * f / tp   // bias-GeLU: dy, x in, dx out; bias grad reduce
               + rotary                     // RoPE's backward on dQ and dK
               + qk_bwd * e * qk;           // qk-norm's backward
  b.backward_kernels = 13 - (m.HasQkvBias() ? 0 : 1) + (m.rotary ? 1 : 0) + (m.qk_norm ? 2 : 0);
  if (fused_attention) {
    // The fused kernel keeps the scores on chip: no softmax or dropout pass over S.
    b.forward -= 2 * e * S + (2 * e + 1) * S;
    b.backward -= 3 * e * S + (2 * e + 1) * S;
    b.forward_kernels -= 2;
    b.backward_kernels -= 2;
  }
  if (te_layer) AdjustForTransformerEngine(m, e, T, Th_seq, tp, fused_attention, &b);
  return b;
}

namespace {

// The whole device's rate (FusedAttentionTflops below takes the rank's share of it).
double DeviceAttentionTflops(const ModelSpec& m, const HardwareProfile& hw) {
  const AttentionTable& table = hw.attention_table;
  if (!table.empty()) {
    // The rate at the model's own shape. With dropout: the table's dropout rates where every
    // point has one, else the one-shape dropout figure (a rate without dropout would leave out
    // what the mask costs: 257 against 417.5 TFLOP/s on our H200, docs/validation-h100.md), else
    // the table's rates without dropout.
    const double s = double(m.seq_len), d = double(m.QkHeadDim());
    if (m.dropout > 0 && table.HasDropout()) return AttentionTableTflops(table, s, d, true);
    if (m.dropout > 0 && hw.attention_dropout_tflops.value > 0) {
      return hw.attention_dropout_tflops.value;
    }
    return AttentionTableTflops(table, s, d, false);
  }
  if (m.dropout > 0 && hw.attention_dropout_tflops.value > 0) {
    return hw.attention_dropout_tflops.value;
  }
  return hw.attention_tflops.value;
}

}  // namespace

double FusedAttentionTflops(const ModelSpec& m, const HardwareProfile& hw) {
  return DeviceAttentionTflops(m, hw) / hw.DeviceCopies();
}

bool GeluPricedByElements(const ModelSpec& m, const HardwareProfile& hw) {
  return !m.swiglu && !m.squared_relu && hw.gelu_forward_Gelems_per_s.value > 0 &&
         hw.gelu_backward_Gelems_per_s.value > 0;
}

GeluPass GeluPassTime(const ModelSpec& m, const HardwareProfile& hw, int tp, int mbs) {
  const double elements = double(mbs) * double(m.seq_len) * double(m.FfnHidden()) / tp;
  const double copies = hw.DeviceCopies();  // a share of the device: its share of the rate
  return {copies * elements / (hw.gelu_forward_Gelems_per_s.value * 1e9),
          copies * elements / (hw.gelu_backward_Gelems_per_s.value * 1e9)};
}

bool GeluPricedByEpilogue(const ModelSpec& m, const HardwareProfile& hw, bool gelu_gemm_epilogue) {
  return gelu_gemm_epilogue && !m.swiglu && !m.squared_relu &&
         hw.gelu_epilogue_Gelems_per_s.value > 0 && hw.dgelu_epilogue_Gelems_per_s.value > 0;
}

Seconds GeluEpilogueSeconds(const HardwareProfile& hw, double elements, bool backward) {
  const double rate =
      backward ? hw.dgelu_epilogue_Gelems_per_s.value : hw.gelu_epilogue_Gelems_per_s.value;
  return rate > 0 ? hw.DeviceCopies() * elements / (rate * 1e9) : 0.0;
}

GeluPass GeluEpilogueTime(const ModelSpec& m, const HardwareProfile& hw, int tp, int mbs) {
  const double elements = double(mbs) * double(m.seq_len) * double(m.FfnHidden()) / tp;
  return {GeluEpilogueSeconds(hw, elements, false), GeluEpilogueSeconds(hw, elements, true)};
}

bool BiasGradPricedByRate(const HardwareProfile& hw) {
  return hw.bias_grad_Gelems_per_s.value > 0;
}

Seconds BiasGradSeconds(const HardwareProfile& hw, double elements) {
  const double rate = hw.bias_grad_Gelems_per_s.value;
  return rate > 0 ? hw.DeviceCopies() * elements / (rate * 1e9) : 0.0;
}

double LayerBiasGradElements(const ModelSpec& m, int tp, int mbs, bool sequence_parallel,
                             bool te_layer) {
  const double T = double(mbs) * double(m.seq_len), h = double(m.hidden);
  const double qkv = m.HasQkvBias() && !te_layer ? T * double(m.QkvOut()) / tp : 0.0;
  const double proj_fc2 = m.IsGpt() ? 2 * (sequence_parallel ? T * h / tp : T * h) : 0.0;
  const double fc1 = m.swiglu ? 0.0 : T * double(m.FfnHidden()) / tp;
  return qkv + proj_fc2 + fc1;
}

PieceCost FusedAttentionCost(const ModelSpec& m, const HardwareProfile& hw, int tp, int mbs) {
  const int64_t s = m.seq_len, dh = m.HeadDim(), heads_batch = int64_t(mbs) * m.heads / tp;
  PieceCost c;
  const double tflops = FusedAttentionTflops(m, hw);
  if (tflops > 0) {
    // Q K^T and P V: 2 GEMMs of 2 s^2 dh FLOPs per head forward, 5 backward (Dao 2023); a causal
    // kernel runs half of them, which is how attention_tflops counts.
    const double per_gemm = 2.0 * double(heads_batch) * double(s) * double(s) * double(dh);
    const double rate = tflops * 1e12;
    if (m.IsMla()) {  // Q K^T over dqk, P V over dv: forward one each, backward 3 and 2
      const double qk = 2.0 * double(heads_batch) * double(s) * double(s) * double(m.QkHeadDim());
      const double pv = 2.0 * double(heads_batch) * double(s) * double(s) * double(m.VHeadDim());
      c.forward.gemm = 0.5 * (qk + pv) / rate;
      c.backward.gemm = 0.5 * (3 * qk + 2 * pv) / rate;
      return c;
    }
    c.forward.gemm = 0.5 * 2 * per_gemm / rate;
    c.backward.gemm = 0.5 * 5 * per_gemm / rate;
    return c;
  }
  const int64_t dqk = m.QkHeadDim(), dv = m.VHeadDim();  // dh both without MLA
  const Seconds scores = GemmTime(hw, s, s, dqk, heads_batch);
  c.forward.gemm = scores + GemmTime(hw, s, dv, s, heads_batch);
  c.backward.gemm = GemmBackwardTime(hw, s, s, dqk, heads_batch) +
                    GemmBackwardTime(hw, s, dv, s, heads_batch) + scores;
  return c;
}

double ContextRingSendBytes(const ModelSpec& shard, Precision precision, int tp, int mbs) {
  return double(mbs) * double(shard.seq_len) * double(ContextRingKvFeatures(shard) / tp) *
         ComputeBytes(precision);
}

void AddContextRing(const ModelSpec& shard, const HardwareProfile& hw, Precision precision, int tp,
                    int mbs, int cp, const LinkCost& ring, PieceCost* layer) {
  if (cp < 2) return;
  const PieceCost block = FusedAttentionCost(shard, hw, tp, mbs);
  layer->forward.gemm += (cp - 1) * block.forward.gemm;
  layer->backward.gemm += (cp - 1) * block.backward.gemm;
  const Bytes kv = Bytes(ContextRingSendBytes(shard, precision, tp, mbs));
  const Seconds one = ring.Time(kv), two = ring.Time(2 * kv);
  auto exposed = [](Seconds send, Seconds beside) { return std::max(0.0, send - beside); };
  layer->forward.tp_comm += (cp - 1) * exposed(one, block.forward.gemm);
  layer->backward.tp_comm +=
      exposed(one, block.backward.gemm) + (cp - 2) * exposed(two, block.backward.gemm) + one;
  const ContextRingBytes merge = ContextRingMergeBytes(shard, precision, tp, mbs, cp);
  layer->forward.memory += MemoryBoundTime(hw, merge.forward, cp + 1);
  layer->backward.memory += MemoryBoundTime(hw, merge.backward, 3 * cp);
}

void AddContextCollectives(const ModelSpec& shard, const HardwareProfile& hw, Precision precision,
                           int tp, int mbs, int cp, const LinkCost& ring, PieceCost* layer) {
  if (cp < 2) return;
  const PieceCost block = FusedAttentionCost(shard, hw, tp, mbs);
  layer->forward.gemm += (cp - 1) * block.forward.gemm;
  layer->backward.gemm += (cp - 1) * block.backward.gemm;
  const Seconds one = ring.Time(Bytes(ContextRingSendBytes(shard, precision, tp, mbs)));
  layer->forward.tp_comm += (cp - 1) * one;
  layer->backward.tp_comm += 2 * cp * one;
}

ContextRingBytes ContextRingMergeBytes(const ModelSpec& shard, Precision precision, int tp, int mbs,
                                       int cp) {
  const double e = ComputeBytes(precision);
  const double out = double(mbs) * double(shard.seq_len) * double(shard.AttnWidth()) / tp;
  const double kv = ContextRingSendBytes(shard, precision, tp, mbs) / e;  // elements
  // A causal rank's later steps cover all its queries or only the second chunk's: 3/4 on average.
  const double later = 0.75 * (cp - 1);
  ContextRingBytes b;
  b.forward = out * ((e + 4) + later * (e + 8) + (4 + e));
  b.backward = 3 * e * (out * (1 + later) + kv * cp);
  return b;
}

double LinearGemmScale(const HardwareProfile& hw, Precision precision) {
  if (precision != Precision::kFp8) return 1.0;
  if (hw.fp8_gemm_speedup.value > 0) return 1.0 / hw.fp8_gemm_speedup.value;  // measured
  return hw.peak_tflops.value / hw.fp8_peak_tflops.value;  // same fraction of peak (assumed)
}

Fp8CastBytes Fp8CastBytesOf(const ModelSpec& m, int tp, int mbs, bool sequence_parallel) {
  const double T = double(mbs) * double(m.seq_len), h = double(m.hidden), f = double(m.FfnHidden()),
               qkv = double(m.QkvOut()), fc1 = double(m.Fc1Out());
  // A mixture of experts casts its experts' operands apart (costmodel/moe_cost.h): QKV and the
  // projection here.
  const double mlp = m.IsMoe() ? 0.0 : 1.0;
  const double a = double(m.AttnWidth());
  // QKV's input, output gradient and weight: multi-latent attention's four projections'.
  double qkv_input = T * h, qkv_grad = T * qkv / tp, qkv_weight = 0;
  if (m.IsMla()) {
    qkv_input = qkv_grad = qkv_weight = 0;
    for (const LinearShape& g : MlaProjections(m, tp, int64_t(T), sequence_parallel)) {
      qkv_input += double(g.rows) * double(g.in);
      qkv_grad += double(g.rows) * double(g.out);
      qkv_weight += double(g.out) * double(g.in);
    }
  }
  const double inputs = qkv_input + T * a / tp + mlp * (T * h + T * f / tp);  // QKV, proj, fc1, fc2
  const double output_grads = qkv_grad + T * h + mlp * (T * fc1 / tp + T * h);  // the same
  const double weights = !m.IsMoe()  ? double(LayerParameterCounts(m, tp).linear_weight_elements)
                         : m.IsMla() ? qkv_weight + a * h / tp
                                     : double(qkv * h + a * h) / tp;
  Fp8CastBytes b;
  // cast-transpose: read bf16 (2), write the FP8 copy (1) and its transpose (1).
  b.forward = 4 * inputs + 4 * weights;
  b.backward = 4 * output_grads;
  return b;
}

QkvGemmTimes QkvGemms(const ModelSpec& m, const HardwareProfile& hw, int64_t tokens, int tp,
                      bool sequence_parallel) {
  if (!m.IsMla()) {
    const int64_t n = m.QkvOut() / tp, k = m.hidden;
    return {GemmTime(hw, tokens, n, k), GemmBackwardTime(hw, tokens, n, k),
            GemmBackwardWeightTime(hw, tokens, n, k)};
  }
  QkvGemmTimes t;
  for (const LinearShape& g : MlaProjections(m, tp, tokens, sequence_parallel)) {
    t.forward += GemmTime(hw, g.rows, g.out, g.in);
    t.backward += GemmBackwardTime(hw, g.rows, g.out, g.in);
    t.weight += GemmBackwardWeightTime(hw, g.rows, g.out, g.in);
  }
  return t;
}

PieceCost TransformerLayerCost(const ModelSpec& m, const HardwareProfile& hw, Precision precision,
                               int tp, int mbs, Seconds tp_allreduce_s, bool sequence_parallel,
                               bool fused_attention, bool gelu_gemm_epilogue, bool te_layer) {
  const int64_t T = int64_t(mbs) * m.seq_len, h = m.hidden, f = m.FfnHidden(), s = m.seq_len;
  const int64_t heads_batch = int64_t(mbs) * m.heads / tp;
  // fc1's output features: f, or 2f with SwiGLU (gate and up in one GEMM, as Megatron-LM runs
  // them); QKV's are QkvGemms'.
  const int64_t fc1 = m.Fc1Out();
  const int64_t a = m.AttnWidth();  // the projection's input (h unless head_dim says otherwise)
  // fp8: the Linears' GEMMs at the FP8 rate (1 otherwise, which leaves every product exact).
  const double lin = LinearGemmScale(hw, precision);
  // A mixture of experts runs its experts in place of fc1 and fc2 (costmodel/moe_cost.h, added by
  // the caller): their terms here are 0; a dense layer's `mlp` is `lin` itself.
  const double mlp = m.IsMoe() ? 0.0 : lin;
  // The QKV projection's GEMMs (multi-latent attention's four, QkvGemms).
  const QkvGemmTimes qkv_gemm = QkvGemms(m, hw, T, tp, sequence_parallel);
  const int64_t dqk = m.QkHeadDim(), dv = m.VHeadDim();  // dh both without MLA
  PieceCost c;
  // The unfused sums keep their 2021 order, so Table 1's figures stay bit for bit.
  c.forward.gemm = lin * qkv_gemm.forward + GemmTime(hw, s, s, dqk, heads_batch) +
                   GemmTime(hw, s, dv, s, heads_batch) + lin * GemmTime(hw, T, h, a / tp) +
                   mlp * GemmTime(hw, T, fc1 / tp, h) + mlp * GemmTime(hw, T, h, f / tp);
  c.backward.gemm =
      lin * qkv_gemm.backward + GemmBackwardTime(hw, s, s, dqk, heads_batch) +
      GemmBackwardTime(hw, s, dv, s, heads_batch) + lin * GemmBackwardTime(hw, T, h, a / tp) +
      mlp * GemmBackwardTime(hw, T, fc1 / tp, h) + mlp * GemmBackwardTime(hw, T, h, f / tp);
  if (fused_attention) {
    const PieceCost core = FusedAttentionCost(m, hw, tp, mbs);
    c.forward.gemm = lin * qkv_gemm.forward + core.forward.gemm + lin * GemmTime(hw, T, h, a / tp) +
                     mlp * GemmTime(hw, T, fc1 / tp, h) + mlp * GemmTime(hw, T, h, f / tp);
    c.backward.gemm =
        lin * qkv_gemm.backward + core.backward.gemm + lin * GemmBackwardTime(hw, T, h, a / tp) +
        mlp * GemmBackwardTime(hw, T, fc1 / tp, h) + mlp * GemmBackwardTime(hw, T, h, f / tp);
  }
  // The weight-gradient GEMMs, summed in the backward's order with 0 for the attention products
  // (rounded addition is monotone, so the sum never exceeds the backward's).
  c.weight_grad.gemm = lin * qkv_gemm.weight + 0.0 + 0.0 +
                       lin * GemmBackwardWeightTime(hw, T, h, a / tp) +
                       mlp * GemmBackwardWeightTime(hw, T, fc1 / tp, h) +
                       mlp * GemmBackwardWeightTime(hw, T, h, f / tp);
  // The GeLU in the GEMMs' epilogues, where the stack runs it there and they were measured, else
  // by its elements where the profile has the pass's rates, else by its bytes.
  const bool gelu_epilogue = GeluPricedByEpilogue(m, hw, gelu_gemm_epilogue);
  const bool gelu_by_elements = !gelu_epilogue && GeluPricedByElements(m, hw);
  const bool bias_grad_by_rate = BiasGradPricedByRate(hw);
  const LayerMemoryBytes mb =
      LayerMemoryBytesOf(m, tp, mbs, ComputeBytes(precision), sequence_parallel, fused_attention,
                         gelu_by_elements, gelu_epilogue, bias_grad_by_rate, te_layer);
  c.forward.memory = MemoryBoundTime(hw, mb.forward, mb.forward_kernels);
  c.backward.memory = MemoryBoundTime(hw, mb.backward, mb.backward_kernels);
  if (gelu_by_elements) {
    const GeluPass gelu = GeluPassTime(m, hw, tp, mbs);
    c.forward.memory += gelu.forward;
    c.backward.memory += gelu.backward;
  }
  if (gelu_epilogue) {
    const GeluPass gelu = GeluEpilogueTime(m, hw, tp, mbs);
    c.forward.memory += gelu.forward;
    c.backward.memory += gelu.backward;
  }
  if (bias_grad_by_rate) {
    c.backward.memory +=
        BiasGradSeconds(hw, LayerBiasGradElements(m, tp, mbs, sequence_parallel, te_layer));
  }
  if (precision == Precision::kFp8) {
    // Transformer Engine's casts (4 inputs and 4 weights forward, 4 output gradients backward)
    // and one amax-and-scale update per layer forward (a launch; its bytes are negligible).
    const Fp8CastBytes cast = Fp8CastBytesOf(m, tp, mbs, sequence_parallel);
    c.forward.memory += MemoryBoundTime(hw, cast.forward, 4 + 4 + 1);
    c.backward.memory += MemoryBoundTime(hw, cast.backward, 4);
  }
  c.forward.tp_comm = 2 * tp_allreduce_s;
  c.backward.tp_comm = 2 * tp_allreduce_s;
  return c;
}

ComputeBreakdown AttentionCoreForwardCost(const ModelSpec& m, const HardwareProfile& hw,
                                          Precision precision, int tp, int mbs) {
  const int64_t s = m.seq_len, heads_batch = int64_t(mbs) * m.heads / tp;
  const double e = ComputeBytes(precision), S = double(heads_batch) * double(s) * double(s);
  ComputeBreakdown c;
  c.gemm = GemmTime(hw, s, s, m.QkHeadDim(), heads_batch) +
           GemmTime(hw, s, m.VHeadDim(), s, heads_batch);
  c.memory = MemoryBoundTime(hw, 2 * e * S + (2 * e + 1) * S, 2);  // softmax, dropout
  return c;
}

PieceCost EmbeddingCost(const ModelSpec& m, const HardwareProfile& hw, Precision precision, int tp,
                        int mbs, Seconds tp_reduce_s, bool sequence_parallel) {
  const double e = ComputeBytes(precision), T = double(mbs) * double(m.seq_len),
               h = double(m.hidden);
  // The lookup writes all T h; with sequence parallelism its output is reduce-scattered and the
  // position add and dropout act on T h / t.
  const double Th_seq = sequence_parallel ? T * h / tp : T * h;
  PieceCost c;
  // Gather word rows, add positions (read 2, write 1; none with rotary embeddings), dropout (read,
  // write, mask).
  const double positions = m.rotary ? 0.0 : 3 * e * Th_seq;
  c.forward.memory = MemoryBoundTime(hw, e * T * h + positions + (2 * e + 1) * Th_seq, 3);
  // Dropout and add backward, then scatter-add into the word and position gradients.
  c.backward.memory = MemoryBoundTime(hw, (2 * e + 1) * Th_seq + 2 * 2 * e * T * h, 3);
  c.forward.tp_comm = tp > 1 ? tp_reduce_s : 0.0;
  return c;
}

PieceCost HeadCost(const ModelSpec& m, const HardwareProfile& hw, Precision precision, int tp,
                   int mbs, Seconds tp_allreduce_s, Seconds tp_small_allreduce_s,
                   bool sequence_parallel, Seconds tp_allgather_s, bool fused_cross_entropy) {
  const int64_t T = int64_t(mbs) * m.seq_len, h = m.hidden, v = PaddedVocab(m, tp) / tp;
  const double e = ComputeBytes(precision), logits = double(T) * double(v),
               Th = sequence_parallel ? double(T) * h / tp : double(T) * h;
  PieceCost c;
  c.forward.gemm = GemmTime(hw, T, v, h);
  // logits.float() (none in fp32 training, nor in a fused cross-entropy, which reads fp32 logits)
  const double cast = IsHalf(precision) && !fused_cross_entropy ? e + 4 : 0.0;
  if (hw.cross_entropy_Glogits_per_s.value > 0) {
    // A measured cross-entropy rate (a CPU, where the exponentials bound it): half of the logits'
    // time each way, beside the final LayerNorm and the casts as bytes.
    const Seconds half =
        0.5 * hw.DeviceCopies() * logits / (hw.cross_entropy_Glogits_per_s.value * 1e9);
    c.forward.memory = MemoryBoundTime(hw, 2 * e * Th + cast * logits, cast > 0 ? 2 : 1) + half;
    c.backward.memory =
        MemoryBoundTime(hw, (cast > 0 ? 4 + e : 0) * logits + 5 * e * Th, cast > 0 ? 2 : 1) + half;
  } else if (fused_cross_entropy) {
    // Final LayerNorm, then one read of the fp32 logits (row statistics) and the loss from them;
    // backward: read the logits, write their gradient (4 + e), LayerNorm backward.
    c.forward.memory = MemoryBoundTime(hw, 2 * e * Th + 4 * logits, 3);
    c.backward.memory = MemoryBoundTime(hw, (4 + e) * logits + 5 * e * Th, 2);
  } else {
    // Final LayerNorm; cross-entropy: read the logits, write and re-read them in fp32 (max, sum).
    c.forward.memory =
        MemoryBoundTime(hw, 2 * e * Th + (cast + 4 + 8 + 8 + 4 + 8) * logits, cast > 0 ? 7 : 6);
    // Softmax gradient (read fp32, write e), LayerNorm backward.
    c.backward.memory =
        MemoryBoundTime(hw, (8 + (cast > 0 ? 4 + e : 0)) * logits + 5 * e * Th, cast > 0 ? 4 : 3);
  }
  // With sequence parallelism the final LayerNorm's output is all-gathered before the logits.
  c.forward.tp_comm =
      tp > 1 ? 3 * tp_small_allreduce_s + (sequence_parallel ? tp_allgather_s : 0) : 0.0;
  c.backward.gemm = GemmBackwardTime(hw, T, v, h);
  c.weight_grad.gemm = GemmBackwardWeightTime(hw, T, v, h);
  c.backward.tp_comm = tp > 1 ? tp_allreduce_s : 0.0;
  return c;
}

}  // namespace ptdp::costmodel
