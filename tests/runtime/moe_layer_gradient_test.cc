// The mixture-of-experts layer (runtime/model/moe_layer.h) against central finite differences, in
// double precision through the CPU backend's fp64 Ops: a Llama-style layer (RMSNorm, rotary,
// SwiGLU) whose MLP is 4 experts of 6 features, top 2, with and without dropout and with the
// auxiliary load-balancing loss; every gradient
// (the input's, the router's, each expert's, the norm's and the attention's) through the top-k
// choice, its softmax and the probability inside the expert. And its forward against the dense
// MLP it must equal when every expert holds the same weights (the probabilities add up to 1), and
// the stash's sizes against core/experts.h ExpertActivations' list.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kernels/reference/moe.h"
#include "runtime/model/gpt_layers.h"
#include "tests/runtime/gradient_check.h"
#include "tests/runtime/moe_fixture.h"

namespace ptdp::runtime {
namespace {

using namespace gradient_check;  // NOLINT(build/namespaces): the tests' shared helpers
using namespace moe_fixture;     // NOLINT(build/namespaces)

// The auxiliary loss's value from the forward's logits (the counts held constant, as the loss's
// gradient holds them): scale sum_g sum_e P_ge c_ge over the microbatch (one group) or each of its
// sequences (c.moe_aux_per_sequence), P the softmax over all E or the sigmoids over their sum.
double AuxLoss(const LayerCtx& c, const LayerStash& st, const double* bias) {
  const int64_t N = c.d.N(), E = kExperts, S = c.d.S();
  const auto* logits = static_cast<const double*>(st.router_logits.data());
  const int64_t groups = c.moe_aux_per_sequence ? c.d.b : 1;
  auto group = [&](int64_t token) { return c.moe_aux_per_sequence ? token / S : 0; };
  std::vector<double> probs(size_t(N * kTopK)), P(size_t(groups * E), 0.0), count(P.size(), 0.0);
  std::vector<int32_t> index(size_t(N * kTopK));
  kernels::MoeRouterTopK(
      probs.data(), index.data(), logits, N, E, kTopK,
      kernels::MoeRouterRule<double>{c.arch.moe_router_groups, c.arch.moe_router_group_topk,
                                     c.arch.moe_router_pre_softmax, c.arch.moe_router_sigmoid,
                                     c.arch.moe_router_topk_scale, bias});
  for (size_t i = 0; i < index.size(); ++i) {
    count[size_t(group(int64_t(i) / kTopK) * E + index[i])] += 1;
  }
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> score(static_cast<size_t>(E));
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) {
      const double l = logits[n * E + e];
      sum += score[size_t(e)] = c.arch.moe_router_sigmoid ? 1 / (1 + std::exp(-l)) : std::exp(l);
    }
    for (int64_t e = 0; e < E; ++e) P[size_t(group(n) * E + e)] += score[size_t(e)] / sum;
  }
  double aux = 0;
  for (size_t i = 0; i < P.size(); ++i) aux += P[i] * count[i];
  return c.moe_aux_grad * aux;
}

// The router z-loss's value from the forward's logits: scale sum_r lse_r^2.
double ZLoss(const LayerCtx& c, const LayerStash& st) {
  const int64_t N = c.d.N(), E = kExperts;
  const auto* logits = static_cast<const double*>(st.router_logits.data());
  double z = 0;
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += std::exp(logits[n * E + e]);
    z += std::log(sum) * std::log(sum);
  }
  return c.moe_z_grad * z;
}

// DeepSeek-V3's router rule: sigmoid scores, the top k's scaling factor, and an expert bias
// (empty: none) that moves the choice; and the auxiliary loss per sequence (seq_aux_loss).
struct SigmoidRouting {
  bool on = false;
  double scale = 1.0;
  Vec bias;
  bool per_sequence = false;
};

void MoeLayerCase(double dropout, double aux = 0, int64_t shared_f = 0, int groups = 0,
                  double zloss = 0, bool pre_softmax = false, bool shared_gate = false,
                  const SigmoidRouting& sigmoid = {}) {
  CpuDevice dev;
  LayerCtx c = MoeCtx(&dev, dropout);
  c.arch.moe_router_pre_softmax = pre_softmax;
  c.arch.moe_router_sigmoid = sigmoid.on;
  c.arch.moe_router_topk_scale = sigmoid.scale;
  c.moe_aux_per_sequence = sigmoid.per_sequence;
  const double* bias = sigmoid.bias.empty() ? nullptr : sigmoid.bias.data();
  c.moe_aux_grad = aux;
  c.moe_z_grad = zloss;
  c.d.shared_f_local = shared_f;
  c.arch.moe_router_groups = groups;
  c.arch.moe_router_group_topk = groups > 0 ? 1 : 0;
  const int64_t nh = c.d.N() * c.d.h;
  MoeParams p(c.d, kExperts, false, shared_gate);
  std::vector<int64_t> tokens(kExperts, 0);
  auto weights = [&](bool count) {
    LayerWeights w = p.W();
    if (!sigmoid.bias.empty()) w.expert_bias = C(sigmoid.bias);
    if (count) w.expert_tokens = tokens.data();
    return w;
  };
  Vec x = Random(nh, 11, 1.0), r = Random(nh, 12, 1.0);
  auto objective = [&]() {
    LayerStash st;
    EXPECT_TRUE(AllocLayerInput(c, &st).ok());
    gradient_check::Put(st.x, x);
    Vec y(static_cast<size_t>(nh));
    EXPECT_TRUE(LayerForward(c, weights(false), 1, MemTag::kActivations, &st, M(y)).ok());
    double s = (aux != 0 ? AuxLoss(c, st, bias) : 0.0) + (zloss != 0 ? ZLoss(c, st) : 0.0);
    for (int64_t i = 0; i < nh; ++i) s += y[i] * r[i];
    return s;
  };
  MoeParams g(c.d, kExperts, false, shared_gate);
  g.Zero();
  LayerStash st;
  ASSERT_TRUE(AllocLayerInput(c, &st).ok());
  gradient_check::Put(st.x, x);
  Vec y(static_cast<size_t>(nh)), dx(static_cast<size_t>(nh));
  ASSERT_TRUE(LayerForward(c, weights(false), 1, MemTag::kActivations, &st, M(y)).ok());
  // The stash as core/experts.h lists it: router input, logits, probabilities, then the N k
  // token copies' fc1 input, SwiGLU input and fc2 input.
  const int64_t N = c.d.N(), copies = N * kTopK, f = c.d.expert_f_local;
  EXPECT_EQ(st.ln2_out.count(), nh);
  EXPECT_EQ(st.router_logits.count(), N * kExperts);
  EXPECT_EQ(st.router_probs.count(), N * kTopK);
  EXPECT_EQ(st.moe_in.count(), copies * c.d.h);
  EXPECT_EQ(st.fc1_out.count(), copies * 2 * f);
  EXPECT_EQ(st.gelu_out.count(), copies * f);
  EXPECT_EQ(st.shared_fc1_out.count(), N * 2 * shared_f);  // the shared expert's, on every token
  EXPECT_EQ(st.shared_act.count(), N * shared_f);
  const auto* probs = static_cast<const double*>(st.router_probs.data());
  for (int64_t n = 0; n < N; ++n) {  // renormalised (and scaled), or part of the softmax over all 4
    const double sum = probs[2 * n] + probs[2 * n + 1];
    if (pre_softmax) {
      EXPECT_LT(sum, 1.0);
    } else {
      EXPECT_NEAR(sum, sigmoid.scale, 1e-12);
    }
  }
  // The backward also adds the loss's value (moe_aux_value_scale sum_e P_e c_e) for the log.
  const double want_aux = aux != 0 ? AuxLoss(c, st, bias) : 0.0;
  const double want_z = zloss != 0 ? ZLoss(c, st) : 0.0;
  double got_aux = 0, got_z = 0;
  LayerCtx back_ctx = c;
  back_ctx.moe_aux_value_scale = aux;
  back_ctx.moe_aux_sum = &got_aux;
  back_ctx.moe_z_value_scale = zloss;
  back_ctx.moe_z_sum = &got_z;
  const Status back = LayerBackward(back_ctx, weights(true), g.G(), 1, &st, C(r), M(dx));
  ASSERT_TRUE(back.ok()) << back.ToString();
  // The backward counted the microbatch's tokens per expert once: N k in all.
  int64_t counted = 0;
  for (int64_t t : tokens) counted += t;
  EXPECT_EQ(counted, N * kTopK);
  EXPECT_NEAR(got_aux, want_aux, 1e-12 * std::max(1.0, std::abs(want_aux)));
  EXPECT_NEAR(got_z, want_z, 1e-12 * std::max(1.0, std::abs(want_z)));
  EXPECT_TRUE(st.router_logits.empty() && st.moe_in.empty() && st.shared_act.empty());  // freed
  CheckGrad("x", x, dx, objective);
  CheckGrad("ln2.weight", p.ln2_w, g.ln2_w, objective);
  CheckGrad("router.weight", p.router_w, g.router_w, objective, 40);
  for (int e = 0; e < kExperts; ++e) {
    CheckGrad("expert.fc1.weight", p.fc1[size_t(e)], g.fc1[size_t(e)], objective);
    CheckGrad("expert.fc2.weight", p.fc2[size_t(e)], g.fc2[size_t(e)], objective);
  }
  if (shared_f > 0) {
    CheckGrad("shared.fc1.weight", p.shared_fc1, g.shared_fc1, objective);
    CheckGrad("shared.fc2.weight", p.shared_fc2, g.shared_fc2, objective);
  }
  if (shared_gate) CheckGrad("shared.gate.weight", p.shared_gate, g.shared_gate, objective);
  CheckGrad("qkv.weight", p.qkv_w, g.qkv_w, objective);
  CheckGrad("ln1.weight", p.ln1_w, g.ln1_w, objective);
}

TEST(MoeLayerGradient, LayerMatchesFiniteDifferences) {
  MoeLayerCase(0.0);
}
TEST(MoeLayerGradient, LayerWithDropoutMatchesFiniteDifferences) {
  MoeLayerCase(0.2);
}
// With a shared expert of 5 features (DeepSeek's kind: no gate) beside the routed ones.
TEST(MoeLayerGradient, SharedExpertMatchesFiniteDifferences) {
  MoeLayerCase(0.2, 0.0, 5);
}
// With Qwen2-MoE's gate on the shared expert (sigmoid of x . w_gate per token), with dropout and
// pre-softmax routing (Qwen2-MoE's norm_topk_prob false).
TEST(MoeLayerGradient, GatedSharedExpertMatchesFiniteDifferences) {
  MoeLayerCase(0.2, 0.0, 5, 0, 0.0, true, true);
}
// Group-limited routing: 2 groups of 2 experts, each token's 2 from its best group (with the
// auxiliary loss, whose counts follow the limited choice).
TEST(MoeLayerGradient, GroupLimitedRoutingMatchesFiniteDifferences) {
  MoeLayerCase(0.0, 0.37, 0, 2);
}
// Pre-softmax routing (the top 2's values of the softmax over all 4, unrenormalised), with group-
// limited routing on those values and the auxiliary loss: DeepSeek-V2's router.
TEST(MoeLayerGradient, PreSoftmaxRoutingMatchesFiniteDifferences) {
  MoeLayerCase(0.2, 0.37, 0, 2, 0.0, true);
}
// DeepSeek-V3's router: sigmoid scores renormalised over the top 2 and scaled by 2.5, with
// group-limited routing and a shared expert; and with an expert bias large enough to move choices
// (it has no gradient: the choice is piecewise constant in it).
TEST(MoeLayerGradient, SigmoidRoutingMatchesFiniteDifferences) {
  MoeLayerCase(0.2, 0.0, 5, 2, 0.0, false, false, {true, 2.5, {}});
}
TEST(MoeLayerGradient, BiasedSigmoidRoutingMatchesFiniteDifferences) {
  MoeLayerCase(0.0, 0.0, 0, 0, 0.29, false, false, {true, 2.5, {0.3, -0.2, 0.1, -0.3}});
}
// The auxiliary loss per sequence (Megatron-Core's seq_aux_loss: each of the 2 sequences' own
// counts and scores), with the softmax, and with DeepSeek-V3's sigmoid scores (normalised over
// each token's E for the loss), group-limited and biased.
TEST(MoeLayerGradient, SequenceAuxLossMatchesFiniteDifferences) {
  MoeLayerCase(0.2, 0.37, 0, 0, 0.0, false, false, {false, 1.0, {}, true});
}
TEST(MoeLayerGradient, SigmoidAuxLossMatchesFiniteDifferences) {
  MoeLayerCase(0.0, 0.37, 0, 2, 0.0, false, false, {true, 2.5, {0.3, -0.2, 0.1, -0.3}, false});
}
TEST(MoeLayerGradient, SigmoidSequenceAuxLossMatchesFiniteDifferences) {
  MoeLayerCase(0.2, 0.37, 5, 0, 0.0, false, false, {true, 2.5, {}, true});
}
// With the router z-loss (its scale large enough to dominate the router's gradient) and dropout.
TEST(MoeLayerGradient, ZLossMatchesFiniteDifferences) {
  MoeLayerCase(0.2, 0.0, 0, 0, 0.29);
}
// With the auxiliary load-balancing loss (its scale large enough to dominate the router's).
TEST(MoeLayerGradient, AuxLossMatchesFiniteDifferences) {
  MoeLayerCase(0.0, 0.37);
}

// Token dropping (runtime/model/moe_route.h) in the layer, 2 sequences of 5 tokens, top 2 of 4:
// the gradients through the kept copies (a dropped copy's weight has none), with dropout, and with
// the auxiliary loss, whose counts are the router's choices before dropping (Megatron-Core's).
// Factor 0.5 keeps ceil(2.5 x 0.5) = 2 copies an expert in a sequence; padded with factor 1, every
// expert runs 3 a sequence, 24 in all, the padding's of weight 0.
struct Dropping {
  double factor = 0.5;
  bool by_position = false, pad = false;
  double aux = 0;
};

void DroppingCase(const Dropping& drop) {
  CpuDevice dev;
  LayerCtx c = MoeCtx(&dev, 0.2);
  c.arch.moe_capacity_factor = drop.factor;
  c.arch.moe_drop_by_position = drop.by_position;
  c.arch.moe_pad_to_capacity = drop.pad;
  c.moe_aux_grad = drop.aux;
  const int64_t nh = c.d.N() * c.d.h, N = c.d.N();
  MoeParams p(c.d, kExperts);
  Vec x = Random(nh, 11, 1.0);
  const Vec r = Random(nh, 12, 1.0);
  auto forward = [&](const LayerCtx& ctx, LayerStash* st, Vec* y) {
    EXPECT_TRUE(AllocLayerInput(ctx, st).ok());
    gradient_check::Put(st->x, x);
    EXPECT_TRUE(LayerForward(ctx, p.W(), 1, MemTag::kActivations, st, M(*y)).ok());
  };
  auto objective = [&]() {
    LayerStash st;
    Vec y(static_cast<size_t>(nh));
    forward(c, &st, &y);
    double s = drop.aux != 0 ? AuxLoss(c, st, nullptr) : 0.0;
    for (int64_t i = 0; i < nh; ++i) s += y[i] * r[i];
    return s;
  };
  MoeParams g(c.d, kExperts);
  g.Zero();
  std::vector<int64_t> tokens(kExperts, 0);
  LayerWeights counted = p.W();
  counted.expert_tokens = tokens.data();
  LayerStash st;
  Vec y(static_cast<size_t>(nh)), dx(static_cast<size_t>(nh));
  forward(c, &st, &y);
  const int64_t copies = st.moe_in.count() / c.d.h;
  ASSERT_TRUE(LayerBackward(c, counted, g.G(), 1, &st, C(r), M(dx)).ok());
  // The experts' counts are the copies they ran (Megatron-Core's bias counts, padding included).
  int64_t ran = 0;
  for (int64_t t : tokens) ran += t;
  EXPECT_EQ(ran, copies);
  if (drop.pad) {
    EXPECT_EQ(copies, 2 * kExperts * 3);
  } else {
    EXPECT_LE(copies, 2 * kExperts * 2);
    EXPECT_LT(copies, N * kTopK);  // some dropped
  }
  // Without dropping, the same layer's output differs (the drops change it).
  LayerCtx dropless = c;
  dropless.arch.moe_capacity_factor = 0;
  dropless.arch.moe_drop_by_position = dropless.arch.moe_pad_to_capacity = false;
  LayerStash st_all;
  Vec y_all(static_cast<size_t>(nh));
  forward(dropless, &st_all, &y_all);
  double moved = 0;
  for (int64_t i = 0; i < nh; ++i) moved = std::max(moved, std::abs(y[i] - y_all[i]));
  EXPECT_GT(moved, 1e-3);
  CheckGrad("x", x, dx, objective);
  CheckGrad("ln2.weight", p.ln2_w, g.ln2_w, objective);
  CheckGrad("router.weight", p.router_w, g.router_w, objective, 40);
  for (int e = 0; e < kExperts; ++e) {
    CheckGrad("expert.fc1.weight", p.fc1[size_t(e)], g.fc1[size_t(e)], objective);
    CheckGrad("expert.fc2.weight", p.fc2[size_t(e)], g.fc2[size_t(e)], objective);
  }
}

TEST(MoeLayerGradient, TokenDroppingByProbabilityMatchesFiniteDifferences) {
  DroppingCase({});
}
TEST(MoeLayerGradient, TokenDroppingByPositionMatchesFiniteDifferences) {
  DroppingCase({0.5, true, false, 0.37});
}
TEST(MoeLayerGradient, TokenDroppingPaddedMatchesFiniteDifferences) {
  DroppingCase({1.0, false, true});
}

// A capacity over a sequence's tokens (factor 4: ceil(2.5 x 4) = 10 of 5) drops nothing: the
// layer is the dropless one to the last bit; padded, every expert also runs every other token at
// weight 0, which adds exact zeros.
TEST(MoeLayer, ACapacityOverTheTokensIsDropless) {
  CpuDevice dev;
  const LayerCtx dropless = MoeCtx(&dev, 0.1);
  const int64_t nh = dropless.d.N() * dropless.d.h;
  MoeParams p(dropless.d, kExperts);
  const Vec x = Random(nh, 31, 1.0);
  auto forward = [&](const LayerCtx& ctx, Vec* y) {
    LayerStash st;
    EXPECT_TRUE(AllocLayerInput(ctx, &st).ok());
    gradient_check::Put(st.x, x);
    EXPECT_TRUE(LayerForward(ctx, p.W(), 1, MemTag::kActivations, &st, M(*y)).ok());
    return st.moe_in.count() / ctx.d.h;
  };
  Vec want(static_cast<size_t>(nh));
  EXPECT_EQ(forward(dropless, &want), dropless.d.N() * kTopK);
  for (bool pad : {false, true}) {
    LayerCtx c = dropless;
    c.arch.moe_capacity_factor = 4;
    c.arch.moe_pad_to_capacity = pad;
    Vec y(static_cast<size_t>(nh));
    EXPECT_EQ(forward(c, &y), pad ? kExperts * c.d.N() : c.d.N() * kTopK);
    for (int64_t i = 0; i < nh; ++i) ASSERT_EQ(y[i], want[i]) << "pad " << pad << " at " << i;
  }
}

// Three experts alike, two of them per token: the probabilities add up to 1, so the layer is the
// dense SwiGLU MLP of those weights, and the router's gradient is zero (no choice changes it).
TEST(MoeLayer, ExpertsAlikeAreTheDenseMlp) {
  CpuDevice dev;
  const LayerCtx moe = MoeCtx(&dev, 0.1, 3, 2);
  LayerCtx dense = moe;
  dense.d.f_local = moe.d.expert_f_local;
  const int64_t nh = moe.d.N() * moe.d.h;
  MoeParams p(moe.d, 3, /*alike=*/true);
  LayerWeights dw = p.W();
  dw.router_w = {};
  dw.fc1_w = dw.expert_fc1[0];
  dw.fc2_w = dw.expert_fc2[0];
  dw.expert_fc1.clear();
  dw.expert_fc2.clear();
  const Vec x = Random(nh, 31, 1.0);
  Vec y_moe(static_cast<size_t>(nh)), y_dense(static_cast<size_t>(nh));
  auto forward = [&](const LayerCtx& ctx, const LayerWeights& w, Vec* y) {
    LayerStash st;
    ASSERT_TRUE(AllocLayerInput(ctx, &st).ok());
    gradient_check::Put(st.x, x);
    ASSERT_TRUE(LayerForward(ctx, w, 1, MemTag::kActivations, &st, M(*y)).ok());
  };
  forward(moe, p.W(), &y_moe);
  forward(dense, dw, &y_dense);
  double worst = 0;
  for (int64_t i = 0; i < nh; ++i) worst = std::max(worst, std::abs(y_moe[i] - y_dense[i]));
  EXPECT_LT(worst, 1e-12);
  MoeParams g(moe.d, 3, true);
  g.Zero();
  LayerStash st;
  ASSERT_TRUE(AllocLayerInput(moe, &st).ok());
  gradient_check::Put(st.x, x);
  Vec dx(static_cast<size_t>(nh));
  ASSERT_TRUE(LayerForward(moe, p.W(), 1, MemTag::kActivations, &st, M(y_moe)).ok());
  ASSERT_TRUE(LayerBackward(moe, p.W(), g.G(), 1, &st, C(Random(nh, 32, 1.0)), M(dx)).ok());
  for (double v : g.router_w) EXPECT_NEAR(v, 0.0, 1e-12);
}

// The router's kernel: the k largest logits (the lower expert first on a tie) and their softmax.
TEST(MoeKernels, TopKTakesTheLargestAndBreaksTiesToTheLowerExpert) {
  const std::vector<double> logits{0.5, 2.0, 2.0, -1.0, /**/ 3.0, 0.0, 1.0, 3.0};
  std::vector<double> probs(4);
  std::vector<int32_t> index(4);
  kernels::MoeRouterTopK(probs.data(), index.data(), logits.data(), 2, 4, 2);
  EXPECT_EQ(index, (std::vector<int32_t>{1, 2, 0, 3}));
  for (double p : probs) EXPECT_DOUBLE_EQ(p, 0.5);
  const std::vector<double> skewed{0.0, std::log(3.0), -5.0};
  kernels::MoeRouterTopK(probs.data(), index.data(), skewed.data(), 1, 3, 2);
  EXPECT_EQ(index[0], 1);
  EXPECT_EQ(index[1], 0);
  EXPECT_NEAR(probs[0], 0.75, 1e-15);
  EXPECT_NEAR(probs[1], 0.25, 1e-15);
}

// Pre-softmax: the top k's values of the softmax over all E, as they are; the backward through that
// softmax reaches every logit.
TEST(MoeKernels, PreSoftmaxKeepsTheFullSoftmaxValues) {
  const std::vector<double> logits{0.0, std::log(3.0), std::log(2.0), 0.0};  // softmax 1,3,2,1 / 7
  std::vector<double> probs(2), dlogits(4);
  std::vector<int32_t> index(2);
  const kernels::MoeRouterRule<double> pre{0, 0, true};
  kernels::MoeRouterTopK(probs.data(), index.data(), logits.data(), 1, 4, 2, pre);
  EXPECT_EQ(index, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(probs[0], 3.0 / 7, 1e-15);
  EXPECT_NEAR(probs[1], 2.0 / 7, 1e-15);
  const std::vector<double> dprobs{1.0, 0.0};  // d(p_1)/d(l_e) = p_1 (1[e = 1] - s_e)
  kernels::MoeRouterTopKBackward(dlogits.data(), dprobs.data(), probs.data(), index.data(),
                                 logits.data(), 1, 4, 2, pre);
  EXPECT_NEAR(dlogits[0], -3.0 / 49, 1e-15);
  EXPECT_NEAR(dlogits[1], 3.0 / 7 * (1 - 3.0 / 7), 1e-15);
  EXPECT_NEAR(dlogits[2], -6.0 / 49, 1e-15);
  EXPECT_NEAR(dlogits[3], -3.0 / 49, 1e-15);
}

// Group-limited routing: 6 experts in 3 groups of 2, the best group_topk of them by the sum of
// their k / group_topk largest logits, then the top k of those groups' experts.
TEST(MoeKernels, GroupLimitedTopKChoosesWithinTheBestGroups) {
  // Groups {0, 1}: 2.0 + 1.9 = 3.9; {2, 3}: 3.0 + -5 = -2; {4, 5}: 1.0 + 1.0 = 2.
  const std::vector<double> logits{2.0, 1.9, 3.0, -5.0, 1.0, 1.0};
  std::vector<double> probs(2);
  std::vector<int32_t> index(2);
  // One group, top 2 (each group scored by its 2 largest): group {0, 1}, though expert 2 is the
  // largest logit of all.
  kernels::MoeRouterTopK(probs.data(), index.data(), logits.data(), 1, 6, 2, {3, 1});
  EXPECT_EQ(index, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(probs[0], 1.0 / (1.0 + std::exp(-0.1)), 1e-15);
  // Two groups, top 2 (each scored by its largest): {2, 3} (3.0) and {0, 1} (2.0); 2 and 0.
  kernels::MoeRouterTopK(probs.data(), index.data(), logits.data(), 1, 6, 2, {3, 2});
  EXPECT_EQ(index, (std::vector<int32_t>{2, 0}));
  // Without groups: 2 and 0 as well; with one group scored by its single largest (top 1), {2, 3}.
  kernels::MoeRouterTopK(probs.data(), index.data(), logits.data(), 1, 6, 1, {3, 1});
  EXPECT_EQ(index[0], 2);
}

// Sigmoid scores (DeepSeek-V3's): chosen by sigmoid plus the bias, weighed by the sigmoids alone
// over their sum, times the scale; the backward through the sum into the chosen logits only.
TEST(MoeKernels, SigmoidRoutingChoosesByTheBiasAndWeighsWithout) {
  const std::vector<double> logits{1.0, 0.5, 0.0, -1.0};
  auto sig = [](double l) { return 1.0 / (1.0 + std::exp(-l)); };
  std::vector<double> probs(2), dlogits(4);
  std::vector<int32_t> index(2);
  kernels::MoeRouterRule<double> rule;
  rule.sigmoid = true;
  rule.scale = 2.5;
  kernels::MoeRouterTopK(probs.data(), index.data(), logits.data(), 1, 4, 2, rule);
  EXPECT_EQ(index, (std::vector<int32_t>{0, 1}));
  const double s0 = sig(1.0), s1 = sig(0.5), s3 = sig(-1.0);
  EXPECT_NEAR(probs[0], 2.5 * s0 / (s0 + s1), 1e-15);
  // A bias of +0.4 on expert 3 (sigmoid 0.27 + 0.4 = 0.67 > expert 1's 0.62) takes it in, weighed
  // by its sigmoid alone.
  const std::vector<double> bias{0.0, 0.0, 0.0, 0.4};
  rule.bias = bias.data();
  kernels::MoeRouterTopK(probs.data(), index.data(), logits.data(), 1, 4, 2, rule);
  EXPECT_EQ(index, (std::vector<int32_t>{0, 3}));
  EXPECT_NEAR(probs[1], 2.5 * s3 / (s0 + s3), 1e-15);
  // d p_0 / d l_3 = -2.5 s0 s3 (1 - s3) / (s0 + s3)^2; nothing into the unchosen.
  const std::vector<double> dprobs{1.0, 0.0};
  kernels::MoeRouterTopKBackward(dlogits.data(), dprobs.data(), probs.data(), index.data(),
                                 logits.data(), 1, 4, 2, rule);
  EXPECT_NEAR(dlogits[3], -2.5 * s0 * s3 * (1 - s3) / ((s0 + s3) * (s0 + s3)), 1e-15);
  EXPECT_NEAR(dlogits[0], 2.5 * s0 * (1 - s0) * s3 / ((s0 + s3) * (s0 + s3)), 1e-15);
  EXPECT_EQ(dlogits[1], 0.0);
  EXPECT_EQ(dlogits[2], 0.0);
}

}  // namespace
}  // namespace ptdp::runtime
