// Every layer's backward against central finite differences, in double precision through the CPU
// backend's fp64 Ops (a tensor group of one): the transformer layer (with and without dropout;
// every one of its twelve parameters), the head (final LayerNorm, tied output, cross-entropy with
// padded vocabulary) and the embedding; and a multi-token prediction depth (runtime/model/mtp.h)
// whole, the positions without a target left out of its loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "runtime/model/gpt_layers.h"
#include "runtime/model/mtp.h"
#include "tests/runtime/gradient_check.h"

namespace ptdp::runtime {
namespace {

using namespace gradient_check;  // NOLINT(build/namespaces): the tests' shared helpers

LayerCtx Ctx(Device* dev, const LayerDims& d, const DropoutCtx& drop) {
  LayerCtx c;
  c.dev = dev;
  c.d = d;
  c.types = {DType::kFp64, DType::kFp64};
  c.drop = drop;
  return c;
}

LayerDims Dims() {
  LayerDims d;
  d.b = 2;
  d.s = 4;
  d.h = 8;
  d.heads = 2;
  d.heads_local = 2;
  d.f_local = 32;
  d.v_local = 16;  // padded vocabulary 16, 11 real
  d.vocab_real = 11;
  return d;
}

struct LayerParams {
  Vec ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  explicit LayerParams(const LayerDims& d, uint32_t seed) {
    const int64_t h = d.h, f = d.f_local;
    ln1_w = Random(h, seed + 1, 0.2);
    for (auto& v : ln1_w) v += 1;
    ln1_b = Random(h, seed + 2, 0.1);
    qkv_w = Random(3 * h * h, seed + 3, 0.3);
    qkv_b = Random(3 * h, seed + 4, 0.1);
    proj_w = Random(h * h, seed + 5, 0.3);
    proj_b = Random(h, seed + 6, 0.1);
    ln2_w = Random(h, seed + 7, 0.2);
    for (auto& v : ln2_w) v += 1;
    ln2_b = Random(h, seed + 8, 0.1);
    fc1_w = Random(f * h, seed + 9, 0.3);
    fc1_b = Random(f, seed + 10, 0.1);
    fc2_w = Random(h * f, seed + 11, 0.3);
    fc2_b = Random(h, seed + 12, 0.1);
  }
  LayerWeights W() const {
    return {C(ln1_w), C(ln1_b), C(qkv_w), C(qkv_b), C(proj_w), C(proj_b), C(ln2_w),
            C(ln2_b), C(fc1_w), C(fc1_b), C(fc2_w), C(fc2_b),  {},        {},
            {},       {},       {},       {},       {},        {},        {},
            nullptr,  {},       {},       {},       {},        {}};
  }
  LayerGrads G() {
    return {M(ln1_w), M(ln1_b), M(qkv_w), M(qkv_b), M(proj_w), M(proj_b), M(ln2_w),
            M(ln2_b), M(fc1_w), M(fc1_b), M(fc2_w), M(fc2_b),  {},        {},
            {},       {},       {},       {},       {},        {},        {},
            {},       {},       {},       {}};
  }
};

// split: the backward runs as a split backward's two halves (LayerCtx::defer_weight_grads): the
// input half leaves the Linears' weight (and QKV, fc1 bias) gradients untouched and keeps exactly
// their four inputs; the weight half computes them. The finite differences then hold as for the
// whole backward.
void LayerCase(double dropout, bool fused_attention = false, bool split = false) {
  CpuDevice dev;
  const LayerDims d = Dims();
  const int64_t nh = d.N() * d.h;
  LayerParams p(d, 7);
  Vec x = Random(nh, 99, 1.0), r = Random(nh, 100, 1.0);
  DropoutCtx drop;
  drop.p = dropout;
  drop.step = 3;
  drop.seq0 = 5;
  LayerCtx c = Ctx(&dev, d, drop);
  c.fused_attention = fused_attention;
  auto objective = [&]() {
    LayerStash st;
    EXPECT_TRUE(AllocLayerInput(c, &st).ok());
    Put(st.x, x);
    Vec y(static_cast<size_t>(nh));
    EXPECT_TRUE(LayerForward(c, p.W(), 2, MemTag::kActivations, &st, M(y)).ok());
    double s = 0;
    for (int64_t i = 0; i < nh; ++i) s += y[i] * r[i];
    return s;
  };
  LayerParams g(d, 7);
  for (Vec* v : {&g.ln1_w, &g.ln1_b, &g.qkv_w, &g.qkv_b, &g.proj_w, &g.proj_b, &g.ln2_w, &g.ln2_b,
                 &g.fc1_w, &g.fc1_b, &g.fc2_w, &g.fc2_b}) {
    std::fill(v->begin(), v->end(), 0.0);
  }
  LayerStash st;
  ASSERT_TRUE(AllocLayerInput(c, &st).ok());
  Put(st.x, x);
  Vec y(static_cast<size_t>(nh)), dx(static_cast<size_t>(nh));
  ASSERT_TRUE(LayerForward(c, p.W(), 2, MemTag::kActivations, &st, M(y)).ok());
  WeightGradQueue queue;
  LayerCtx backward = c;
  if (split) backward.defer_weight_grads = &queue;
  ASSERT_TRUE(LayerBackward(backward, p.W(), g.G(), 2, &st, C(r), M(dx)).ok());
  if (split) {
    EXPECT_EQ(queue.size(), 4u);
    for (const Vec* v : {&g.qkv_w, &g.qkv_b, &g.proj_w, &g.fc1_w, &g.fc1_b, &g.fc2_w}) {
      EXPECT_TRUE(std::all_of(v->begin(), v->end(), [](double e) { return e == 0.0; }));
    }
    EXPECT_FALSE(st.ln1_out.empty() || st.attn_out.empty() || st.ln2_out.empty() ||
                 st.gelu_out.empty());
    for (const Tensor* t : {&st.ln1_mean, &st.qkv, &st.probs, &st.att_lse, &st.x2, &st.fc1_out,
                            &st.attn_res_mask, &st.mlp_res_mask}) {
      EXPECT_TRUE(t->empty());
    }
    ASSERT_TRUE(RunDeferredWeightGrads(backward, &queue).ok());
    EXPECT_TRUE(queue.empty());
  }
  CheckGrad("x", x, dx, objective);
  CheckGrad("ln1.weight", p.ln1_w, g.ln1_w, objective);
  CheckGrad("ln1.bias", p.ln1_b, g.ln1_b, objective);
  CheckGrad("qkv.weight", p.qkv_w, g.qkv_w, objective);
  CheckGrad("qkv.bias", p.qkv_b, g.qkv_b, objective);
  CheckGrad("proj.weight", p.proj_w, g.proj_w, objective);
  CheckGrad("proj.bias", p.proj_b, g.proj_b, objective);
  CheckGrad("ln2.weight", p.ln2_w, g.ln2_w, objective);
  CheckGrad("ln2.bias", p.ln2_b, g.ln2_b, objective);
  CheckGrad("fc1.weight", p.fc1_w, g.fc1_w, objective);
  CheckGrad("fc1.bias", p.fc1_b, g.fc1_b, objective);
  CheckGrad("fc2.weight", p.fc2_w, g.fc2_w, objective);
  CheckGrad("fc2.bias", p.fc2_b, g.fc2_b, objective);
}

TEST(LayerGradient, TransformerLayerMatchesFiniteDifferences) {
  LayerCase(0.0);
}
TEST(LayerGradient, TransformerLayerWithDropoutMatchesFiniteDifferences) {
  LayerCase(0.2);
}
// Fused attention (the stash is the log-sum-exp; the backward recomputes the probabilities and
// regenerates the mask): the same finite differences.
TEST(LayerGradient, FusedAttentionLayerWithDropoutMatchesFiniteDifferences) {
  LayerCase(0.2, true);
}

TEST(LayerGradient, SplitBackwardLayerMatchesFiniteDifferences) {
  LayerCase(0.2, false, /*split=*/true);
}
TEST(LayerGradient, SplitBackwardFusedAttentionLayerMatchesFiniteDifferences) {
  LayerCase(0.2, true, /*split=*/true);
}

TEST(LayerGradient, HeadMatchesFiniteDifferences) {
  CpuDevice dev;
  const LayerDims d = Dims();
  const int64_t nh = d.N() * d.h;
  Vec x = Random(nh, 1, 1.0), lw = Random(d.h, 2, 0.2), lb = Random(d.h, 3, 0.1);
  for (auto& v : lw) v += 1;
  Vec wout = Random(d.v_local * d.h, 4, 0.5);
  std::vector<int32_t> targets(static_cast<size_t>(d.N()));
  for (size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<int32_t>((i * 7) % 11);
  const LayerCtx c = Ctx(&dev, d, DropoutCtx{});
  const HeadWeights w{C(lw), C(lb), C(wout)};
  auto start = [&](HeadStash* st) {
    st->x = Tensor::Make(&dev, nh, DType::kFp64, MemTag::kActivations).value();
    Put(st->x, x);
    st->targets = Tensor::Make(&dev, d.N(), DType::kI32, MemTag::kActivations).value();
    std::copy(targets.begin(), targets.end(), static_cast<int32_t*>(st->targets.data()));
  };
  auto objective = [&]() {
    HeadStash st;
    start(&st);
    double loss = 0;
    EXPECT_TRUE(HeadForward(c, w, &st, {&loss, DType::kFp64, 1}).ok());
    return loss;
  };
  HeadStash st;
  start(&st);
  double loss = 0;
  ASSERT_TRUE(HeadForward(c, w, &st, {&loss, DType::kFp64, 1}).ok());
  Vec dlw(lw.size()), dlb(lb.size()), dwout(wout.size()), dx(static_cast<size_t>(nh));
  ASSERT_TRUE(HeadBackward(c, w, {M(dlw), M(dlb), M(dwout)}, 1.0, &st, M(dx)).ok());
  CheckGrad("x", x, dx, objective);
  CheckGrad("final_ln.weight", lw, dlw, objective);
  CheckGrad("final_ln.bias", lb, dlb, objective);
  CheckGrad("output", wout, dwout, objective);
  // Padding rows (ids >= vocab_real) never change the loss, so their gradient is exactly zero.
  for (int64_t i = d.vocab_real * d.h; i < d.v_local * d.h; ++i) EXPECT_EQ(dwout[i], 0.0);
}

TEST(LayerGradient, EmbeddingMatchesFiniteDifferences) {
  CpuDevice dev;
  const LayerDims d = Dims();
  const int64_t nh = d.N() * d.h;
  Vec wte = Random(d.v_local * d.h, 5), wpe = Random(d.s * d.h, 6), r = Random(nh, 7);
  std::vector<int32_t> tokens(static_cast<size_t>(d.N()));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 3) % 11);
  DropoutCtx drop;
  drop.p = 0.3;
  const LayerCtx c = Ctx(&dev, d, drop);
  auto start = [&](EmbeddingStash* st) {
    st->tokens = Tensor::Make(&dev, d.N(), DType::kI32, MemTag::kActivations).value();
    std::copy(tokens.begin(), tokens.end(), static_cast<int32_t*>(st->tokens.data()));
  };
  auto objective = [&]() {
    Vec out(static_cast<size_t>(nh));
    EmbeddingStash st;
    start(&st);
    EXPECT_TRUE(EmbeddingForwardTp(c, C(wte), C(wpe), &st, M(out)).ok());
    double s = 0;
    for (int64_t i = 0; i < nh; ++i) s += out[i] * r[i];
    return s;
  };
  Vec dwte(wte.size()), dwpe(wpe.size()), out(static_cast<size_t>(nh));
  EmbeddingStash st;
  start(&st);
  ASSERT_TRUE(EmbeddingForwardTp(c, C(wte), C(wpe), &st, M(out)).ok());  // stores the mask
  ASSERT_TRUE(EmbeddingBackwardTp(c, M(dwte), M(dwpe), &st, C(r)).ok());
  CheckGrad("wte", wte, dwte, objective);
  CheckGrad("wpe", wpe, dwpe, objective);
}

// A prediction depth (k = 1) against finite differences of its loss plus <ln_out, r> (r standing
// for the next depth's gradient of this depth's ln_out): every weight, the hidden state it reads
// and the shared embedding and output matrix. The last position of each sequence has no target:
// its hidden state and its input token reach no loss, so their gradients are exactly zero.
TEST(LayerGradient, PredictionDepthMatchesFiniteDifferences) {
  CpuDevice dev;
  const LayerDims d = Dims();
  const int64_t nh = d.N() * d.h, h = d.h;
  const size_t hs = static_cast<size_t>(h);
  LayerParams layer(d, 31);
  Vec hidden = Random(nh, 41, 1.0), r = Random(nh, 42, 0.3);
  Vec enorm_w = Random(h, 43, 0.2), enorm_b = Random(h, 44, 0.1);
  Vec hnorm_w = Random(h, 45, 0.2), hnorm_b = Random(h, 46, 0.1);
  Vec lnf_w = Random(h, 47, 0.2), lnf_b = Random(h, 48, 0.1);
  for (Vec* v : {&enorm_w, &hnorm_w, &lnf_w}) {
    for (auto& x : *v) x += 1;
  }
  Vec eh = Random(h * 2 * h, 49, 0.3), wte = Random(d.v_local * h, 50),
      wout = Random(d.v_local * h, 51);
  std::vector<int32_t> tokens(size_t(d.N())), targets(size_t(d.N()));
  for (int64_t i = 0; i < d.N(); ++i) {
    tokens[size_t(i)] = int32_t((i * 3 + 1) % 11);
    targets[size_t(i)] = i % d.s == d.s - 1 ? -1 : int32_t((i * 7 + 2) % 11);
  }
  DropoutCtx drop;
  drop.p = 0.2;
  drop.step = 2;
  const LayerCtx c = Ctx(&dev, d, drop);
  auto weights = [&]() {
    return MtpWeights{C(enorm_w),
                      C(enorm_b),
                      C(hnorm_w),
                      C(hnorm_b),
                      C(eh),
                      layer.W(),
                      {C(lnf_w), C(lnf_b), C(wout)},
                      C(wte)};
  };
  auto start = [&](MtpStash* st) {
    st->embedding.tokens = Tensor::Make(&dev, d.N(), DType::kI32, MemTag::kActivations).value();
    std::copy(tokens.begin(), tokens.end(), static_cast<int32_t*>(st->embedding.tokens.data()));
    st->head.targets = Tensor::Make(&dev, d.N(), DType::kI32, MemTag::kActivations).value();
    std::copy(targets.begin(), targets.end(), static_cast<int32_t*>(st->head.targets.data()));
  };
  auto objective = [&]() {
    MtpStash st;
    start(&st);
    double loss = 0;
    EXPECT_TRUE(MtpForward(c, weights(), 5, false, &st, C(hidden), {&loss, DType::kFp64, 1}).ok());
    const auto* out = static_cast<const double*>(st.head.ln_out.data());
    for (int64_t i = 0; i < nh; ++i) loss += out[i] * r[size_t(i)];
    return loss;
  };
  LayerParams g(d, 31);
  for (Vec* v : {&g.ln1_w, &g.ln1_b, &g.qkv_w, &g.qkv_b, &g.proj_w, &g.proj_b, &g.ln2_w, &g.ln2_b,
                 &g.fc1_w, &g.fc1_b, &g.fc2_w, &g.fc2_b}) {
    std::fill(v->begin(), v->end(), 0.0);
  }
  Vec denorm_w(hs), denorm_b(hs), dhnorm_w(hs), dhnorm_b(hs);
  Vec dlnf_w(hs), dlnf_b(hs), deh(eh.size()), dwte(wte.size()), dwout(wout.size());
  auto host = [&](const Tensor& t) {
    const auto* v = static_cast<const double*>(t.data());
    return Vec(v, v + nh);
  };
  MtpStash st;
  start(&st);
  double loss = 0;
  ASSERT_TRUE(MtpForward(c, weights(), 5, false, &st, C(hidden), {&loss, DType::kFp64, 1}).ok());
  const MtpGrads grads{M(denorm_w),
                       M(denorm_b),
                       M(dhnorm_w),
                       M(dhnorm_b),
                       M(deh),
                       g.G(),
                       {M(dlnf_w), M(dlnf_b), M(dwout)},
                       M(dwte)};
  Tensor dh;
  ASSERT_TRUE(MtpBackward(c, weights(), grads, 5, false, 1.0, &st, C(hidden), C(r), &dh).ok());
  const Vec dhidden = host(dh);
  CheckGrad("hidden", hidden, dhidden, objective);
  CheckGrad("enorm.weight", enorm_w, denorm_w, objective);
  CheckGrad("enorm.bias", enorm_b, denorm_b, objective);
  CheckGrad("hnorm.weight", hnorm_w, dhnorm_w, objective);
  CheckGrad("hnorm.bias", hnorm_b, dhnorm_b, objective);
  CheckGrad("eh_proj.weight", eh, deh, objective);
  CheckGrad("layer qkv.weight", layer.qkv_w, g.qkv_w, objective);
  CheckGrad("layer fc2.weight", layer.fc2_w, g.fc2_w, objective);
  CheckGrad("final_norm.weight", lnf_w, dlnf_w, objective);
  CheckGrad("final_norm.bias", lnf_b, dlnf_b, objective);
  CheckGrad("output", wout, dwout, objective);
  CheckGrad("embedding", wte, dwte, objective);
  // Without r, a position without a target reaches no loss: its rows' gradient is exactly zero.
  MtpStash again;
  start(&again);
  ASSERT_TRUE(MtpForward(c, weights(), 5, false, &again, C(hidden), {&loss, DType::kFp64, 1}).ok());
  ASSERT_TRUE(MtpBackward(c, weights(), grads, 5, false, 1.0, &again, C(hidden), {}, &dh).ok());
  const Vec dh0 = host(dh);
  for (int64_t row = d.s - 1; row < d.N(); row += d.s) {
    for (int64_t j = 0; j < h; ++j) EXPECT_EQ(dh0[size_t(row * h + j)], 0.0) << "row " << row;
  }
  EXPECT_GT(std::abs(dh0[0]), 0.0);
}

}  // namespace
}  // namespace ptdp::runtime
