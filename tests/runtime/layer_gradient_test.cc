// Every layer's backward against central finite differences, in double precision (a tensor group
// of one): the transformer layer (with and without dropout), the head (final LayerNorm, tied
// output, cross-entropy with padded vocabulary) and the embedding.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "runtime/model/gpt_layers.h"

namespace ptdp::runtime {
namespace {

using Vec = std::vector<double>;

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

Vec Random(int64_t n, uint32_t seed, double scale = 0.5) {
  std::mt19937 g(seed);
  std::normal_distribution<double> nd(0, scale);
  Vec v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(g);
  return v;
}

// Central differences of f with respect to x[i] for a sample of indices; compares with `grad`.
void CheckGrad(const char* what, Vec& x, const Vec& grad, const std::function<double()>& f) {
  const double eps = 1e-6;
  const size_t stride = std::max<size_t>(1, x.size() / 23);
  for (size_t i = 0; i < x.size(); i += stride) {
    const double keep = x[i];
    x[i] = keep + eps;
    const double fp = f();
    x[i] = keep - eps;
    const double fm = f();
    x[i] = keep;
    const double fd = (fp - fm) / (2 * eps);
    EXPECT_NEAR(grad[i], fd, 1e-6 + 1e-5 * std::abs(fd)) << what << "[" << i << "]";
  }
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
  LayerWeights<double> W() const {
    return {ln1_w.data(), ln1_b.data(), qkv_w.data(), qkv_b.data(), proj_w.data(), proj_b.data(),
            ln2_w.data(), ln2_b.data(), fc1_w.data(), fc1_b.data(), fc2_w.data(),  fc2_b.data()};
  }
};

void LayerCase(double dropout) {
  CpuDevice dev;
  const LayerDims d = Dims();
  const int64_t nh = d.N() * d.h;
  LayerParams p(d, 7);
  Vec x = Random(nh, 99, 1.0), r = Random(nh, 100, 1.0);
  DropoutCtx drop;
  drop.p = dropout;
  drop.step = 3;
  drop.seq0 = 5;
  auto objective = [&]() {
    LayerStash<double> st;
    EXPECT_TRUE(AllocLayerInput(&dev, d, &st).ok());
    std::copy(x.begin(), x.end(), st.x.data());
    Vec y(static_cast<size_t>(nh));
    EXPECT_TRUE(LayerForward(&dev, nullptr, d, p.W(), drop, 2, &st, y.data()).ok());
    double s = 0;
    for (int64_t i = 0; i < nh; ++i) s += y[i] * r[i];
    return s;
  };
  LayerParams g(d, 7);
  for (Vec* v : {&g.ln1_w, &g.ln1_b, &g.qkv_w, &g.qkv_b, &g.proj_w, &g.proj_b, &g.ln2_w, &g.ln2_b,
                 &g.fc1_w, &g.fc1_b, &g.fc2_w, &g.fc2_b}) {
    std::fill(v->begin(), v->end(), 0.0);
  }
  LayerGrads<double> lg{g.ln1_w.data(),  g.ln1_b.data(),  g.qkv_w.data(), g.qkv_b.data(),
                        g.proj_w.data(), g.proj_b.data(), g.ln2_w.data(), g.ln2_b.data(),
                        g.fc1_w.data(),  g.fc1_b.data(),  g.fc2_w.data(), g.fc2_b.data()};
  LayerStash<double> st;
  ASSERT_TRUE(AllocLayerInput(&dev, d, &st).ok());
  std::copy(x.begin(), x.end(), st.x.data());
  Vec y(static_cast<size_t>(nh)), dx(static_cast<size_t>(nh));
  ASSERT_TRUE(LayerForward(&dev, nullptr, d, p.W(), drop, 2, &st, y.data()).ok());
  ASSERT_TRUE(LayerBackward(&dev, nullptr, d, p.W(), lg, drop, 2, &st, r.data(), dx.data()).ok());
  CheckGrad("x", x, dx, objective);
  CheckGrad("ln1.weight", p.ln1_w, g.ln1_w, objective);
  CheckGrad("qkv.weight", p.qkv_w, g.qkv_w, objective);
  CheckGrad("qkv.bias", p.qkv_b, g.qkv_b, objective);
  CheckGrad("proj.weight", p.proj_w, g.proj_w, objective);
  CheckGrad("proj.bias", p.proj_b, g.proj_b, objective);
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

TEST(LayerGradient, HeadMatchesFiniteDifferences) {
  CpuDevice dev;
  const LayerDims d = Dims();
  const int64_t nh = d.N() * d.h;
  Vec x = Random(nh, 1, 1.0), lw = Random(d.h, 2, 0.2), lb = Random(d.h, 3, 0.1);
  for (auto& v : lw) v += 1;
  Vec wout = Random(d.v_local * d.h, 4, 0.5);
  std::vector<int32_t> targets(static_cast<size_t>(d.N()));
  for (size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<int32_t>((i * 7) % 11);
  auto objective = [&]() {
    HeadStash<double> st;
    st.x = Buffer<double>::Make(&dev, nh, MemTag::kActivations).value();
    std::copy(x.begin(), x.end(), st.x.data());
    double loss = 0;
    EXPECT_TRUE(
        HeadForward(&dev, nullptr, d, lw.data(), lb.data(), wout.data(), targets.data(), &st, &loss)
            .ok());
    return loss;
  };
  HeadStash<double> st;
  st.x = Buffer<double>::Make(&dev, nh, MemTag::kActivations).value();
  std::copy(x.begin(), x.end(), st.x.data());
  double loss = 0;
  ASSERT_TRUE(
      HeadForward(&dev, nullptr, d, lw.data(), lb.data(), wout.data(), targets.data(), &st, &loss)
          .ok());
  Vec dlw(lw.size()), dlb(lb.size()), dwout(wout.size()), dx(static_cast<size_t>(nh));
  ASSERT_TRUE(HeadBackward(&dev, nullptr, d, lw.data(), wout.data(), dlw.data(), dlb.data(),
                           dwout.data(), targets.data(), 1.0, &st, dx.data())
                  .ok());
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
  auto objective = [&]() {
    Vec out(static_cast<size_t>(nh));
    EXPECT_TRUE(EmbeddingForwardTp<double>(nullptr, d, wte.data(), wpe.data(), tokens.data(), drop,
                                           out.data())
                    .ok());
    double s = 0;
    for (int64_t i = 0; i < nh; ++i) s += out[i] * r[i];
    return s;
  };
  Vec dwte(wte.size()), dwpe(wpe.size());
  ASSERT_TRUE(
      EmbeddingBackwardTp<double>(&dev, d, dwte.data(), dwpe.data(), tokens.data(), drop, r.data())
          .ok());
  CheckGrad("wte", wte, dwte, objective);
  CheckGrad("wpe", wpe, dwpe, objective);
}

}  // namespace
}  // namespace ptdp::runtime
