// The ledger's figures, derived by hand in each test's comment, and the closed-form peak held
// equal to the walk of every Program schedule::BuildProgram makes.
#include "core/ledger.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "schedule/schedule.h"

namespace ptdp {
namespace {

// s = 4, b = 1, h = 8, a = 2, f = 32, V = 16 (padded to a multiple of 8 t: 16 at t = 1, 2).
ModelSpec Small(int layers, double dropout = 0.1) {
  ModelSpec m;
  m.name = "small";
  m.layers = layers;
  m.hidden = 8;
  m.heads = 2;
  m.seq_len = 4;
  m.vocab = 16;
  m.vocab_divisible_by = 8;
  m.dropout = dropout;
  return m;
}

// Per parameter element: fp32 4 + 4 + 8 (Adam m, v) = 16; bf16 2 (compute copy) + 4 (fp32 main
// gradient) + 12 (fp32 master, m, v) = 18, and fp16 likewise when the accumulation is fused into
// the GEMM (Megatron-LM's fp32 main_grad); fp16 unfused keeps 16-bit gradients (2021 Megatron-LM,
// the paper's Table 1 runs): 2 + 2 + 12 = 16.
TEST(Ledger, BytesPerParameterByPrecision) {
  ParallelConfig c;
  c.precision = Precision::kFp32;
  EXPECT_EQ(BytesPerParameter(c).weight, 4);
  EXPECT_EQ(BytesPerParameter(c).grad, 4);
  EXPECT_EQ(BytesPerParameter(c).optimizer, 8);
  c.precision = Precision::kBf16;
  for (bool fusion : {false, true}) {
    c.grad_accumulation_fusion = fusion;
    EXPECT_EQ(BytesPerParameter(c).weight, 2);
    EXPECT_EQ(BytesPerParameter(c).grad, 4);
    EXPECT_EQ(BytesPerParameter(c).Total(), 18);
  }
  c.precision = Precision::kFp16;
  c.grad_accumulation_fusion = true;
  EXPECT_EQ(BytesPerParameter(c).grad, 4);
  EXPECT_EQ(BytesPerParameter(c).Total(), 18);
  c.grad_accumulation_fusion = false;
  EXPECT_EQ(BytesPerParameter(c).grad, 2);
  EXPECT_EQ(BytesPerParameter(c).optimizer, 12);
  EXPECT_EQ(BytesPerParameter(c).Total(), 16);
}

// --grad-reduce-in-bf16: a bf16 gradient buffer in place of the fp32 main gradients, 2 + 2 + 12 =
// 16 bytes in bf16 and fp8 (whose FP8 weight copies are counted apart), with or without fusion;
// the distributed optimizer still shards the 12.
TEST(Ledger, BytesPerParameterWithBf16Gradients) {
  ParallelConfig c;
  c.grad_reduce_bf16 = true;
  for (Precision p : {Precision::kBf16, Precision::kFp8}) {
    c.precision = p;
    for (bool fusion : {false, true}) {
      c.grad_accumulation_fusion = fusion;
      EXPECT_FALSE(Fp32MainGrads(c));
      EXPECT_EQ(BytesPerParameter(c).weight, 2);
      EXPECT_EQ(BytesPerParameter(c).grad, 2);
      EXPECT_EQ(BytesPerParameter(c).optimizer, 12);
    }
  }
  c.distributed_optimizer = true;
  c.dp = 4;
  const MemoryLedger l = ParameterMemory(c, 1000);
  EXPECT_EQ(l.grads, 2000);
  EXPECT_EQ(l.optimizer, 3000);
}

// The distributed optimizer keeps the 12 bytes of state of ceil(N / d) whole elements on each of
// the d = 4 ranks and pads the weight and gradient buffers to d times that: 12 elements own 3 each
// (36 bytes, nothing padded); 11 own 3 as well (36 bytes), in buffers of 12 (24 bytes of bf16
// weights, 48 of fp32 gradients); 1 element owns 1 (12 bytes) in buffers of 4. With d = 1 the
// state is whole.
TEST(Ledger, DistributedOptimizerShards) {
  ParallelConfig c;
  c.precision = Precision::kBf16;
  c.dp = 4;
  EXPECT_EQ(OptimizerBytes(c, 10), 120);
  c.distributed_optimizer = true;
  EXPECT_EQ(OptimizerBytes(c, 12), 36);
  EXPECT_EQ(OptimizerBytes(c, 11), 36);
  const MemoryLedger l = ParameterMemory(c, 11);
  EXPECT_EQ(l.weights, 24);
  EXPECT_EQ(l.grads, 48);
  EXPECT_EQ(l.Total(), 24 + 48 + 36);
  const OptimizerShards one = OptimizerShardsOf(c, 1);
  EXPECT_EQ(one.owned, 1);
  EXPECT_EQ(one.padded, 4);
  c.dp = 1;
  const OptimizerShards whole = OptimizerShardsOf(c, 11);
  EXPECT_EQ(whole.owned, 11);
  EXPECT_EQ(whole.padded, 11);
}

// One layer of Small in bf16 with dropout, t = 1 (sbh = 32 elements, s b = 4 rows, a s^2 b = 32
// scores, s b f = 128):
//   ln1.input 64, ln1.mean 16, ln1.rstd 16 (fp32), qkv.input 64, q k v 3 x 64, softmax output 64,
//   attention dropout mask 32 and output 64, proj.input 64, residual mask 32, ln2.input 64,
//   ln2.mean 16, ln2.rstd 16, fc1.input 64, gelu.input 256, fc2.input 256, residual mask 32
//   = 1312 bytes = Korthikanti's s b h (34 + 5 a s / h) = 32 x 39 = 1248, plus 4 x 16 of LayerNorm
//   statistics.
// Embedding: token ids 4 x 4 + dropout mask 32 = 48. Head: final_ln.input 64, mean 16, rstd 16,
// output.input 64, fp32 logits 4 x 16 x 4 = 256, row max 16, row sum 16, targets 16 = 464.
// Full recomputation keeps the input, 64; its working set is the layer's list but the input,
// 1312 - 64 = 1248. Selective keeps 1312 - 160 and rebuilds the core's 160.
TEST(Ledger, SmallModelStashByHand) {
  const ModelSpec m = Small(2);
  ParallelConfig c;
  c.pp = 2;
  c.global_batch = 2;
  c.precision = Precision::kBf16;
  const StashPrices prices = StashPricesOf(m, c);
  EXPECT_EQ(prices.layer, 1312);
  EXPECT_EQ(prices.embedding, 48);
  EXPECT_EQ(prices.head, 464);
  EXPECT_EQ(prices.working_set, 0);
  EXPECT_EQ(ChunkStashBytes(m, c, 0, 0), 1312 + 48);   // layer 0 and the embedding
  EXPECT_EQ(ChunkStashBytes(m, c, 1, 0), 1312 + 464);  // layer 1 and the head
  c.recompute = Recompute::kFull;
  EXPECT_EQ(ChunkStashBytes(m, c, 0, 0), 64 + 48);
  EXPECT_EQ(RecomputeWorkingSetBytes(m, c), 1248);
  c.recompute = Recompute::kSelective;
  EXPECT_EQ(ChunkStashBytes(m, c, 1, 0), 1312 - 160 + 464);
  EXPECT_EQ(RecomputeWorkingSetBytes(m, c), 160);
  // fp32: the 576 activation elements take 4 bytes instead of 2; masks (96) and statistics (64)
  // stay: 4 x 576 + 96 + 64 = 2464.
  c.recompute = Recompute::kNone;
  c.precision = Precision::kFp32;
  EXPECT_EQ(StashPricesOf(m, c).layer, 2464);
  // Without dropout the masks go: attention 32, two residual 2 x 32 (and the attention dropout's
  // output 64 in bf16): 1312 - 96 - 64 = 1152.
  c.precision = Precision::kBf16;
  EXPECT_EQ(StashPricesOf(Small(2, 0.0), c).layer, 1152);
  EXPECT_EQ(StashPricesOf(Small(2, 0.0), c).embedding, 16);
}

// Fused attention keeps one fp32 log-sum-exp per score row instead of the core's s^2 tensors:
// a s b / t = 2 x 4 x 1 = 8 rows, 32 bytes, in place of the softmax output 64, the dropout mask
// 32 and the dropout output 64 (160): 1312 - 160 + 32 = 1184 with dropout; without dropout
// 1152 - 64 + 32 = 1120 (the mask is regenerated, so dropout costs the core nothing). Full
// recomputation keeps the input, 64, and rebuilds 1184 - 64 = 1120. At t = 2 the 4 rows take
// 16 bytes. Selective recomputation would drop nothing more: the layout is refused.
TEST(Ledger, FusedAttentionStashByHand) {
  const ModelSpec m = Small(2);
  ParallelConfig c;
  c.pp = 2;
  c.global_batch = 2;
  c.precision = Precision::kBf16;
  c.fused_attention = true;
  EXPECT_EQ(StashPricesOf(m, c).layer, 1184);
  EXPECT_EQ(StashPricesOf(Small(2, 0.0), c).layer, 1120);
  EXPECT_EQ(ChunkStashBytes(m, c, 1, 0), 1184 + 464);
  const std::vector<ActTensor> core = AttentionCoreActivations(m, c, true);
  ASSERT_EQ(core.size(), 1u);
  EXPECT_EQ(core[0].name, "attn.softmax.lse");
  EXPECT_EQ(core[0].kind, ActKind::kFp32);
  c.recompute = Recompute::kFull;
  EXPECT_EQ(ChunkStashBytes(m, c, 0, 0), 64 + 48);
  EXPECT_EQ(RecomputeWorkingSetBytes(m, c), 1120);
  c.recompute = Recompute::kNone;
  c.tp = 2;
  EXPECT_EQ(ListBytes(AttentionCoreActivations(m, c, true), c), 16);
  c.tp = 1;
  c.recompute = Recompute::kSelective;  // Megatron-Core's checkpointed core: the lse rebuilt
  EXPECT_TRUE(c.Validate(m).ok()) << c.Validate(m).message();
  EXPECT_EQ(RecomputeWorkingSetBytes(m, c), 16 * 2);  // the lse at t = 1: twice t = 2's
}

// Pipeline messages: b s h elements = 32 per tensor rank, 2 bytes in bf16 and fp16, 4 in fp32;
// with scatter/gather at t = 2, 16 elements.
TEST(Ledger, PipelineMessageBytes) {
  const ModelSpec m = Small(2);
  ParallelConfig c;
  c.pp = 2;
  c.scatter_gather = false;
  c.precision = Precision::kFp16;
  EXPECT_EQ(PipelineMessageBytes(m, c), 64);
  c.precision = Precision::kFp32;
  EXPECT_EQ(PipelineMessageBytes(m, c), 128);
  c.tp = 2;
  c.scatter_gather = true;
  c.precision = Precision::kBf16;
  EXPECT_EQ(PipelineMessageBytes(m, c), 32);
}

// Small's GEMM FLOPs, B = 2 sequences, s = 4, h = 8, f = 32, l = 2, V = 16: one layer forward
// 24 B s h^2 + 4 B s^2 h = 12288 + 1024 = 13312; logits 6 B s h V = 6144. Model FLOPs 3 x 2 x
// 13312 + 6144 = 86016 = 72 B s l h^2 (1 + s/6h + V/12lh) = 73728 x 7/6; full recomputation 4 x 2
// x 13312 + 6144 = 112640 = 96 B s l h^2 (1 + s/6h + V/16lh); selective 86016 + 2 x 4 B s^2 h
// = 86016 + 2 x 1024.
TEST(Ledger, SmallModelFlopsByHand) {
  const ModelSpec m = Small(2);
  ParallelConfig c;
  c.global_batch = 2;
  EXPECT_DOUBLE_EQ(ModelIterationFlops(m, c), 86016.0);
  EXPECT_DOUBLE_EQ(HardwareIterationFlops(m, c), 86016.0);
  c.recompute = Recompute::kFull;
  EXPECT_DOUBLE_EQ(HardwareIterationFlops(m, c), 112640.0);
  EXPECT_DOUBLE_EQ(ModelIterationFlops(m, c), 86016.0);
  c.recompute = Recompute::kSelective;
  EXPECT_DOUBLE_EQ(HardwareIterationFlops(m, c), 86016.0 + 2 * 1024.0);
  // Fused attention's backward recomputes Q K^T, 2 B s^2 h = 512 per layer; model FLOPs stay.
  c.fused_attention = true;
  c.recompute = Recompute::kNone;
  EXPECT_DOUBLE_EQ(HardwareIterationFlops(m, c), 86016.0 + 2 * 512.0);
  EXPECT_DOUBLE_EQ(ModelIterationFlops(m, c), 86016.0);
  c.recompute = Recompute::kFull;
  EXPECT_DOUBLE_EQ(HardwareIterationFlops(m, c), 112640.0 + 2 * 512.0);
}

// Per pipeline rank (the monitor's expected work): Small at B = 2, p = 2, one layer each: rank 0
// 3 x 13312 = 39936, rank 1 the same plus the logits 6144; over d = 2 each rank has half the
// sequences. Summed over every rank (p, t and d) the ranks' FLOPs are the iteration's, whatever
// the recomputation and attention.
TEST(Ledger, PipelineRankFlopsShareTheIteration) {
  const ModelSpec m = Small(2);
  ParallelConfig c;
  c.global_batch = 2;
  c.pp = 2;
  EXPECT_DOUBLE_EQ(PipelineRankFlops(m, c, 0), 39936.0);
  EXPECT_DOUBLE_EQ(PipelineRankFlops(m, c, 1), 39936.0 + 6144.0);
  c.dp = 2;
  EXPECT_DOUBLE_EQ(PipelineRankFlops(m, c, 1), (39936.0 + 6144.0) / 2);
  // Interleaved over 4 layers (v = 2): each rank holds two layers, the head stays on rank 1.
  const ModelSpec m4 = Small(4);
  c.dp = 1;
  c.vp = 2;
  c.schedule = ScheduleKind::kInterleaved;
  EXPECT_DOUBLE_EQ(PipelineRankFlops(m4, c, 0), 2 * 39936.0);
  EXPECT_DOUBLE_EQ(PipelineRankFlops(m4, c, 1), 2 * 39936.0 + 6144.0);
  c.vp = 1;
  c.schedule = ScheduleKind::k1F1B;
  c.dp = 2;
  c.tp = 2;
  for (Recompute r : {Recompute::kNone, Recompute::kFull, Recompute::kSelective}) {
    for (bool fused : {false, true}) {
      if (fused && r == Recompute::kSelective) continue;
      c.recompute = r;
      c.fused_attention = fused;
      const double ranks = PipelineRankFlops(m, c, 0) + PipelineRankFlops(m, c, 1);
      EXPECT_DOUBLE_EQ(ranks * c.tp * c.dp, HardwareIterationFlops(m, c));
    }
  }
}

// The 1T model (l = 128, h = 25600, a = 160, s = 2048, V = 51200 padded to itself at t = 8),
// B = 3072: the paper's eq. (3) 96 B s l h^2 (1 + s/6h + V/16lh) with recomputation, and its
// no-recomputation form 72 B s l h^2 (1 + s/6h + V/12lh) for model FLOPs. Selective recomputation
// adds one attention core per layer, 4 B s^2 h.
TEST(Ledger, OneTrillionFlopsMatchEquationThree) {
  ModelSpec m;
  m.layers = 128;
  m.hidden = 25600;
  m.heads = 160;
  m.seq_len = 2048;
  m.vocab = 51200;
  ParallelConfig c;
  c.tp = 8;
  c.pp = 64;
  c.dp = 6;
  c.global_batch = 3072;
  ASSERT_EQ(PaddedVocab(m, 8), 51200);
  const double B = 3072, s = 2048, l = 128, h = 25600, V = 51200;
  const double eq3 = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  const double model = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
  EXPECT_NEAR(ModelIterationFlops(m, c) / model, 1.0, 1e-12);
  c.recompute = Recompute::kNone;
  EXPECT_NEAR(HardwareIterationFlops(m, c) / model, 1.0, 1e-12);
  c.recompute = Recompute::kFull;
  EXPECT_NEAR(HardwareIterationFlops(m, c) / eq3, 1.0, 1e-12);
  c.recompute = Recompute::kSelective;
  EXPECT_NEAR(HardwareIterationFlops(m, c) / (model + l * 4 * B * s * s * h), 1.0, 1e-12);
  // About 6 x 1.0e12 parameters x 6.3e6 tokens = 3.86e19 model FLOPs per iteration.
  EXPECT_NEAR(ModelIterationFlops(m, c) / 1e19, 3.86, 0.01);
}

// Korthikanti et al. 2022: with dropout and no parallelism a layer keeps s b h (34 + 5 a s / h)
// bytes in 16-bit training; the ledger adds LayerNorm's fp32 mean and 1/std (4 x s b x 4 bytes).
// s = 32, b = 2, h = 64, a = 4: 4096 (34 + 10) = 180224, + 4 x 64 x 4 = 181248 per layer. With
// p = 2, rank 0 holds layers 0..3 and the embedding (token ids 64 x 4 + dropout mask 4096 = 4352);
// rank 1 holds layers 4..7 and the head: final_ln.input 8192, mean 256, rstd 256, output.input
// 8192, fp32 logits 64 x 256 x 4 = 65536, row max, row sum, targets 3 x 256 = 83200.
TEST(Ledger, LayerStashIsKorthikantiPlusStatistics) {
  ModelSpec m;
  m.layers = 8;
  m.hidden = 64;
  m.heads = 4;
  m.seq_len = 32;
  m.vocab = 256;
  m.dropout = 0.1;
  ParallelConfig c;
  c.pp = 2;
  c.mbs = 2;
  c.global_batch = 2;
  c.precision = Precision::kFp16;
  EXPECT_EQ(ChunkStashBytes(m, c, 0, 0), 4 * 181248 + 4352);
  EXPECT_EQ(ChunkStashBytes(m, c, 1, 0), 4 * 181248 + 83200);
  // Full recomputation keeps only each layer's input, s b h in 16 bits: 2 x 4096.
  c.recompute = Recompute::kFull;
  EXPECT_EQ(ChunkStashBytes(m, c, 0, 0), 4 * 8192 + 4352);
}

// In flight on rank r at the end of the warm-up (+1): GPipe m; 1F1B min(m, p - r); interleaved
// min(m v, 2 (p - r - 1) + (v - 1) p + 1) chunk-microbatches. On rank 0 the interleaved count,
// in layers (l / (p v) each), is Korthikanti's p (1 + (p - 1)/(p v)) microbatches of l / p layers.
TEST(Ledger, InFlightChunkMicrobatches) {
  ParallelConfig c;
  c.pp = 4;
  c.global_batch = 8;
  c.schedule = ScheduleKind::kGPipe;
  EXPECT_EQ(InFlightChunkMicrobatches(c, 3), 8);
  c.schedule = ScheduleKind::k1F1B;
  EXPECT_EQ(InFlightChunkMicrobatches(c, 0), 4);
  EXPECT_EQ(InFlightChunkMicrobatches(c, 3), 1);
  c.global_batch = 2;
  EXPECT_EQ(InFlightChunkMicrobatches(c, 0), 2);
  c.global_batch = 8;
  c.schedule = ScheduleKind::kInterleaved;
  for (int v : {2, 4}) {
    c.vp = v;
    const double p = c.pp, l = 32;
    EXPECT_DOUBLE_EQ(double(InFlightChunkMicrobatches(c, 0)) * (l / (p * v)),
                     (l / p) * p * (1 + (p - 1) / (p * v)))
        << v;
  }
  c.vp = 2;
  EXPECT_EQ(InFlightChunkMicrobatches(c, 3), 5);
}

// Where the end of the warm-up is not the peak: interleaved, p = 2, v = 2, m = 4, one layer per
// chunk (S0 = L + E on chunk 0 with the embedding, S1 = L). Rank 0 warms up with 2 (p - 1) + p = 4
// forwards of chunks 0, 0, 1, 1 (2 S0 + 2 S1); step 0 runs a chunk-0 forward and frees a chunk-1
// backward (3 S0 + S1), step 1 another chunk-0 forward: 4 S0 + S1 = 5 L + 4 E, one embedding stash
// more than the warm-up's end plus one forward (3 S0 + 2 S1 = 5 L + 3 E).
TEST(Ledger, InterleavedSteadyStateHoldsMoreEmbeddings) {
  const ModelSpec m = Small(4);
  ParallelConfig c;
  c.pp = 2;
  c.vp = 2;
  c.schedule = ScheduleKind::kInterleaved;
  c.global_batch = 4;
  c.precision = Precision::kBf16;
  const Bytes L = 1312, E = 48;
  EXPECT_EQ(PeakActivationBytes(m, c, 0), 5 * L + 4 * E);
  auto program = schedule::BuildProgram(m, c);
  ASSERT_TRUE(program.ok()) << program.status().ToString();
  EXPECT_EQ(PeakActivationBytes(m, c, *program, 0), 5 * L + 4 * E);
}

// A split backward (ZB-H1, Qi et al. 2024): a middle rank of p = 4 (no embedding or head), m = 8,
// runs p - r - 1 = 2 warm-up forwards and then F, BI, (W once more than r = 1 are pending). Its
// peak is in a BI of the steady state: 1F1B's 3 chunk stashes, one microbatch that has traded its
// stash for its weight-gradient stash (its W still pending) and the output gradients the first
// layer's input half allocates (core/shapes.h LayerWeightGradStash, LayerOutputGrads).
TEST(Ledger, SplitBackwardKeepsTheWeightGradStashUntilW) {
  const ModelSpec m = Small(8);
  ParallelConfig c;
  c.pp = 4;
  c.global_batch = 8;
  c.schedule = ScheduleKind::kZbH1;
  const Bytes stash = ChunkStashBytes(m, c, 1, 0);
  const Bytes wgrad = ListBytes(LayerWeightGradStash(m, c), c);
  const Bytes out_grads = ListBytes(LayerOutputGrads(m, c), c);
  ASSERT_GT(stash, 0);
  ASSERT_LT(wgrad, ListBytes(LayerStash(m, c, false), c));  // the trade frees memory
  auto program = schedule::BuildProgram(m, c);
  ASSERT_TRUE(program.ok()) << program.status().ToString();
  const Bytes want = 3 * stash + 2 * wgrad + out_grads;  // 2 layers per rank
  EXPECT_EQ(PeakActivationBytes(m, c, *program, 1), want);
  EXPECT_EQ(PeakActivationBytes(m, c, 1), want);
}

// The closed form and the walk of the Program agree everywhere: GPipe, 1F1B, ZB-H1 and ZB-H2 for p
// in {1, 2, 3, 4, 8}, interleaved for v in {2, 3, 4}; m from 1 to 3 p v (interleaved: from p, in
// Megatron-Core's groups of G > p when m % p != 0); recompute none, full, selective;
// dropout on and off; fused attention on (but selective) and off; every pipeline rank.
TEST(Ledger, ClosedFormPeakEqualsProgramWalk) {
  int64_t compared = 0;
  for (int p : {1, 2, 3, 4, 8}) {
    for (int v : {1, 2, 3, 4}) {
      for (ScheduleKind kind :
           {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved,
            ScheduleKind::kZbH1, ScheduleKind::kZbH2, ScheduleKind::kZbV}) {
        const bool chunked = kind == ScheduleKind::kInterleaved || kind == ScheduleKind::kZbV;
        if (chunked != (v > 1) || (kind == ScheduleKind::kZbV && v != 2)) continue;
        if (kind == ScheduleKind::kInterleaved && p == 1) continue;
        for (int64_t micro = 1; micro <= 3 * p * v; ++micro) {
          if (kind == ScheduleKind::kInterleaved && micro < p) continue;
          if (kind == ScheduleKind::kZbV && micro < 2 * p - 1) continue;
          for (Recompute rc : {Recompute::kNone, Recompute::kFull, Recompute::kSelective}) {
            for (int variant = 0; variant < 4; ++variant) {
              const double dropout = variant % 2 ? 0.1 : 0.0;
              const bool fused = variant >= 2;
              if (fused && rc == Recompute::kSelective) continue;  // refused by Validate
              const ModelSpec m = Small(2 * p * v, dropout);
              ParallelConfig c;
              c.fused_attention = fused;
              c.pp = p;
              c.vp = v;
              c.schedule = kind;
              c.recompute = rc;
              c.global_batch = micro;
              c.precision = Precision::kBf16;
              auto program = schedule::BuildProgram(m, c);
              ASSERT_TRUE(program.ok()) << c.ToString() << ": " << program.status().ToString();
              for (int r = 0; r < p; ++r) {
                ASSERT_EQ(PeakActivationBytes(m, c, r), PeakActivationBytes(m, c, *program, r))
                    << c.ToString() << " dropout " << dropout << " rank " << r;
                ++compared;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 5000);
}

// The in-flight count follows the interleaved order: for every m >= p it is the Program's peak of
// stashed microbatches (an upper bound for p = 2 with odd m, whose Program drops a microbatch),
// and with Megatron-Core's groups of G it is (v - 1)(G - p) above the count for groups of p.
TEST(Ledger, InterleavedInFlightFollowsTheGroupOrder) {
  int grown = 0;
  for (int p = 2; p <= 8; ++p) {
    for (int v = 2; v <= 4; ++v) {
      for (int64_t micro = p; micro <= 4 * p; ++micro) {
        ParallelConfig c;
        c.pp = p;
        c.vp = v;
        c.schedule = ScheduleKind::kInterleaved;
        c.global_batch = micro;
        auto program = schedule::GenerateSchedule(c.schedule, p, micro, v);
        ASSERT_TRUE(program.ok());
        const std::vector<int> peak = schedule::PeakStashedMicrobatches(*program);
        const int64_t g = DefaultMicrobatchGroup(micro, p);
        for (int r = 0; r < p; ++r) {
          const int64_t in_flight = InFlightChunkMicrobatches(c, r);
          const std::string where = c.ToString() + " rank " + std::to_string(r);
          if (p == 2 && micro % 2 != 0) {
            EXPECT_GE(in_flight, peak[r]) << where;
            continue;
          }
          EXPECT_EQ(in_flight, peak[r]) << where;
          const int64_t groups_of_p = 2 * (p - r - 1) + (v - 1) * p + 1;
          if (groups_of_p + (v - 1) * (g - p) <= micro * v) {
            EXPECT_EQ(in_flight - groups_of_p, (v - 1) * (g - p)) << where;
            grown += g > p;
          }
        }
      }
    }
  }
  EXPECT_GT(grown, 100);
}

// Uneven stages: each chunk's stash counts its own layers (ChunkLayers), and the closed form
// still equals the walk for GPipe and 1F1B over every split of 9 layers on p = 2, 3, 4.
TEST(Ledger, UnevenStagesStashAndPeak) {
  int64_t compared = 0;
  for (int p : {2, 3, 4}) {
    for (int first = 0; first <= 4; ++first) {
      for (int last = 0; last <= 4; ++last) {
        for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
          for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
            const ModelSpec m = Small(9);
            ParallelConfig c;
            c.pp = p;
            c.schedule = kind;
            c.recompute = rc;
            c.global_batch = 2 * p + 1;
            c.first_stage_layers = first;
            c.last_stage_layers = last;
            if (!c.Uneven() || !c.Validate(m).ok()) continue;
            const StashPrices prices = StashPricesOf(m, c);
            auto program = schedule::BuildProgram(m, c);
            ASSERT_TRUE(program.ok()) << c.ToString() << ": " << program.status().ToString();
            for (int r = 0; r < p; ++r) {
              const int n = ChunkLayers(m, c, r, 0).size();
              const Bytes extra = (r == 0 ? prices.embedding : 0) + (r == p - 1 ? prices.head : 0);
              EXPECT_EQ(ChunkStashBytes(m, c, r, 0), n * prices.layer + extra) << c.ToString();
              ASSERT_EQ(PeakActivationBytes(m, c, r), PeakActivationBytes(m, c, *program, r))
                  << c.ToString() << " rank " << r;
              ++compared;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 100);
}

// The runtime's transient workspace, by hand from runtime/model/gpt_layers.cc's order (s = 4, b =
// 1: N = 4 tokens; h = 8, f = 32; plus the loss's two fp64 accumulators, 16 bytes). fp32, one
// stage: N h = 128, N f = 512 bytes. A layer's backward holds dy, dx and then the GeLU input
// gradient with fc1's output gradient, 2 x 128 + 2 x 512 = 1280, but after the head freed its stash
// (x 128, mean and rstd 16 each, ln_out 128, logits N V 4 = 256 at V = 16, row max and sum 16 each,
// targets 16: 592): 688 above the ledger's peak. The head's dy, logits' gradient (N V 4 = 256) and
// norm's input gradient, 512: the layer's phase is the peak. At V = 512 the logits' gradient is
// 8192: 8448.
// A mixture's leading dense layer rebuilds its MLP (recompute_modules mlp) after the mixture layer
// behind it on its stage freed its stash: the stage's working set is the larger of the mixture
// layer's (nothing: mlp redoes dense MLPs only) and the dense one's less that stash (the runtime's
// order, measured equal in runtime_equiv_t2p2d2_1f1b_selective_seqpar_mlp_moe).
TEST(Ledger, ADenseLayerAheadOfMixtureLayersRebuildsBesideLessStash) {
  ModelSpec m = Small(4, 0.0);
  m.swiglu = true;
  m.ffn_hidden = 64;
  m.moe_experts = 4;
  m.moe_topk = 2;
  m.moe_ffn_hidden = 4;
  m.moe_dense_layers = 1;
  ParallelConfig c;
  c.pp = 2;
  c.global_batch = 4;
  c.recompute = Recompute::kSelective;
  c.recompute_modules = kRecomputeMlp;
  const StashPrices prices = StashPricesOf(m, c);
  ASSERT_GT(prices.dense_working_set, prices.layer);  // the dense MLP's inside outweighs it
  EXPECT_EQ(prices.layer_working_set, 0);
  EXPECT_EQ(ChunkWorkingSetBytes(prices, m, c, 0, 0), prices.dense_working_set - prices.layer);
  EXPECT_EQ(ChunkWorkingSetBytes(prices, m, c, 1, 0), 0);
  c.pp = 4;  // the dense layer alone on its stage: nothing behind it
  EXPECT_EQ(ChunkWorkingSetBytes(StashPricesOf(m, c), m, c, 0, 0), prices.dense_working_set);
}

TEST(Ledger, WorkspaceByHand) {
  ModelSpec m = Small(2);
  ParallelConfig c;
  c.precision = Precision::kFp32;
  c.global_batch = 1;
  EXPECT_EQ(ListBytes(HeadActivations(m, c), c), 592);
  EXPECT_EQ(PeakWorkspaceBytes(m, c, 0), 16 + 1280 - 592);
  m.vocab = 512;
  EXPECT_EQ(PeakWorkspaceBytes(m, c, 0), 16 + 8448);
  EXPECT_EQ(MemoryOf(m, c, 0).TotalWithWorkspace(), MemoryOf(m, c, 0).Total() + 16 + 8448);
  // bf16, two stages, 1F1B: N h = 64, N f = 256, plus one boundary message (64) held. The head's
  // rank: 2 x 64 + N V 2 = 4096, 4224. Rank 0 (no head): a layer's 2 x 64 + 2 x 256 = 640 (its
  // forward holds the partial sum and the outgoing message, 128; the embedding's backward 128).
  c.precision = Precision::kBf16;
  c.pp = 2;
  c.global_batch = 2;
  EXPECT_EQ(PeakWorkspaceBytes(m, c, 1), 16 + 64 + 4224);
  EXPECT_EQ(PeakWorkspaceBytes(m, c, 0), 16 + 64 + 640);
  // ZB-H1 keeps the Linears' output gradients and the logits' as stash: the head's dy and norm
  // gradient, 2 x 64; a layer's dy, dx and the GeLU input gradient (fc1's is stash), 2 x 64 + 256 =
  // 384, on rank 1 after the head traded its stash (8400 in bf16 with the fp32 logits) for its
  // weight-gradient stash (ln_out 64 and the logits' gradient 4096), less the layer's output
  // gradients (576): nothing above the peak there, so the head's 128.
  c.schedule = ScheduleKind::kZbH1;
  EXPECT_EQ(PeakWorkspaceBytes(m, c, 1), 16 + 64 + 128);
  EXPECT_EQ(PeakWorkspaceBytes(m, c, 0), 16 + 64 + 384);
}

}  // namespace
}  // namespace ptdp
