// A layer with multi-latent attention (runtime/model/mla.h) against central finite differences,
// in double precision through the CPU backend's fp64 Ops: the query latent (or none), the
// key/value latent and the rotated key shared by every head, the latents' RMSNorms (or none),
// heads whose query and key (4 + 2 rotated features) are wider than their value (4), with and
// without dropout, fused and unfused attention, selective recomputation's rebuilt core and up
// projections (recompute_modules mla_up_proj), and YaRN's scaled rotation and softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "runtime/model/gpt_layers.h"
#include "tests/runtime/gradient_check.h"

namespace ptdp::runtime {
namespace {

using namespace gradient_check;  // NOLINT(build/namespaces): the tests' shared helpers

struct MlaCase {
  bool q_latent = true;  // mla_q_lora 6, or queries straight from the hidden state
  bool norms = true;     // the latents' RMSNorms (a model's qk_norm)
  double dropout = 0;
  bool fused = false;
  bool redo_core = false;  // selective recomputation of the attention core
  bool redo_up = false;    // and of the up projections (recompute_modules mla_up_proj)
  // YaRN: its frequencies, cos and sin scaled by 1.2, and the softmax scale times 1.7 (folded into
  // the queries and their gradient).
  bool yarn = false;
};

// h 16, 4 heads: dh 4 unrotated + 2 rotated features of query and key, values of 4; the
// key/value latent 5 wide (not a multiple of the heads' blocks of 2), SwiGLU of 12 features.
LayerCtx MlaCtx(Device* dev, const MlaCase& k) {
  LayerCtx c;
  c.dev = dev;
  LayerDims& d = c.d;
  d.b = 2;
  d.s = 5;
  d.h = 16;
  d.heads = 4;
  d.heads_local = 4;
  d.kv_heads_local = 4;
  d.head_dim = 6;
  d.mla_q_lora = k.q_latent ? 6 : 0;
  d.mla_kv_lora = 5;
  d.mla_rope = 2;
  d.mla_v = 4;
  d.mla_block = 2;
  d.f_local = 12;
  d.v_local = 16;
  d.vocab_real = 11;
  c.arch = {true, true, true, {500.0}};  // RMSNorm, SwiGLU, RoPE with a small base
  c.arch.qk_norm = k.norms;
  c.types = {DType::kFp64, DType::kFp64};
  c.drop.p = k.dropout;
  c.drop.step = 2;
  c.drop.seq0 = 3;
  c.fused_attention = k.fused;
  c.redo_attention_core = k.redo_core;
  c.redo_mla_up_proj = k.redo_up;
  if (k.yarn) {
    c.arch.rope.factor = 4;
    c.arch.rope.original_max_positions = 4;
    c.arch.rope.yarn = true;
    c.arch.rope.attention_factor = 1.2;
    c.arch.mla_softmax_factor = 1.7;
  }
  return c;
}

struct MlaParams {
  Vec ln1_w, q_down_w, q_norm_w, q_up_w, kv_down_w, kv_norm_w, kv_up_w, proj_w, ln2_w, fc1_w, fc2_w;
  bool q_latent, norms;
  MlaParams(const LayerDims& d, const MlaCase& k) : q_latent(k.q_latent), norms(k.norms) {
    const int64_t h = d.h, a = d.heads, f = d.f_local, ql = d.mla_q_lora, kvl = d.mla_kv_lora;
    const int64_t dh = d.head_dim - d.mla_rope;
    ln1_w = Random(h, 1, 0.2);
    q_down_w = Random(ql * h, 2, 0.3);
    q_norm_w = Random(ql, 3, 0.2);
    q_up_w = Random(a * d.head_dim * (q_latent ? ql : h), 4, 0.3);
    kv_down_w = Random((kvl + d.mla_rope) * h, 5, 0.3);
    kv_norm_w = Random(kvl, 6, 0.2);
    kv_up_w = Random(a * (dh + d.mla_v) * kvl, 7, 0.3);
    proj_w = Random(h * a * d.mla_v, 8, 0.3);
    ln2_w = Random(h, 9, 0.2);
    fc1_w = Random(2 * f * h, 10, 0.3);
    fc2_w = Random(h * f, 11, 0.3);
    for (Vec* v : {&ln1_w, &q_norm_w, &kv_norm_w, &ln2_w}) {
      for (auto& e : *v) e += 1;
    }
  }
  LayerWeights W() const {
    LayerWeights w;
    w.ln1_w = C(ln1_w);
    w.proj_w = C(proj_w);
    w.ln2_w = C(ln2_w);
    w.fc1_w = C(fc1_w);
    w.fc2_w = C(fc2_w);
    if (q_latent) w.q_down_w = C(q_down_w);
    if (q_latent && norms) w.q_norm_w = C(q_norm_w);
    w.q_up_w = C(q_up_w);
    w.kv_down_w = C(kv_down_w);
    if (norms) w.kv_norm_w = C(kv_norm_w);
    w.kv_up_w = C(kv_up_w);
    return w;
  }
  LayerGrads G() {
    LayerGrads g;
    g.ln1_w = M(ln1_w);
    g.proj_w = M(proj_w);
    g.ln2_w = M(ln2_w);
    g.fc1_w = M(fc1_w);
    g.fc2_w = M(fc2_w);
    if (q_latent) g.q_down_w = M(q_down_w);
    if (q_latent && norms) g.q_norm_w = M(q_norm_w);
    g.q_up_w = M(q_up_w);
    g.kv_down_w = M(kv_down_w);
    if (norms) g.kv_norm_w = M(kv_norm_w);
    g.kv_up_w = M(kv_up_w);
    return g;
  }
  void Zero() {
    for (Vec* v : {&ln1_w, &q_down_w, &q_norm_w, &q_up_w, &kv_down_w, &kv_norm_w, &kv_up_w, &proj_w,
                   &ln2_w, &fc1_w, &fc2_w}) {
      std::fill(v->begin(), v->end(), 0.0);
    }
  }
};

void MlaLayerCase(const MlaCase& k) {
  CpuDevice dev;
  const LayerCtx c = MlaCtx(&dev, k);
  const LayerDims& d = c.d;
  const int64_t nh = d.N() * d.h, N = d.N();
  MlaParams p(d, k);
  Vec x = Random(nh, 11, 1.0), r = Random(nh, 12, 1.0);
  auto objective = [&]() {
    LayerStash st;
    EXPECT_TRUE(AllocLayerInput(c, &st).ok());
    gradient_check::Put(st.x, x);
    Vec y(static_cast<size_t>(nh));
    EXPECT_TRUE(LayerForward(c, p.W(), 1, MemTag::kActivations, &st, M(y)).ok());
    double s = 0;
    for (int64_t i = 0; i < nh; ++i) s += y[i] * r[i];
    return s;
  };
  MlaParams g(d, k);
  g.Zero();
  LayerStash st;
  ASSERT_TRUE(AllocLayerInput(c, &st).ok());
  gradient_check::Put(st.x, x);
  Vec y(static_cast<size_t>(nh)), dx(static_cast<size_t>(nh));
  ASSERT_TRUE(LayerForward(c, p.W(), 1, MemTag::kActivations, &st, M(y)).ok());
  // The stash as core/shapes.h AppendMlaActivations lists it: no fused QKV, the latents (with
  // their norms' inputs and 1/rms), q and k 6 wide per head, v and the output 4.
  EXPECT_TRUE(st.qkv.empty());
  // (mla_up_proj: q, k and v dropped until the backward rebuilds them.)
  EXPECT_EQ(st.mla_q.count(), k.redo_up ? 0 : N * 4 * 6);
  EXPECT_EQ(st.mla_k.count(), k.redo_up ? 0 : N * 4 * 6);
  EXPECT_EQ(st.mla_v.count(), k.redo_up ? 0 : N * 4 * 4);
  EXPECT_EQ(st.attn_out.count(), N * 4 * 4);
  EXPECT_EQ(st.mla_q_up_in.count(), k.q_latent ? N * 6 : 0);
  EXPECT_EQ(st.mla_q_in.count(), k.q_latent && k.norms ? N * 6 : 0);
  EXPECT_EQ(st.mla_kv_up_in.count(), N * 5);
  EXPECT_EQ(st.mla_kv_rstd.count(), k.norms ? N : 0);
  ASSERT_TRUE(LayerBackward(c, p.W(), g.G(), 1, &st, C(r), M(dx)).ok());
  CheckGrad("x", x, dx, objective);
  CheckGrad("ln1.weight", p.ln1_w, g.ln1_w, objective);
  if (k.q_latent) {
    CheckGrad("q_down.weight", p.q_down_w, g.q_down_w, objective);
    if (k.norms) CheckGrad("q_norm.weight", p.q_norm_w, g.q_norm_w, objective);
  }
  CheckGrad(k.q_latent ? "q_up.weight" : "q.weight", p.q_up_w, g.q_up_w, objective);
  // Every row of kv_down: the latent's and the rotated key's.
  CheckGrad("kv_down.weight", p.kv_down_w, g.kv_down_w, objective, 40);
  if (k.norms) CheckGrad("kv_norm.weight", p.kv_norm_w, g.kv_norm_w, objective);
  CheckGrad("kv_up.weight", p.kv_up_w, g.kv_up_w, objective);
  CheckGrad("proj.weight", p.proj_w, g.proj_w, objective);
  CheckGrad("fc1.weight", p.fc1_w, g.fc1_w, objective);
}

TEST(MlaLayerGradient, LayerMatchesFiniteDifferences) {
  MlaLayerCase({});
}
TEST(MlaLayerGradient, WithoutQueryLatentOrNormsMatchesFiniteDifferences) {
  MlaLayerCase({false, false});
}
TEST(MlaLayerGradient, DropoutFusedAttentionMatchesFiniteDifferences) {
  MlaLayerCase({true, true, 0.2, true});
}
TEST(MlaLayerGradient, DropoutRebuiltCoreMatchesFiniteDifferences) {
  MlaLayerCase({true, true, 0.2, false, true});
}
TEST(MlaLayerGradient, YarnMatchesFiniteDifferences) {
  MlaLayerCase({true, true, 0.0, false, false, false, true});
  MlaLayerCase({true, true, 0.2, true, true, true, true});
}
TEST(MlaLayerGradient, RebuiltUpProjectionsMatchFiniteDifferences) {
  MlaLayerCase({true, true, 0.2, true, true, true});
  MlaLayerCase({false, false, 0.0, false, false, true});
}

}  // namespace
}  // namespace ptdp::runtime
