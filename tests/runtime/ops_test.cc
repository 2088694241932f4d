// The CPU backend's pieces: Philox4x32-10 against the published known-answer vectors (Random123's
// kat_vectors), bf16/fp16 rounding, and CpuOps's rounding points (16-bit inputs, fp32 compute, one
// rounding of each output).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/reference/counter_rng.h"
#include "kernels/reference/ops.h"
#include "runtime/backend/cpu_ops.h"
#include "runtime/backend/device.h"
#include "runtime/backend/half.h"
#include "runtime/backend/timed_ops.h"

namespace ptdp::runtime {
namespace {

namespace rng = ::ptdp::kernels::rng;

TEST(Philox, KnownAnswers) {
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const rng::Philox4x32 r = rng::Philox4x32_10(
        rng::Philox4x32{{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.out[i]) << "word " << i;
  }
}

TEST(Philox, DropoutRateAndIndependenceOfLayout) {
  const uint64_t key = kernels::HashKey("layer0.attn");
  int kept = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) kept += rng::DropoutKeeps(key, uint64_t(i), 0.1f) ? 1 : 0;
  // Binomial(n, 0.9): standard deviation sqrt(n 0.9 0.1) = 134; 5 sigma.
  EXPECT_NEAR(kept, 0.9 * n, 5 * 134.0);
  // A value depends only on (key, index): drawing a slice gives the same bits as the whole.
  EXPECT_EQ(rng::Bits32(key, 12345), rng::Bits32(key, 12345));
  EXPECT_NE(rng::Bits32(key, 12345), rng::Bits32(key + 1, 12345));
}

TEST(Half, RoundsToNearestEven) {
  EXPECT_EQ(half::FloatToBf16(1.0f), 0x3F80);
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(half::Bf16ToFloat(half::FloatToBf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(half::Bf16ToFloat(half::FloatToBf16(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);
  EXPECT_EQ(half::FloatToFp16(1.0f), 0x3C00);
  EXPECT_EQ(half::Fp16ToFloat(half::FloatToFp16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(half::Fp16ToFloat(half::FloatToFp16(65520.0f))));
  EXPECT_EQ(half::Fp16ToFloat(half::FloatToFp16(1.0f + 1.0f / 2048)), 1.0f);  // tie to even
  EXPECT_EQ(half::Fp16ToFloat(0x0001), std::ldexp(1.0f, -24));                // smallest subnormal
  EXPECT_EQ(half::FloatToFp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(half::FloatToFp16(std::ldexp(3.0f, -26)), 0x0001);  // 0.75 ulp rounds up
  std::mt19937 g(1);
  std::normal_distribution<float> nd(0, 10);
  for (int i = 0; i < 10000; ++i) {  // relative error within the unit roundoff
    const float x = nd(g);
    EXPECT_LE(std::abs(half::RoundTo(x, DType::kBf16) - x), std::abs(x) * std::ldexp(1.0f, -8));
    EXPECT_LE(std::abs(half::RoundTo(x, DType::kFp16) - x), std::abs(x) * std::ldexp(1.0f, -11));
  }
}

// A bf16 GEMM: inputs are what the 16-bit tensors hold, accumulation in fp32, one rounding of the
// output; an fp32 output (a main gradient) is not rounded.
TEST(CpuOps, LinearRoundsOnlyTheOutput) {
  CpuOps ops;
  const int64_t n = 3, c = 5, oc = 4;
  std::mt19937 g(2);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> x(n * c), w(oc * c);
  for (auto& v : x) v = nd(g);
  for (auto& v : w) v = nd(g);
  std::vector<uint16_t> xb(x.size()), wb(w.size()), out(n * oc);
  half::Narrow(xb.data(), x.data(), n * c, DType::kBf16);
  half::Narrow(wb.data(), w.data(), oc * c, DType::kBf16);
  std::vector<float> out32(n * oc);
  ASSERT_TRUE(ops.LinearForward({out.data(), DType::kBf16, n * oc}, {},
                                {xb.data(), DType::kBf16, n * c}, {wb.data(), DType::kBf16, oc * c},
                                {}, n, c, oc)
                  .ok());
  ASSERT_TRUE(ops.LinearForward({out32.data(), DType::kFp32, n * oc}, {},
                                {xb.data(), DType::kBf16, n * c}, {wb.data(), DType::kBf16, oc * c},
                                {}, n, c, oc)
                  .ok());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < oc; ++j) {
      float acc = 0;
      for (int64_t k = 0; k < c; ++k) {
        acc += half::Bf16ToFloat(xb[i * c + k]) * half::Bf16ToFloat(wb[j * c + k]);
      }
      EXPECT_NEAR(out32[i * oc + j], acc, 1e-5f * (1 + std::abs(acc)));
      EXPECT_EQ(out[i * oc + j], half::FloatToBf16(out32[i * oc + j]));
    }
  }
}

// grad_scale (the clipping coefficient) inside AdamW equals Scale then AdamW, bit for bit, and
// leaves the gradient as it was.
TEST(CpuOps, AdamWGradScaleEqualsScaleThenUpdate) {
  CpuOps ops;
  const int64_t n = 257;
  std::mt19937 g(5);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> param(n), grad(n), m(n), v(n);
  for (int64_t i = 0; i < n; ++i) {
    param[i] = nd(g), grad[i] = nd(g), m[i] = 0.1f * nd(g), v[i] = std::abs(nd(g));
  }
  AdamWHyper h;
  h.lr = 3e-3, h.weight_decay = 0.1, h.step = 4;
  std::vector<float> p1 = param, m1 = m, v1 = v, g1 = grad;  // fused
  std::vector<float> p2 = param, m2 = m, v2 = v, g2 = grad;  // Scale, then AdamW
  auto ref = [&](std::vector<float>& x) { return TensorRef{x.data(), DType::kFp32, n}; };
  h.grad_scale = 0.37;
  ASSERT_TRUE(ops.AdamW(ref(p1), {}, ref(g1), ref(m1), ref(v1), h).ok());
  ASSERT_TRUE(ops.Scale(ref(g2), 0.37).ok());
  h.grad_scale = 1.0;
  ASSERT_TRUE(ops.AdamW(ref(p2), {}, ref(g2), ref(m2), ref(v2), h).ok());
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
  EXPECT_EQ(g1, grad);
  EXPECT_NE(p1, param);
}

// The multi-tensor ops of a backend without a multi-tensor kernel (Ops' defaults, which CpuOps
// keeps) are the single-tensor loop, bit for bit: each tensor's own weight decay (h.weight_decay
// not read), the bf16 copies, and the sum of squares accumulated in the same order.
TEST(CpuOps, MultiTensorOpsEqualTheSingleTensorLoop) {
  CpuOps ops;
  EXPECT_FALSE(ops.FusesMultiTensor());
  const std::vector<int64_t> counts = {1, 7, 8, 257};
  const std::vector<double> decay = {0.1, 0.0, 0.05, 0.1};
  std::mt19937 g(6);
  std::normal_distribution<float> nd(0, 1);
  struct State {
    std::vector<float> param, grad, m, v;
    std::vector<uint16_t> copy;
  };
  std::vector<State> many, loop;
  for (int64_t n : counts) {
    State s{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n),
            std::vector<float>(n), std::vector<uint16_t>(n, 0)};
    for (int64_t i = 0; i < n; ++i) {
      s.param[i] = nd(g), s.grad[i] = nd(g), s.m[i] = 0.1f * nd(g), s.v[i] = std::abs(nd(g));
    }
    many.push_back(s);
    loop.push_back(s);
  }
  auto ref = [](std::vector<float>& x) {
    return TensorRef{x.data(), DType::kFp32, int64_t(x.size())};
  };
  auto copy_ref = [](std::vector<uint16_t>& x) {
    return TensorRef{x.data(), DType::kBf16, int64_t(x.size())};
  };
  AdamWHyper h;
  h.lr = 3e-3, h.grad_scale = 0.37;
  std::vector<AdamWTensor> tensors;
  std::vector<ConstRef> grads;
  for (size_t k = 0; k < counts.size(); ++k) {
    State& s = many[k];
    tensors.push_back({ref(s.param), copy_ref(s.copy), ref(s.grad), ref(s.m), ref(s.v), decay[k]});
    grads.push_back(ref(s.grad));
  }
  double sum_many = 0.5, sum_loop = 0.5;
  for (int64_t step = 1; step <= 2; ++step) {
    h.step = step;
    h.weight_decay = 0.9;  // not read by AdamWMany
    ASSERT_TRUE(ops.AdamWMany(tensors, h).ok());
    for (size_t k = 0; k < counts.size(); ++k) {
      State& s = loop[k];
      h.weight_decay = decay[k];
      ASSERT_TRUE(
          ops.AdamW(ref(s.param), copy_ref(s.copy), ref(s.grad), ref(s.m), ref(s.v), h).ok());
    }
  }
  ASSERT_TRUE(ops.SumSquaresMany(TensorRef{&sum_many, DType::kFp64, 1}, grads).ok());
  for (State& s : loop) {
    ASSERT_TRUE(ops.SumSquares(TensorRef{&sum_loop, DType::kFp64, 1}, ref(s.grad)).ok());
  }
  for (size_t k = 0; k < counts.size(); ++k) {
    EXPECT_EQ(many[k].param, loop[k].param) << k;
    EXPECT_EQ(many[k].m, loop[k].m) << k;
    EXPECT_EQ(many[k].v, loop[k].v) << k;
    EXPECT_EQ(many[k].copy, loop[k].copy) << k;
  }
  EXPECT_EQ(sum_many, sum_loop);
  EXPECT_GT(sum_many, 0.5);
}

// TimedOps times a multi-tensor call as one entry when the backend fuses it, and otherwise lets
// Ops' loop time each tensor under the single-tensor op's name (the CPU op table as before).
TEST(TimedOps, MultiTensorEntriesFollowTheBackend) {
  class FusingCpuOps final : public CpuOps {
   public:
    bool FusesMultiTensor() const override { return true; }
  };
  CpuDevice dev;
  CpuOps plain;
  FusingCpuOps fusing;
  std::vector<float> p(8, 1.0f), g(8, 0.5f), m(8, 0.0f), v(8, 0.0f);
  auto ref = [](std::vector<float>& x) {
    return TensorRef{x.data(), DType::kFp32, int64_t(x.size())};
  };
  const std::vector<AdamWTensor> tensors(3, {ref(p), {}, ref(g), ref(m), ref(v), 0.1});
  const std::vector<ConstRef> grads(3, ref(g));
  double sum = 0;
  AdamWHyper h;
  h.lr = 1e-3;
  for (Ops* inner : {static_cast<Ops*>(&plain), static_cast<Ops*>(&fusing)}) {
    TimedOps timed(inner, &dev);
    ASSERT_TRUE(timed.AdamWMany(tensors, h).ok());
    ASSERT_TRUE(timed.SumSquaresMany(TensorRef{&sum, DType::kFp64, 1}, grads).ok());
    std::vector<std::pair<std::string, int64_t>> rows;
    for (const OpTime& t : timed.Table()) rows.emplace_back(t.op, t.calls);
    std::sort(rows.begin(), rows.end());
    using Rows = std::vector<std::pair<std::string, int64_t>>;
    if (inner == &plain) {
      EXPECT_EQ(rows, (Rows{{"AdamW", 3}, {"SumSquares", 3}}));
    } else {
      EXPECT_EQ(rows, (Rows{{"AdamW (multi-tensor)", 1}, {"SumSquares (multi-tensor)", 1}}));
    }
  }
}

// The stored u8 mask is the reference generator's decision at the global index.
TEST(CpuOps, DropoutMaskIsTheGlobalElementsDraw) {
  CpuOps ops;
  const int64_t n = 1000;
  std::vector<float> x(n, 1.0f);
  std::vector<uint8_t> mask(n);
  DropoutSpec d{0.25, kernels::HashKey("layer1.mlp_residual"), 777};
  ASSERT_TRUE(ops.Dropout({x.data(), DType::kFp32, n}, {mask.data(), DType::kU8, n}, d).ok());
  for (int64_t i = 0; i < n; ++i) {
    const float want = kernels::DropoutMaskValue<float>(d.key, d.first + i, d.p);
    EXPECT_EQ(x[i], want) << i;
    EXPECT_EQ(mask[i], want != 0 ? 1 : 0);
  }
}

// The fused stash (lse only) against the unfused one (probabilities, mask, dropout output) on
// random inputs with dropout, on a rank holding heads 2, 3 of 4 of sequences 3, 4: the same
// output (the same kernel on the same regenerated mask), and the same gradients within fp32
// rounding (the backward's probabilities are recomputed from lse, not read back). A wrong
// dropout key must change the gradients, so the mask is really regenerated.
TEST(CpuOps, FusedAttentionMatchesUnfusedWithDropout) {
  CpuOps ops;
  AttentionShape a;
  a.b = 2, a.s = 7, a.heads_local = 2, a.head_dim = 4;
  a.heads_total = 4, a.head_begin = 2, a.batch_begin = 3;
  const int64_t n_qkv = a.b * a.s * a.heads_local * 3 * a.head_dim;
  const int64_t n_out = n_qkv / 3, rows = a.b * a.heads_local * a.s, scores = rows * a.s;
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> qkv(n_qkv), dout(n_out);
  for (auto& x : qkv) x = normal(gen);
  for (auto& x : dout) x = normal(gen);
  const DropoutSpec drop{0.2, kernels::HashKey("layer1.attn"), 0};
  auto f32 = [](std::vector<float>& v) {
    return TensorRef{v.data(), DType::kFp32, int64_t(v.size())};
  };
  const ConstRef q{qkv.data(), DType::kFp32, n_qkv}, dy{dout.data(), DType::kFp32, n_out};

  std::vector<float> out_u(n_out), probs(scores), dropped(scores), dqkv_u(n_qkv);
  std::vector<uint8_t> mask(scores);
  AttentionStash unfused;
  unfused.probs = f32(probs);
  unfused.mask = {mask.data(), DType::kU8, scores};
  unfused.dropped = f32(dropped);
  ASSERT_TRUE(ops.AttentionForward(f32(out_u), &unfused, q, a, drop).ok());
  ASSERT_TRUE(ops.AttentionBackward(f32(dqkv_u), dy, q, unfused, a, drop.p).ok());

  std::vector<float> out_f(n_out), lse(rows), dqkv_f(n_qkv), dqkv_wrong(n_qkv);
  AttentionStash fused;
  fused.lse = f32(lse);
  fused.dropout_key = drop.key;
  ASSERT_TRUE(fused.fused());
  ASSERT_TRUE(ops.AttentionForward(f32(out_f), &fused, q, a, drop).ok());
  ASSERT_TRUE(ops.AttentionBackward(f32(dqkv_f), dy, q, fused, a, drop.p).ok());
  EXPECT_EQ(out_f, out_u);
  double max_rel = 0;
  for (int64_t i = 0; i < n_qkv; ++i) {
    EXPECT_NEAR(dqkv_f[i], dqkv_u[i], 2e-6f * (1 + std::abs(dqkv_u[i]))) << i;
    max_rel = std::max(max_rel, double(std::abs(dqkv_f[i] - dqkv_u[i])));
  }
  RecordProperty("max_abs_diff", std::to_string(max_rel));
  // Row 0 of every head attends to itself only: lse = its own scaled score.
  const double score00 = double(qkv[0]) * qkv[4] + double(qkv[1]) * qkv[5] +
                         double(qkv[2]) * qkv[6] + double(qkv[3]) * qkv[7];
  EXPECT_NEAR(lse[0], score00 / 2.0, 1e-5);

  fused.dropout_key = drop.key + 1;
  ASSERT_TRUE(ops.AttentionBackward(f32(dqkv_wrong), dy, q, fused, a, drop.p).ok());
  EXPECT_NE(dqkv_wrong, dqkv_u);
}

}  // namespace
}  // namespace ptdp::runtime
