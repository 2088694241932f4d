#include "costmodel/flops.h"

namespace ptdp::costmodel {

FlopCount LayerForwardFlops(const ModelSpec& m, int64_t sequences) {
  const double B = double(sequences), s = double(m.seq_len), h = double(m.hidden),
               f = double(m.FfnHidden());
  // QKV 6Bsh^2, projection 2Bsh^2, MLP 2 x 2Bshf, scores and scores.V 2 x 2Bs^2h.
  return 8 * B * s * h * h + 4 * B * s * h * f + 4 * B * s * s * h;
}

FlopCount IterationFlops(const ModelSpec& m, int64_t global_batch, int64_t vocab, bool recompute) {
  const double passes = recompute ? 4.0 : 3.0;
  const double logits =
      6.0 * double(global_batch) * double(m.seq_len) * double(m.hidden) * double(vocab);
  return passes * m.layers * LayerForwardFlops(m, global_batch) + logits;
}

FlopCount AttentionCoreForwardFlops(const ModelSpec& m, int64_t sequences) {
  return 4.0 * double(sequences) * double(m.seq_len) * double(m.seq_len) * double(m.hidden);
}

FlopCount HardwareIterationFlops(const ModelSpec& m, int64_t global_batch, int64_t vocab,
                                 Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone:
      return IterationFlops(m, global_batch, vocab, false);
    case Recompute::kFull:
      return IterationFlops(m, global_batch, vocab, true);
    case Recompute::kSelective:
      return IterationFlops(m, global_batch, vocab, false) +
             m.layers * AttentionCoreForwardFlops(m, global_batch);
  }
  return 0;
}

FlopCount PaperEq3Flops(const ModelSpec& m, int64_t global_batch, int64_t vocab, bool recompute) {
  const double B = double(global_batch), s = double(m.seq_len), h = double(m.hidden),
               l = double(m.layers), V = double(vocab);
  if (recompute) return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
}

}  // namespace ptdp::costmodel
