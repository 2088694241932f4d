#include "costmodel/layer_cost.h"

#include "costmodel/gemm.h"

namespace ptdp::costmodel {

Seconds MemoryBoundTime(const HardwareProfile& hw, double bytes, int kernels) {
  return bytes / GBpsToBytesPerSecond(hw.memory_bound_GBps.value) +
         kernels * hw.kernel_launch_us.value * kUs;
}

double LayerForwardMemoryBytes(const ModelSpec& m, int tp, int mbs, int act_bytes) {
  const double e = act_bytes, T = double(mbs) * double(m.seq_len), h = double(m.hidden),
               f = double(m.FfnHidden()), s = double(m.seq_len);
  const double scores = double(mbs) * double(m.heads) / tp * s * s;
  const double layernorms = 2 * 2 * e * T * h;
  const double dropout_add = 2 * (3 * e + 1) * T * h;
  const double gelu = 2 * e * T * f / tp;
  const double softmax = 2 * e * scores;
  const double attn_dropout = (2 * e + 1) * scores;
  return layernorms + dropout_add + gelu + softmax + attn_dropout;
}

PieceCost TransformerLayerCost(const ModelSpec& m, const HardwareProfile& hw, int tp, int mbs,
                               Seconds tp_allreduce_s) {
  const int64_t T = int64_t(mbs) * m.seq_len, h = m.hidden, f = m.FfnHidden(), s = m.seq_len;
  const int64_t dh = m.HeadDim(), heads_batch = int64_t(mbs) * m.heads / tp;
  PieceCost c;
  c.forward.gemm = GemmTime(hw, T, 3 * h / tp, h) + GemmTime(hw, s, s, dh, heads_batch) +
                   GemmTime(hw, s, dh, s, heads_batch) + GemmTime(hw, T, h, h / tp) +
                   GemmTime(hw, T, f / tp, h) + GemmTime(hw, T, h, f / tp);
  c.backward.gemm =
      GemmBackwardTime(hw, T, 3 * h / tp, h) + GemmBackwardTime(hw, s, s, dh, heads_batch) +
      GemmBackwardTime(hw, s, dh, s, heads_batch) + GemmBackwardTime(hw, T, h, h / tp) +
      GemmBackwardTime(hw, T, f / tp, h) + GemmBackwardTime(hw, T, h, f / tp);
  const double bytes = LayerForwardMemoryBytes(m, tp, mbs, hw.ActivationBytes());
  // 7 forward kernels (2 LN, 2 dropout-add, GeLU, softmax, attention dropout), twice as many back.
  c.forward.memory = MemoryBoundTime(hw, bytes, 7);
  c.backward.memory = MemoryBoundTime(hw, 2 * bytes, 14);
  c.forward.tp_comm = 2 * tp_allreduce_s;
  c.backward.tp_comm = 2 * tp_allreduce_s;
  return c;
}

PieceCost EmbeddingCost(const ModelSpec& m, const HardwareProfile& hw, int tp, int mbs,
                        Seconds tp_allreduce_s) {
  const double e = hw.ActivationBytes(), T = double(mbs) * double(m.seq_len), h = double(m.hidden);
  PieceCost c;
  // Gather word rows, add positions (read 2, write 1), dropout (read, write, mask).
  c.forward.memory = MemoryBoundTime(hw, e * T * h + 3 * e * T * h + (2 * e + 1) * T * h, 3);
  // Dropout and add backward, then scatter-add into the word and position gradients.
  c.backward.memory = MemoryBoundTime(hw, (2 * e + 1) * T * h + 2 * 2 * e * T * h, 3);
  c.forward.tp_comm = tp > 1 ? tp_allreduce_s : 0.0;
  return c;
}

PieceCost HeadCost(const ModelSpec& m, const HardwareProfile& hw, int tp, int mbs,
                   Seconds tp_allreduce_s, Seconds tp_small_allreduce_s) {
  const int64_t T = int64_t(mbs) * m.seq_len, h = m.hidden, v = PaddedVocab(m, tp) / tp;
  const double e = hw.ActivationBytes(), logits = double(T) * double(v), Th = double(T) * h;
  PieceCost c;
  c.forward.gemm = GemmTime(hw, T, v, h);
  // Final LayerNorm; cross-entropy: read the logits, write and re-read them in fp32 (max, sum).
  c.forward.memory = MemoryBoundTime(hw, 2 * e * Th + (e + 4 + 4 + 4) * logits, 4);
  c.forward.tp_comm = tp > 1 ? 3 * tp_small_allreduce_s : 0.0;
  c.backward.gemm = GemmBackwardTime(hw, T, v, h);
  // Softmax gradient (read fp32, write e), LayerNorm backward.
  c.backward.memory = MemoryBoundTime(hw, (4 + e) * logits + 2 * 2 * e * Th, 3);
  c.backward.tp_comm = tp > 1 ? tp_allreduce_s : 0.0;
  return c;
}

}  // namespace ptdp::costmodel
