#include "core/ledger.h"

#include <algorithm>

#include "core/experts.h"
#include "core/fsdp.h"
#include "core/interleaved_order.h"
#include "core/zbv_order.h"

namespace ptdp {

Bytes ListBytes(const std::vector<ActTensor>& acts, const ParallelConfig& c) {
  return ActivationBytes(acts, ComputeBytes(c.precision), LinearInputBytes(c.precision));
}

StashPrices StashPricesOf(const ModelSpec& m, const ParallelConfig& c) {
  const bool dropout = m.dropout > 0;
  StashPrices p;
  p.layer = ListBytes(LayerStash(m, c, dropout), c);
  p.embedding = ListBytes(EmbeddingActivations(m, c, dropout), c);
  p.head = ListBytes(HeadActivations(m, c), c);
  // The head's stage keeps the multi-token prediction depths' too (core/shapes.h).
  if (m.mtp_layers > 0) p.head += m.mtp_layers * ListBytes(MtpActivations(m, c, dropout), c);
  p.head_before_rebuild = m.mtp_layers > 0 ? ListBytes(HeadActivations(m, c), c) : p.head;
  p.working_set = p.layer_working_set = ListBytes(RecomputeWorkingSet(m, c, dropout), c);
  if (m.HasDenseLayers()) {  // a mixture's dense layers (core/model.h LayerModel)
    const ModelSpec dense = DenseLayerModel(m);
    p.dense_layer = ListBytes(LayerStash(dense, c, dropout), c);
    p.dense_working_set = ListBytes(RecomputeWorkingSet(dense, c, dropout), c);
    p.working_set = std::max(p.working_set, p.dense_working_set);
  }
  if (SplitsBackward(c.schedule)) {
    p.layer_wgrad = ListBytes(LayerWeightGradStash(m, c), c);
    p.layer_output_grads = ListBytes(LayerOutputGrads(m, c), c);
    const std::vector<ActTensor> head = HeadWeightGradStash(m, c);
    p.head_wgrad = ListBytes(head, c);
    p.head_logits_grad = ListBytes({head.back()}, c);
    if (c.sequence_parallel) {
      const std::vector<ActTensor> w = LayerWeightGradStash(m, c);  // qkv.input, fc1.input whole
      p.layer_gathered_inputs = ListBytes({w[0], w[2]}, c);
      p.head_gathered_input = ListBytes({head.front()}, c);
    }
  }
  return p;
}

namespace {

Bytes HeadStashBytes(const StashPrices& prices, const ParallelConfig& c, int pp_rank, int chunk) {
  return HoldsHead(c, pp_rank, chunk) ? prices.head : 0;
}
// What a chunk's backward has freed when it first rebuilds a layer (StashPrices).
Bytes FreedBeforeRebuild(const StashPrices& prices, const ParallelConfig& c, int pp_rank,
                         int chunk) {
  return HoldsHead(c, pp_rank, chunk) ? prices.head_before_rebuild : 0;
}

}  // namespace

Bytes ChunkStashBytes(const StashPrices& prices, const ModelSpec& m, const ParallelConfig& c,
                      int pp_rank, int chunk) {
  const int dense = ChunkDenseLayers(m, c, pp_rank, chunk);
  Bytes b = prices.layer * (ChunkLayers(m, c, pp_rank, chunk).size() - dense) +
            prices.dense_layer * dense;
  if (HoldsEmbedding(c, pp_rank, chunk)) b += prices.embedding;
  return b + HeadStashBytes(prices, c, pp_rank, chunk);
}

Bytes ChunkStashBytes(const ModelSpec& m, const ParallelConfig& c, int pp_rank, int chunk) {
  return ChunkStashBytes(StashPricesOf(m, c), m, c, pp_rank, chunk);
}

Bytes ChunkWorkingSetBytes(const StashPrices& prices, const ModelSpec& m, const ParallelConfig& c,
                           int pp_rank, int chunk) {
  if (!m.HasDenseLayers()) return prices.working_set;
  // The backward runs a chunk's layers last to first, each freeing its stash when done: layer i
  // rebuilds its kind's working set after the layers behind it freed theirs (a dense layer ahead
  // of mixture layers, as the leading ones are, rebuilds beside less stash).
  Bytes ws = 0;
  for (int k = chunk < 0 ? 0 : chunk; k < (chunk < 0 ? c.vp : chunk + 1); ++k) {
    const LayerRange layers = ChunkLayers(m, c, pp_rank, k);
    Bytes freed = 0;
    for (int layer = layers.end - 1; layer >= layers.begin; --layer) {
      const bool mixture = m.IsMoeLayer(layer);
      ws = std::max(ws, (mixture ? prices.layer_working_set : prices.dense_working_set) - freed);
      freed += mixture ? prices.layer : prices.dense_layer;
    }
  }
  return ws;
}

Bytes RecomputeWorkingSetBytes(const ModelSpec& m, const ParallelConfig& c) {
  const Bytes working_set = ListBytes(RecomputeWorkingSet(m, c, m.dropout > 0), c);
  if (!m.HasDenseLayers()) return working_set;
  return std::max(working_set,
                  ListBytes(RecomputeWorkingSet(DenseLayerModel(m), c, m.dropout > 0), c));
}

int64_t InFlightChunkMicrobatches(const ParallelConfig& c, int pp_rank) {
  const int64_t m = c.Microbatches(), p = c.pp, v = c.vp, r = pp_rank;
  // The combined 1F1B's one more warm-up forward (ParallelConfig::moe_a2a_overlap).
  const int64_t paired = c.moe_a2a_overlap ? 1 : 0;
  switch (c.schedule) {
    case ScheduleKind::kGPipe:
      return m;
    case ScheduleKind::k1F1B:
      return std::min(m, p - r + paired);
    case ScheduleKind::kInterleaved:  // the warm-up, then the steady state's first forward
      return std::min(m * v, InterleavedOrderOf(c.pp, m, c.vp).Warmup(c.pp, pp_rank) + 1 + paired);
    case ScheduleKind::kZbH1:  // forward done, W not yet: 1F1B's warm-up plus r pending W passes
      return std::min(m, p);
    case ScheduleKind::kZbH2:  // the schedule's cap (Qi et al. 2024, section 3.1)
      return std::min(m, 2 * p - 1);
    case ScheduleKind::kZbV:  // 2p half stages: p microbatches of a stage (core/zbv_order.h)
      return std::min(m * v, 2 * p);
  }
  return m;
}

namespace {

// The compute order of one rank as schedule/generators.cc builds it: `warmup` forwards, then
// (forward, backward) pairs until the `total` forwards have run, then the remaining backwards.
// Forward k runs chunk (k mod p v) / p, backward k chunk v - 1 - (k mod p v) / p (Megatron-LM's
// interleaved order; chunk 0 without interleaving). GPipe is all forwards, then all backwards.
struct RankOrder {
  int64_t total = 0;
  int64_t warmup = 0;
};

RankOrder RankOrderOf(const ParallelConfig& c, int pp_rank) {
  const int64_t m = c.Microbatches(), p = c.pp, v = c.vp, r = pp_rank;
  const int64_t paired = c.moe_a2a_overlap ? 1 : 0;  // as InFlightChunkMicrobatches
  switch (c.schedule) {
    case ScheduleKind::kGPipe:
      return {m, m};
    case ScheduleKind::k1F1B:
      return {m, std::min(m, p - r - 1 + paired)};
    case ScheduleKind::kInterleaved:
      return {m * v,
              std::min(m * v, InterleavedOrderOf(c.pp, m, c.vp).Warmup(c.pp, pp_rank) + paired)};
    case ScheduleKind::kZbH1:  // SplitBackwardPeak replays their orders instead
    case ScheduleKind::kZbH2:
    case ScheduleKind::kZbV:
      break;
  }
  return {m, m};
}

// The input half of a split backward on `chunk` (core/ledger.h's kBackwardInput): raises *peak,
// leaves *live holding the chunk's weight-gradient stash in place of its stash.
void SplitBackwardInput(const StashPrices& prices, const ModelSpec& m, const ParallelConfig& c,
                        int pp_rank, int chunk, Bytes* live, Bytes* peak) {
  if (HoldsHead(c, pp_rank, chunk)) {
    *peak = std::max(*peak, *live + prices.head_logits_grad + prices.head_gathered_input);
    *live += prices.head_wgrad - prices.head;
  }
  // Layer k (from the last) holds the live bytes, its working set and its output gradients, each
  // layer before it having traded its stash for its weight-gradient stash: the largest is the
  // first layer's or the last's.
  const Bytes working_set =
      c.recompute == Recompute::kNone ? 0 : ChunkWorkingSetBytes(prices, m, c, pp_rank, chunk);
  const int64_t layers = int64_t(ChunkLayers(m, c, pp_rank, chunk).size());
  const Bytes trade = prices.layer_wgrad - prices.layer;
  if (layers > 0) {
    const Bytes first =
        *live + working_set + prices.layer_output_grads + prices.layer_gathered_inputs;
    *peak = std::max({*peak, first, first + (layers - 1) * trade});
    *live += layers * trade;
  }
  if (HoldsEmbedding(c, pp_rank, chunk)) *live -= prices.embedding;
}

Bytes WeightGradStashBytes(const StashPrices& prices, const ModelSpec& m, const ParallelConfig& c,
                           int pp_rank, int chunk) {
  return prices.layer_wgrad * ChunkLayers(m, c, pp_rank, chunk).size() +
         (HoldsHead(c, pp_rank, chunk) ? prices.head_wgrad : 0);
}

// ZB-V's order (core/zbv_order.h, the generator's own) on byte counts, O(m) per rank.
Bytes ZbVPeak(const StashPrices& prices, const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  Bytes live = 0, peak = 0;
  ZbVOrder(c.pp, pp_rank, c.Microbatches(), [&](Op op, int64_t, int chunk) {
    if (op == Op::kForward) {
      live += ChunkStashBytes(prices, m, c, pp_rank, chunk);
      peak = std::max(peak, live);
    } else if (op == Op::kBackwardInput) {
      SplitBackwardInput(prices, m, c, pp_rank, chunk, &live, &peak);
    } else {
      live -= WeightGradStashBytes(prices, m, c, pp_rank, chunk);
    }
  });
  return peak;
}

// The zero-bubble orders of schedule/generators.cc (ZbH1, ZbH2; one chunk) replayed on byte
// counts: the Program walk's candidates without building the Program, O(m) per rank. tests/core
// prove the two equal.
Bytes SplitBackwardPeak(const StashPrices& prices, const ModelSpec& m, const ParallelConfig& c,
                        int pp_rank) {
  const int64_t mb = c.Microbatches(), p = c.pp, r = pp_rank;
  const Bytes stash = ChunkStashBytes(prices, m, c, pp_rank, 0);
  const Bytes wgrad = WeightGradStashBytes(prices, m, c, pp_rank, 0);
  Bytes live = 0, peak = 0;
  int64_t f = 0, b = 0, w = 0;
  auto forward = [&] { ++f, live += stash, peak = std::max(peak, live); };
  auto input = [&] { ++b, SplitBackwardInput(prices, m, c, pp_rank, 0, &live, &peak); };
  auto weight = [&] { ++w, live -= wgrad; };
  if (c.schedule == ScheduleKind::kZbH1) {
    while (f < std::min(p - r - 1, mb)) forward();
    while (b < mb) {
      if (f < mb) forward();
      input();
      if (b - w > r) weight();
    }
  } else {
    while (f < std::min(mb, 2 * (p - r - 1) + 1)) forward();
    while (b < mb) {
      input();
      if (f < mb) {
        if (f - w >= 2 * p - 1) weight();
        forward();
        continue;
      }
      for (int k = 0; k < 2 && b - w > 2 * r; ++k) weight();
    }
  }
  return peak;  // the trailing W passes only free
}

// Interleaved with m % p != 0: the order of core/interleaved_order.h (groups of G > p, or for
// p = 2 the order of m + 1 with the last microbatch left out) replayed on byte counts (the Program
// walk's candidates), O(m v) per rank: the periodic argument of the closed form below does not
// hold once the groups are not all p microbatches. tests/core prove the two equal.
Bytes GroupTableInterleavedPeak(const StashPrices& prices, const ModelSpec& m,
                                const ParallelConfig& c, int pp_rank) {
  const InterleavedOrder order = InterleavedOrderOf(c.pp, c.Microbatches(), c.vp);
  const int64_t total = order.Slots(),
                warmup = std::min(total, order.Warmup(c.pp, pp_rank) + (c.moe_a2a_overlap ? 1 : 0));
  Bytes live = 0, peak = 0;
  auto forward = [&](int64_t k) {
    const InterleavedSlot s = order.Slot(k);
    if (s.microbatch >= order.microbatches) return;
    live += ChunkStashBytes(prices, m, c, pp_rank, s.chunk);
    peak = std::max(peak, live);
  };
  auto backward = [&](int64_t k) {
    const InterleavedSlot s = order.Slot(k);
    if (s.microbatch >= order.microbatches) return;
    const int chunk = c.vp - 1 - s.chunk;
    if (c.recompute != Recompute::kNone) {
      peak = std::max(peak, live - FreedBeforeRebuild(prices, c, pp_rank, chunk) +
                                ChunkWorkingSetBytes(prices, m, c, pp_rank, chunk));
    }
    live -= ChunkStashBytes(prices, m, c, pp_rank, chunk);
  };
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) forward(f);
  for (; f < total; ++f, ++b) forward(f), backward(b);
  for (; b < total; ++b) backward(b);
  return peak;
}

}  // namespace

Bytes PeakActivationBytes(const StashPrices& prices, const ModelSpec& m, const ParallelConfig& c,
                          int pp_rank) {
  if (c.schedule == ScheduleKind::kZbV) return ZbVPeak(prices, m, c, pp_rank);
  if (SplitsBackward(c.schedule)) return SplitBackwardPeak(prices, m, c, pp_rank);
  if (c.schedule == ScheduleKind::kInterleaved && c.Microbatches() % c.pp != 0) {
    return GroupTableInterleavedPeak(prices, m, c, pp_rank);
  }
  // The walk's two candidates (see the Program overload): after each forward, the live stash;
  // during each backward's last layer with recomputation, the live stash less the head's plus the
  // working set. Warm-up forwards only add, so the warm-up contributes its end. In the steady state
  // step j runs forward warmup + j, then backward j; both chunk patterns have period p v, and over
  // any p v consecutive steps each chunk is entered p times and left p times, so the live stash
  // before a step is periodic too: the first min(steps, p v) steps hold the steady state's peak.
  // The cool-down only frees; its first backward's candidate is no larger than the one before it
  // (the stash freed there is at least the head's), unless there was no steady state at all.
  const int64_t p = c.pp, v = c.vp, period = p * v;
  const RankOrder order = RankOrderOf(c, pp_rank);
  auto stash = [&](int64_t chunk) { return ChunkStashBytes(prices, m, c, pp_rank, int(chunk)); };
  auto backward_peak = [&](Bytes live, int64_t chunk) {
    return live - FreedBeforeRebuild(prices, c, pp_rank, int(chunk)) +
           ChunkWorkingSetBytes(prices, m, c, pp_rank, int(chunk));
  };
  Bytes live = 0;
  for (int64_t chunk = 0; chunk < v; ++chunk) {
    const int64_t rest = order.warmup % period;
    const int64_t count = order.warmup / period * p + std::clamp(rest - chunk * p, int64_t{0}, p);
    live += count * stash(chunk);
  }
  Bytes peak = live;
  if (order.warmup == order.total) return std::max(peak, backward_peak(live, v - 1));
  if (v == 1) {  // one chunk: every steady step enters and leaves the same stash
    live += stash(0);
    return std::max({peak, live, backward_peak(live, 0)});
  }
  // Forward warmup + j and backward j walk the chunks in blocks of p (forwards up from chunk
  // (warmup mod p v) / p, backwards down from v - 1); counters instead of divisions per step.
  int64_t fchunk = (order.warmup % period) / p, fin = order.warmup % p;
  int64_t bchunk = v - 1, bin = 0;
  const int64_t steps = std::min(order.total - order.warmup, period);
  for (int64_t j = 0; j < steps; ++j) {
    live += stash(fchunk);
    peak = std::max({peak, live, backward_peak(live, bchunk)});
    live -= stash(bchunk);
    if (++fin == p) fin = 0, fchunk = fchunk + 1 == v ? 0 : fchunk + 1;
    if (++bin == p) bin = 0, bchunk = bchunk == 0 ? v - 1 : bchunk - 1;
  }
  return peak;
}

Bytes PeakActivationBytes(const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  return PeakActivationBytes(StashPricesOf(m, c), m, c, pp_rank);
}

Bytes PeakActivationBytes(const ModelSpec& m, const ParallelConfig& c, const Program& program,
                          int pp_rank) {
  const StashPrices prices = StashPricesOf(m, c);
  Bytes live = 0, peak = 0;
  for (const Instr& in : program.ranks[static_cast<size_t>(pp_rank)].instrs) {
    if (!IsCompute(in.op)) continue;
    const Bytes stash = ChunkStashBytes(prices, m, c, pp_rank, in.chunk);
    if (in.op == Op::kForward) {
      live += stash;
      peak = std::max(peak, live);
      continue;
    }
    if (in.op == Op::kBackwardInput) {
      SplitBackwardInput(prices, m, c, pp_rank, in.chunk, &live, &peak);
      continue;
    }
    if (in.op == Op::kBackwardWeight) {
      live -= WeightGradStashBytes(prices, m, c, pp_rank, in.chunk);
      continue;
    }
    // Backward: the head phase holds everything; the first (last) layer's phase has freed the head
    // and rebuilt the working set.
    if (in.recompute) {
      peak = std::max(peak, live - FreedBeforeRebuild(prices, c, pp_rank, in.chunk) +
                                ChunkWorkingSetBytes(prices, m, c, pp_rank, in.chunk));
    }
    live -= stash;
  }
  return peak;
}

namespace {

// What the rank's chunks hold: layers, the embedding, the head, a chunk sending its output on; and
// whether every chunk with layers (and the embedding's) holds the head too.
struct RankRoles {
  bool layers = false, embedding = false, head = false, sends_output = false;
  bool only_head_chunks = true;
};

RankRoles RolesOf(const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  RankRoles r;
  for (int k = 0; k < c.vp; ++k) {
    const bool has_layers = ChunkLayers(m, c, pp_rank, k).size() > 0;
    const bool head = HoldsHead(c, pp_rank, k), embedding = HoldsEmbedding(c, pp_rank, k);
    r.layers = r.layers || has_layers;
    r.embedding = r.embedding || embedding;
    r.head = r.head || head;
    r.sends_output = r.sends_output || (has_layers && !head);
    if ((has_layers || embedding) && !head) r.only_head_chunks = false;
  }
  return r;
}

}  // namespace

int64_t ContextRingKvFeatures(const ModelSpec& m) {
  return m.IsMla() ? 2 * int64_t(m.heads) * m.QkHeadDim() : 2 * int64_t(m.KvHeads()) * m.HeadDim();
}

Bytes ContextRingBytes(const ModelSpec& m, const ParallelConfig& c) {
  if (c.cp == 1) return 0;
  const Bytes kv =
      ContextShardLen(m, c) * c.mbs * (ContextRingKvFeatures(m) / c.tp) * ComputeBytes(c.precision);
  return std::max<Bytes>(c.cp, 4) * kv;
}

Bytes PeakWorkspaceBytes(const StashPrices& prices, const ModelSpec& m, const ParallelConfig& c,
                         int pp_rank) {
  const RankRoles roles = RolesOf(m, c, pp_rank);
  const int64_t N = ContextShardLen(m, c) * c.mbs;
  const Bytes a = ComputeBytes(c.precision), wide = 4;
  // hd: the widest of Q, K (a dqk) and the attention's output (a dv) on a rank.
  const Bytes nh = N * m.hidden * a, nhd = N * (std::max(m.AttnWidth(), m.QkWidth()) / c.tp) * a;
  // A mixture of experts' MLP gradients are on its experts' token copies (core/experts.h); its
  // shared expert's and its leading dense layers' on the N tokens, as a dense MLP's.
  const int64_t copies = m.IsMoe() ? ExpertTokens(m, c) : N;
  const Bytes ne_h = copies * m.hidden * a;
  const Bytes nf =
      m.IsMoe() ? copies * (m.MoeFfnHidden() / c.ExpertTp()) * a : N * (m.FfnHidden() / c.tp) * a;
  Bytes dense_mlp = 0;  // the largest of those dense MLPs' gradients (the order below)
  for (int64_t f : {m.HasSharedExpert() ? m.moe_shared_ffn_hidden : 0,
                    m.HasDenseLayers() ? m.FfnHidden() : 0}) {
    const Bytes n_f = N * (f / c.tp) * a;
    if (f > 0) dense_mlp = std::max({dense_mlp, nh + n_f, 2 * n_f, 2 * nh});
  }
  const bool split = SplitsBackward(c.schedule);
  // Multi-latent attention as the runtime runs it (runtime/model/mla.h): the attention reads a
  // packed input of 3 a dqk / t per token (nhd each part) with the value padded to dqk, and
  // writes a padded output. The forward holds the input and that output (4 nhd); the backward the
  // input again, the padded output and output gradient and the input's gradient (8 nhd). The
  // int32 block indices of the copies are kept from the first layer on (MlaIndexBytes), beside
  // every phase.
  Bytes mla_forward = 0, mla_backward = 0;
  if (m.IsMla()) {
    mla_forward = 4 * nhd;
    mla_backward = 8 * nhd;
  }
  // Sequence parallelism (a dense model's whole backward, as the runtime runs it): the residual
  // stream's tensors hold the rank's rows (rh), each GEMM that reads every row reads a gathered
  // [N][h] transient (nh), and each row-parallel sum reduce-scatters into rh beside its nh
  // partial (runtime/model/gpt_layers.cc GatherRows, SumRows).
  const bool seq = c.sequence_parallel && !m.IsMoe();
  const bool sp = seq && !split;  // the whole backward's orders below; the split's further down
  const Bytes rh = nh / c.tp;
  const Bytes rank_working_set = ChunkWorkingSetBytes(prices, m, c, pp_rank, -1);
  const Bytes working_set = c.recompute == Recompute::kNone ? 0 : rank_working_set;
  // A head chunk's layers and embedding run their backward after the head's freed its stash (the
  // split backward: traded it for its weight-gradient stash), holding at most the working set and
  // the output gradients in its place: the ledger's live bytes are at least this below its peak.
  const Bytes head_freed = split ? prices.head - prices.head_wgrad : prices.head_before_rebuild;
  const Bytes relief =
      roles.only_head_chunks
          ? std::max<Bytes>(0, head_freed - working_set - (split ? prices.layer_output_grads : 0))
          : 0;
  Bytes forward = 0, head = 0, layer = 0, embedding = 0;
  if (roles.layers) {
    forward = seq ? nh + rh + (roles.sends_output ? rh : 0) : nh + (roles.sends_output ? nh : 0);
    // Full recomputation's forward holds the layer's stash but its input as workspace, at most
    // the ledger's peak after a forward; the backward that follows that state holds the working set
    // on it less the head's freed stash, within the ledger's peak: the forward's excess is at most
    // what the head freed.
    if (c.recompute == Recompute::kFull) {
      forward += std::min(rank_working_set, roles.head ? head_freed : 0);
    }
    forward += mla_forward;
    // The block's gradients in the order runtime/model/gpt_layers.cc allocates and frees them
    // (the unfused GeLU order; the fused one never holds more).
    const Bytes mlp =
        split ? std::max(nf, 2 * nh) : std::max({ne_h + nf, 2 * nf, 2 * ne_h, dense_mlp});
    const Bytes attention =
        nh +
        (split ? std::max(nhd, nh) : std::max({nh + nhd, 4 * nhd, 3 * nhd + nh, mla_backward}));
    layer = 2 * nh + std::max(mlp, attention) + ContextRingBytes(m, c) - relief;
    if (sp) {  // the same orders, with the gathered inputs and output gradients
      const Bytes mlp_sp = std::max({rh + nh, nh + nf, 2 * nf, 2 * nh + nf});
      const Bytes attention_sp =
          rh + std::max({rh + nh, nh + nhd, 4 * nhd, 3 * nhd + 2 * nh, mla_backward});
      layer = 2 * rh + std::max(mlp_sp, attention_sp) + ContextRingBytes(m, c) - relief;
    } else if (seq) {  // the split's: what the weight half reads is kept, tagged activations
      const Bytes mlp_sp = std::max(nf, nh + rh), attention_sp = rh + std::max(nhd, nh + rh);
      layer = 2 * rh + std::max(mlp_sp, attention_sp) + ContextRingBytes(m, c) - relief;
    }
  }
  if (roles.head) {
    forward = std::max({forward, 2 * N * wide + (c.tp > 1 ? N * wide : 0), seq ? nh : 0});
    head = (sp ? 2 * nh + rh : 2 * nh) + (split ? 0 : N * (PaddedVocab(m, c.tp) / c.tp) * a);
    if (seq && split) head = nh + 2 * rh;
  }
  if (roles.embedding) embedding = (seq ? 2 * rh + nh : 2 * nh) - relief;
  const Bytes loss_accumulators = 2 * 8;
  // Boundary messages held beside a phase: a received gradient or an output not yet sent, or a
  // send the peer has not yet received (runtime/executor/executor.cc frees a send's buffer at the
  // first poll after it completes). One with one chunk per rank; with several, three: a rank runs
  // up to two forwards ahead of the next (the interleaved warm-ups differ by two), whose sends wait
  // for it, beside a received gradient (measured on the CPU runtime: interleaved p 2 v 2 holds
  // three at its peak; not derived for every v). ZB-H2's warm-ups differ by two forwards between
  // neighbours, as the interleaved ones do: two (seen with sequence parallelism, t2 p2 d1, whose
  // bound has no slack to hide the second).
  const int64_t one_chunk = c.schedule == ScheduleKind::kZbH2 ? 2 : 1;
  const int64_t held_messages = c.VirtualStages() == 1 ? 0 : c.vp == 1 ? one_chunk : 3;
  return loss_accumulators + held_messages * (seq ? rh : nh) + MlaIndexBytes(m, c) +
         std::max({forward, head, layer, embedding, Bytes{0}});
}

Bytes MlaIndexBytes(const ModelSpec& m, const ParallelConfig& c) {
  if (!m.IsMla()) return 0;
  const int64_t g = m.MlaBlock(), nn = m.HeadDim() / g, nr = m.mla_rope_dim / g,
                nv = m.mla_v_dim / g;
  const int64_t tokens = ContextShardLen(m, c) * c.mbs, heads = m.heads / c.tp;
  return tokens * heads * (4 * nn + 5 * nr + 4 * nv) * Bytes(sizeof(int32_t));
}

Bytes PeakWorkspaceBytes(const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  return PeakWorkspaceBytes(StashPricesOf(m, c), m, c, pp_rank);
}

MemoryLedger MemoryOf(const ModelSpec& m, const ParallelConfig& c, int pp_rank) {
  const StashPrices prices = StashPricesOf(m, c);
  MemoryLedger l = ParameterMemory(m, c, pp_rank);
  l.activations = PeakActivationBytes(prices, m, c, pp_rank);
  l.workspace = PeakWorkspaceBytes(prices, m, c, pp_rank);
  return l;
}

MemoryLedger MemoryOf(const ModelSpec& m, const ParallelConfig& c, const Program& program,
                      int pp_rank) {
  MemoryLedger l = ParameterMemory(m, c, pp_rank);
  l.activations = PeakActivationBytes(m, c, program, pp_rank);
  l.workspace = PeakWorkspaceBytes(m, c, pp_rank);
  return l;
}

Bytes PipelineMessageBytes(const ModelSpec& m, const ParallelConfig& c) {
  return BoundaryElements(m, c) * ComputeBytes(c.precision);
}

}  // namespace ptdp
