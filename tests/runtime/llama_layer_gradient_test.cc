// Llama-style layers (runtime/model LayerArch) against central finite differences, in double
// precision through the CPU backend's fp64 Ops: RMSNorm, rotary embeddings of q and k,
// grouped-query attention (two query heads per key/value head), SwiGLU and no biases but QKV's
// (Qwen2's), with and without dropout, fused and unfused attention, whole and split backward;
// Qwen3's QK norm with heads of their own width (head_dim 6 at h 16); and the head with its final
// RMSNorm. The kernels' own identities (the rotation's inverse, the
// group's shared keys) are checked alongside.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "kernels/reference/ops.h"
#include "kernels/reference/qkv_layout.h"
#include "runtime/model/gpt_layers.h"
#include "tests/runtime/gradient_check.h"

namespace ptdp::runtime {
namespace {

using namespace gradient_check;  // NOLINT(build/namespaces): the tests' shared helpers

// h 16, 4 query heads of 4 over 2 key/value heads, SwiGLU of 12 features.
LayerDims LlamaDims() {
  LayerDims d;
  d.b = 2;
  d.s = 5;
  d.h = 16;
  d.heads = 4;
  d.heads_local = 4;
  d.kv_heads_local = 2;
  d.f_local = 12;
  d.v_local = 16;
  d.vocab_real = 11;
  return d;
}

LayerCtx LlamaCtx(Device* dev, double dropout, bool qwen3 = false) {
  LayerCtx c;
  c.dev = dev;
  c.d = LlamaDims();
  c.arch = {true, true, true, {500.0}};  // a small base: every pair turns noticeably at s = 5
  if (qwen3) {                           // 4 heads of 6: the attention 24 wide at h 16
    c.d.head_dim = 6;
    c.arch.qk_norm = true;
  }
  c.types = {DType::kFp64, DType::kFp64};
  c.drop.p = dropout;
  c.drop.step = 2;
  c.drop.seq0 = 3;
  return c;
}

// The layer's tensors: norms without biases, QKV with its bias, the rest without; the QK norm's
// two head-wide weights when `qk`.
struct LlamaParams {
  Vec ln1_w, qkv_w, qkv_b, proj_w, ln2_w, fc1_w, fc2_w, q_norm_w, k_norm_w;
  bool qk = false;
  LlamaParams(const LayerDims& d, bool qk_norm) : qk(qk_norm) {
    const int64_t h = d.h, f = d.f_local, qkv = d.QkvWidth(), attn = d.heads_local * d.D();
    ln1_w = Random(h, 1, 0.2);
    for (auto& v : ln1_w) v += 1;
    qkv_w = Random(qkv * h, 2, 0.3);
    qkv_b = Random(qkv, 3, 0.1);
    proj_w = Random(h * attn, 4, 0.3);
    ln2_w = Random(h, 5, 0.2);
    for (auto& v : ln2_w) v += 1;
    fc1_w = Random(2 * f * h, 6, 0.3);
    fc2_w = Random(h * f, 7, 0.3);
    q_norm_w = Random(d.D(), 8, 0.3);
    k_norm_w = Random(d.D(), 9, 0.3);
    for (Vec* v : {&q_norm_w, &k_norm_w}) {
      for (auto& e : *v) e += 1;
    }
  }
  LayerWeights W() const {
    return {C(ln1_w),
            {},
            C(qkv_w),
            C(qkv_b),
            C(proj_w),
            {},
            C(ln2_w),
            {},
            C(fc1_w),
            {},
            C(fc2_w),
            {},
            qk ? C(q_norm_w) : ConstRef{},
            qk ? C(k_norm_w) : ConstRef{},
            {},
            {},
            {},
            {},
            {},
            {},
            {},
            nullptr,
            {},
            {},
            {},
            {},
            {}};
  }
  LayerGrads G() {
    return {M(ln1_w),
            {},
            M(qkv_w),
            M(qkv_b),
            M(proj_w),
            {},
            M(ln2_w),
            {},
            M(fc1_w),
            {},
            M(fc2_w),
            {},
            qk ? M(q_norm_w) : TensorRef{},
            qk ? M(k_norm_w) : TensorRef{},
            {},
            {},
            {},
            {},
            {},
            {},
            {},
            {},
            {},
            {},
            {}};
  }
  void Zero() {
    for (Vec* v : {&ln1_w, &qkv_w, &qkv_b, &proj_w, &ln2_w, &fc1_w, &fc2_w, &q_norm_w, &k_norm_w}) {
      std::fill(v->begin(), v->end(), 0.0);
    }
  }
};

void LlamaLayerCase(double dropout, bool fused, bool split, bool qwen3 = false) {
  CpuDevice dev;
  LayerCtx c = LlamaCtx(&dev, dropout, qwen3);
  c.fused_attention = fused;
  const int64_t nh = c.d.N() * c.d.h;
  LlamaParams p(c.d, qwen3);
  Vec x = Random(nh, 11, 1.0), r = Random(nh, 12, 1.0);
  auto objective = [&]() {
    LayerStash st;
    EXPECT_TRUE(AllocLayerInput(c, &st).ok());
    Put(st.x, x);
    Vec y(static_cast<size_t>(nh));
    EXPECT_TRUE(LayerForward(c, p.W(), 1, MemTag::kActivations, &st, M(y)).ok());
    double s = 0;
    for (int64_t i = 0; i < nh; ++i) s += y[i] * r[i];
    return s;
  };
  LlamaParams g(c.d, qwen3);
  g.Zero();
  LayerStash st;
  ASSERT_TRUE(AllocLayerInput(c, &st).ok());
  Put(st.x, x);
  Vec y(static_cast<size_t>(nh)), dx(static_cast<size_t>(nh));
  ASSERT_TRUE(LayerForward(c, p.W(), 1, MemTag::kActivations, &st, M(y)).ok());
  // RMSNorm keeps no mean; SwiGLU's input is each feature's gate and up.
  EXPECT_TRUE(st.ln1_mean.empty() && st.ln2_mean.empty());
  EXPECT_EQ(st.fc1_out.count(), 2 * st.gelu_out.count());
  const int64_t head = qwen3 ? 6 : 4;
  EXPECT_EQ(st.qkv.count(), c.d.N() * (4 + 2 * 2) * head);
  EXPECT_EQ(st.attn_out.count(), c.d.N() * 4 * head);
  // The QK norm's stash: the 4 query and 2 key rows before the norm, and their 1/rms.
  EXPECT_EQ(st.qk_in.count(), qwen3 ? c.d.N() * (4 + 2) * head : 0);
  EXPECT_EQ(st.qk_rstd.count(), qwen3 ? c.d.N() * (4 + 2) : 0);
  WeightGradQueue queue;
  LayerCtx backward = c;
  if (split) backward.defer_weight_grads = &queue;
  ASSERT_TRUE(LayerBackward(backward, p.W(), g.G(), 1, &st, C(r), M(dx)).ok());
  if (split) {
    ASSERT_TRUE(RunDeferredWeightGrads(backward, &queue).ok());
  }
  CheckGrad("x", x, dx, objective);
  CheckGrad("ln1.weight", p.ln1_w, g.ln1_w, objective);
  CheckGrad("qkv.weight", p.qkv_w, g.qkv_w, objective);
  CheckGrad("qkv.bias", p.qkv_b, g.qkv_b, objective);
  CheckGrad("proj.weight", p.proj_w, g.proj_w, objective);
  CheckGrad("ln2.weight", p.ln2_w, g.ln2_w, objective);
  CheckGrad("fc1.weight", p.fc1_w, g.fc1_w, objective);
  CheckGrad("fc2.weight", p.fc2_w, g.fc2_w, objective);
  if (qwen3) {
    CheckGrad("q_norm.weight", p.q_norm_w, g.q_norm_w, objective);
    CheckGrad("k_norm.weight", p.k_norm_w, g.k_norm_w, objective);
  }
}

TEST(LlamaLayerGradient, LayerMatchesFiniteDifferences) {
  LlamaLayerCase(0.0, false, false);
}
TEST(LlamaLayerGradient, LayerWithDropoutMatchesFiniteDifferences) {
  LlamaLayerCase(0.2, false, false);
}
TEST(LlamaLayerGradient, FusedAttentionLayerMatchesFiniteDifferences) {
  LlamaLayerCase(0.2, true, false);
}
TEST(LlamaLayerGradient, SplitBackwardLayerMatchesFiniteDifferences) {
  LlamaLayerCase(0.2, true, true);
}

// Qwen3's attention: QK norm before the rotation, heads 6 wide at h 16 (proj reads 24 features).
TEST(LlamaLayerGradient, QkNormHeadDimLayerMatchesFiniteDifferences) {
  LlamaLayerCase(0.0, false, false, true);
}
TEST(LlamaLayerGradient, QkNormHeadDimFusedSplitWithDropoutMatchesFiniteDifferences) {
  LlamaLayerCase(0.2, true, true, true);
}

TEST(LlamaLayerGradient, HeadWithRmsNormMatchesFiniteDifferences) {
  CpuDevice dev;
  const LayerCtx c = LlamaCtx(&dev, 0.0);
  const LayerDims& d = c.d;
  const int64_t nh = d.N() * d.h;
  Vec x = Random(nh, 21, 1.0), lw = Random(d.h, 22, 0.2), wout = Random(d.v_local * d.h, 23);
  for (auto& v : lw) v += 1;
  std::vector<int32_t> targets(static_cast<size_t>(d.N()));
  for (size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<int32_t>((i * 5) % 11);
  const HeadWeights w{C(lw), {}, C(wout)};
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
  EXPECT_TRUE(st.ln_mean.empty());
  Vec dlw(lw.size()), dwout(wout.size()), dx(static_cast<size_t>(nh));
  ASSERT_TRUE(HeadBackward(c, w, {M(dlw), {}, M(dwout)}, 1.0, &st, M(dx)).ok());
  CheckGrad("x", x, dx, objective);
  CheckGrad("final_norm.weight", lw, dlw, objective);
  CheckGrad("output", wout, dwout, objective);
}

// The rotation keeps every vector's length, leaves the values alone, turns position 0 by
// nothing, and its inverse undoes it exactly (to rounding).
TEST(LlamaKernels, RotaryTurnsQueriesAndKeysAndInverts) {
  kernels::RotaryDims r;
  r.b = 2;
  r.s = 6;
  r.h = 4;
  r.d = 8;
  r.group = 2;
  r.rope.base = 100;
  const kernels::QkvLayout row{r.h, r.d, r.group};
  const Vec qkv = Random(r.b * r.s * row.Width(), 31);
  Vec turned = qkv;
  kernels::RotaryEmbedding(turned.data(), r, false);
  auto norm = [&](const Vec& v, int64_t at) {
    double s = 0;
    for (int64_t e = 0; e < r.d; ++e) s += v[at + e] * v[at + e];
    return s;
  };
  bool moved = false;
  for (int64_t n = 0; n < r.b * r.s; ++n) {
    const int64_t base = n * row.Width(), pos = n % r.s;
    for (int64_t hh = 0; hh < r.h; ++hh) {
      EXPECT_NEAR(norm(turned, base + row.Q(hh)), norm(qkv, base + row.Q(hh)), 1e-12);
      for (int64_t e = 0; e < r.d; ++e) {
        EXPECT_EQ(turned[base + row.V(hh) + e], qkv[base + row.V(hh) + e]);  // values stay
        if (pos == 0) {
          EXPECT_NEAR(turned[base + row.K(hh) + e], qkv[base + row.K(hh) + e], 1e-15);
        }
        if (pos > 0 && std::abs(turned[base + row.K(hh) + e] - qkv[base + row.K(hh) + e]) > 1e-3) {
          moved = true;
        }
      }
    }
  }
  EXPECT_TRUE(moved);
  kernels::RotaryEmbedding(turned.data(), r, true);
  for (size_t i = 0; i < qkv.size(); ++i) EXPECT_NEAR(turned[i], qkv[i], 1e-12);
}

// Partial rotation (model.rotary_percent; Nemotron-4's 0.5): a head of 12 features at 0.5 turns
// its first 6 exactly as a whole head of 6 turns (pairs (e, e + 3), frequencies over 6) and
// leaves its last 6 alone; values untouched.
TEST(LlamaKernels, PartialRotaryTurnsTheLeadingFeaturesAsAHeadOfThatWidth) {
  kernels::RotaryDims part;
  part.b = 1;
  part.s = 5;
  part.h = 2;
  part.d = 12;
  part.rope.base = 100;
  part.rope.percent = 0.5;
  ASSERT_EQ(kernels::RotatedFeatures(part.d, part.rope), 6);
  kernels::RotaryDims whole = part;
  whole.d = 6;
  whole.rope.percent = 1;
  const kernels::QkvLayout wide{part.h, part.d, 1}, narrow{whole.h, whole.d, 1};
  const Vec qkv = Random(part.s * wide.Width(), 51);
  Vec turned = qkv, lead(static_cast<size_t>(part.s * narrow.Width()));
  for (int64_t n = 0; n < part.s; ++n) {  // the leading 6 of every query and key head
    for (int64_t hh = 0; hh < part.h; ++hh) {
      for (int64_t e = 0; e < 6; ++e) {
        lead[n * narrow.Width() + narrow.Q(hh) + e] = qkv[n * wide.Width() + wide.Q(hh) + e];
        lead[n * narrow.Width() + narrow.K(hh) + e] = qkv[n * wide.Width() + wide.K(hh) + e];
      }
    }
  }
  kernels::RotaryEmbedding(turned.data(), part, false);
  kernels::RotaryEmbedding(lead.data(), whole, false);
  bool moved = false;
  for (int64_t n = 0; n < part.s; ++n) {
    for (int64_t hh = 0; hh < part.h; ++hh) {
      for (int64_t e = 0; e < 12; ++e) {
        const int64_t q = n * wide.Width() + wide.Q(hh) + e, k = n * wide.Width() + wide.K(hh) + e;
        if (e < 6) {
          EXPECT_EQ(turned[q], lead[n * narrow.Width() + narrow.Q(hh) + e]);
          EXPECT_EQ(turned[k], lead[n * narrow.Width() + narrow.K(hh) + e]);
          moved = moved || std::abs(turned[k] - qkv[k]) > 1e-3;
        } else {
          EXPECT_EQ(turned[q], qkv[q]);
          EXPECT_EQ(turned[k], qkv[k]);
        }
        EXPECT_EQ(turned[n * wide.Width() + wide.V(hh) + e],
                  qkv[n * wide.Width() + wide.V(hh) + e]);
      }
    }
  }
  EXPECT_TRUE(moved);
}

// A rotation by position p then scored against one by position q depends on q - p alone (what
// makes it a relative position embedding): the same pair at positions (1, 3) and (2, 4).
TEST(LlamaKernels, RotaryScoresDependOnRelativePosition) {
  kernels::RotaryDims r;
  r.b = 1;
  r.s = 5;
  r.h = 1;
  r.d = 6;
  const kernels::QkvLayout row{1, 6, 1};
  const Vec q = Random(6, 41), k = Random(6, 42);
  Vec qkv(static_cast<size_t>(r.s * row.Width()), 0.0);
  for (int64_t n = 0; n < r.s; ++n) {
    std::copy(q.begin(), q.end(), qkv.begin() + n * row.Width() + row.Q(0));
    std::copy(k.begin(), k.end(), qkv.begin() + n * row.Width() + row.K(0));
  }
  kernels::RotaryEmbedding(qkv.data(), r, false);
  auto score = [&](int64_t qi, int64_t kj) {
    double s = 0;
    for (int64_t e = 0; e < 6; ++e) {
      s += qkv[qi * row.Width() + row.Q(0) + e] * qkv[kj * row.Width() + row.K(0) + e];
    }
    return s;
  };
  EXPECT_NEAR(score(3, 1), score(4, 2), 1e-12);
  EXPECT_GT(std::abs(score(3, 1) - score(3, 2)), 1e-6);
}

// Grouped-query attention is multi-head attention whose heads in a group read one key and value:
// the grouped kernel's output equals the multi-head kernel's on qkv with the keys and values
// copied to every head, and its key gradient is the sum of the copies' gradients.
TEST(LlamaKernels, GroupedAttentionIsSharedMultiHead) {
  const int64_t b = 1, s = 4, h = 4, d = 3, group = 2;
  const kernels::QkvLayout grouped{h, d, group}, multi{h, d, 1};
  const Vec g = Random(b * s * grouped.Width(), 51);
  Vec m(static_cast<size_t>(b * s * multi.Width()));
  for (int64_t n = 0; n < b * s; ++n) {
    for (int64_t hh = 0; hh < h; ++hh) {
      for (int64_t e = 0; e < d; ++e) {
        m[n * multi.Width() + multi.Q(hh) + e] = g[n * grouped.Width() + grouped.Q(hh) + e];
        m[n * multi.Width() + multi.K(hh) + e] = g[n * grouped.Width() + grouped.K(hh) + e];
        m[n * multi.Width() + multi.V(hh) + e] = g[n * grouped.Width() + grouped.V(hh) + e];
      }
    }
  }
  Vec out_g(b * s * h * d), out_m(b * s * h * d), att_g(b * h * s * s), att_m(b * h * s * s);
  kernels::AttentionForward<double>(out_g.data(), att_g.data(), g.data(), nullptr, b, s, h, d,
                                    group);
  kernels::AttentionForward<double>(out_m.data(), att_m.data(), m.data(), nullptr, b, s, h, d, 1);
  for (size_t i = 0; i < out_g.size(); ++i) EXPECT_NEAR(out_g[i], out_m[i], 1e-14);
  const Vec dout = Random(b * s * h * d, 52);
  Vec dg(g.size()), dm(m.size());
  kernels::AttentionBackward<double>(dg.data(), dout.data(), g.data(), att_g.data(), nullptr, b, s,
                                     h, d, group);
  kernels::AttentionBackward<double>(dm.data(), dout.data(), m.data(), att_m.data(), nullptr, b, s,
                                     h, d, 1);
  for (int64_t n = 0; n < b * s; ++n) {
    for (int64_t kv = 0; kv < h / group; ++kv) {
      for (int64_t e = 0; e < d; ++e) {
        double k_sum = 0;
        for (int64_t j = 0; j < group; ++j)
          k_sum += dm[n * multi.Width() + multi.K(kv * group + j) + e];
        EXPECT_NEAR(dg[n * grouped.Width() + grouped.KvOf(kv) + e], k_sum, 1e-13);
      }
    }
  }
}

// Llama 3.1's frequencies (Llama 3.1 8B's: base 500000, heads of 128, factor 8, low 1, high 4,
// original 8192): wavelengths under 2048 keep their frequency, those over 8192 are divided by 8,
// those between are blended between the two, and the frequency falls monotonically with the pair
// across the band's ends.
TEST(LlamaKernels, RopeScalingKeepsHighDividesLowBlendsBetween) {
  const kernels::RopeFreqs plain{500000}, scaled{500000, 8, 1, 4, 8192};
  const double two_pi = 6.283185307179586;
  int kept = 0, divided = 0, blended = 0;
  double last = 1e300;
  for (int64_t e = 0; e < 64; ++e) {
    const double f = kernels::RopeInvFreq<double>(e, 128, plain);
    const double g = kernels::RopeInvFreq<double>(e, 128, scaled);
    EXPECT_NEAR(f, std::pow(500000.0, -2.0 * double(e) / 128.0), 1e-15 * f);
    const double wavelength = two_pi / f;
    if (wavelength < 2048) {
      EXPECT_EQ(g, f) << e;
      ++kept;
    } else if (wavelength > 8192) {
      EXPECT_DOUBLE_EQ(g, f / 8) << e;
      ++divided;
    } else {
      EXPECT_GT(g, f / 8) << e;
      EXPECT_LT(g, f) << e;
      ++blended;
    }
    EXPECT_LT(g, last) << e;
    last = g;
    // The float form (the GPU's) within float rounding of the double one.
    EXPECT_NEAR(kernels::RopeInvFreq<float>(e, 128, scaled), g, 1e-5 * g) << e;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

// The QK norm leaves every query and key head with a mean square of 1 / (1 + eps / ms) under
// unit weights, scales each feature by its weight, keeps the rows it read, and leaves the values.
TEST(LlamaKernels, QkNormNormsEachQueryAndKeyHead) {
  const kernels::QkvLayout row{4, 5, 2};
  const int64_t rows = 3, slots = 4 + 2;
  const Vec qkv = Random(rows * row.Width(), 61, 2.0);
  Vec ones(5, 1.0), k_w = Random(5, 62, 0.5);
  Vec normed = qkv, saved(static_cast<size_t>(rows * slots * 5)), rstd(rows * slots);
  const double eps = 1e-6;
  kernels::QkNormForward(normed.data(), saved.data(), rstd.data(), ones.data(), k_w.data(), rows,
                         row, eps);
  auto mean_square = [&](const Vec& v, int64_t at) {
    double s = 0;
    for (int64_t e = 0; e < 5; ++e) s += v[at + e] * v[at + e];
    return s / 5;
  };
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t base = n * row.Width();
    for (int64_t hh = 0; hh < 4; ++hh) {
      const double ms = mean_square(qkv, base + row.Q(hh));
      EXPECT_NEAR(mean_square(normed, base + row.Q(hh)), ms / (ms + eps), 1e-12);
      for (int64_t e = 0; e < 5; ++e) {
        EXPECT_EQ(normed[base + row.V(hh) + e], qkv[base + row.V(hh) + e]);
      }
    }
    for (int64_t g = 0; g < 2; ++g) {
      const int64_t k = base + row.KvOf(g), slot = (n * 2 + g) * 3 + 2;
      const double r = 1 / std::sqrt(mean_square(qkv, k) + eps);
      EXPECT_NEAR(rstd[slot], r, 1e-12);
      for (int64_t e = 0; e < 5; ++e) {
        EXPECT_NEAR(normed[k + e], qkv[k + e] * r * k_w[e], 1e-12);
        EXPECT_EQ(saved[slot * 5 + e], qkv[k + e]);
      }
    }
  }
}

}  // namespace
}  // namespace ptdp::runtime
