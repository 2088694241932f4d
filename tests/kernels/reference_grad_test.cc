// Every reference backward against central finite differences, in double precision. The loss is
// L = sum(out * r) for a fixed random r, so dL/dout = r.
#include <gtest/gtest.h>

#include "kernels/reference/ops.h"
#include "tests/kernels/test_util.h"

namespace ptdp::kernels {
namespace {

using testing::Dot;
using testing::kGradTolerance;
using testing::NumericGradient;
using testing::RandomVector;
using testing::RelativeError;

TEST(ReferenceGrad, Matmul) {
  const int64_t n = 3, c = 4, oc = 5;
  auto x = RandomVector(n * c, 1);
  auto w = RandomVector(oc * c, 2);
  auto bias = RandomVector(oc, 3);
  const auto r = RandomVector(n * oc, 4);
  std::vector<double> out(n * oc);
  auto loss = [&] {
    MatmulForward(out.data(), x.data(), w.data(), bias.data(), n, c, oc);
    return Dot(out, r);
  };
  // Parameter gradients accumulate: start from a known offset and subtract it afterwards.
  std::vector<double> dx(n * c, 7.0), dw(oc * c, 1.0), db(oc, -2.0);
  MatmulBackward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), n, c, oc);
  for (auto& v : dw) v -= 1.0;
  for (auto& v : db) v += 2.0;
  EXPECT_LT(RelativeError(dx, NumericGradient(x, loss)), kGradTolerance);
  EXPECT_LT(RelativeError(dw, NumericGradient(w, loss)), kGradTolerance);
  EXPECT_LT(RelativeError(db, NumericGradient(bias, loss)), kGradTolerance);

  // accumulate_dx adds to dx; dw and dbias may be skipped with nullptr.
  std::vector<double> dx2(n * c, 1.0);
  MatmulBackward<double>(dx2.data(), nullptr, nullptr, r.data(), x.data(), w.data(), n, c, oc,
                         /*accumulate_dx=*/true);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx2[i], dx[i] + 1.0, 1e-12);
}

// Plain and LayerNorm1P (weight_offset 1: the stored weight is the offset from 1), whose
// gradients are those of the stored weight.
TEST(ReferenceGrad, LayerNorm) {
  for (const double offset : {0.0, 1.0}) {
    SCOPED_TRACE(offset);
    const int64_t n = 3, c = 8;
    auto x = RandomVector(n * c, 11, 2.0);
    auto weight = RandomVector(c, 12, 0.1);
    auto bias = RandomVector(c, 13);
    const auto r = RandomVector(n * c, 14);
    std::vector<double> out(n * c), mean(n), rstd(n);
    auto loss = [&] {
      LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), weight.data(), bias.data(),
                       n, c, offset);
      return Dot(out, r);
    };
    loss();
    std::vector<double> dx(n * c), dw(c, 0.0), db(c, 0.0);
    LayerNormBackward(dx.data(), dw.data(), db.data(), r.data(), x.data(), weight.data(),
                      mean.data(), rstd.data(), n, c, offset);
    EXPECT_LT(RelativeError(dx, NumericGradient(x, loss)), kGradTolerance);
    EXPECT_LT(RelativeError(dw, NumericGradient(weight, loss)), kGradTolerance);
    EXPECT_LT(RelativeError(db, NumericGradient(bias, loss)), kGradTolerance);
  }
}

// LayerNorm1P of a weight w is LayerNorm of 1 + w, forward and backward (in double, exactly).
TEST(ReferenceGrad, LayerNorm1PIsLayerNormOfOnePlusTheWeight) {
  const int64_t n = 4, c = 6;
  const auto x = RandomVector(n * c, 15, 2.0), w = RandomVector(c, 16, 0.1),
             b = RandomVector(c, 17), dout = RandomVector(n * c, 18);
  std::vector<double> gamma(w);
  for (double& g : gamma) g += 1.0;
  std::vector<double> out1(n * c), out(n * c), mean(n), rstd(n), dx1(n * c), dx(n * c), dw1(c, 0.0),
      dw(c, 0.0), db1(c, 0.0), db(c, 0.0);
  LayerNormForward(out1.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), n, c, 1.0);
  LayerNormBackward(dx1.data(), dw1.data(), db1.data(), dout.data(), x.data(), w.data(),
                    mean.data(), rstd.data(), n, c, 1.0);
  LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), gamma.data(), b.data(), n, c);
  LayerNormBackward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), gamma.data(),
                    mean.data(), rstd.data(), n, c);
  EXPECT_EQ(out1, out);
  EXPECT_EQ(dx1, dx);
  EXPECT_EQ(dw1, dw);
  EXPECT_EQ(db1, db);
  EXPECT_NE(out1[0], [&] {  // and not LayerNorm of w itself
    std::vector<double> plain(n * c);
    LayerNormForward(plain.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), n, c);
    return plain[0];
  }());
}

// Squared ReLU (Nemotron-4's MLP): d/dx relu(x)^2 = 2 relu(x), checked away from the kink at 0.
TEST(ReferenceGrad, SquaredRelu) {
  const int64_t count = 20;
  auto x = RandomVector(count, 23, 2.0);
  for (double& v : x) v += v > 0 ? 0.01 : -0.01;
  const auto r = RandomVector(count, 24);
  std::vector<double> out(count);
  auto loss = [&] {
    SquaredReluForward(out.data(), x.data(), count);
    return Dot(out, r);
  };
  std::vector<double> dx(count);
  SquaredReluBackward(dx.data(), x.data(), r.data(), count);
  EXPECT_LT(RelativeError(dx, NumericGradient(x, loss)), kGradTolerance);
  loss();
  for (int64_t i = 0; i < count; ++i) {
    EXPECT_EQ(out[i], x[i] > 0 ? x[i] * x[i] : 0.0);
  }
}

TEST(ReferenceGrad, Gelu) {
  const int64_t count = 20;
  auto x = RandomVector(count, 21, 2.0);
  const auto r = RandomVector(count, 22);
  std::vector<double> out(count);
  auto loss = [&] {
    GeluForward(out.data(), x.data(), count);
    return Dot(out, r);
  };
  std::vector<double> dx(count);
  GeluBackward(dx.data(), x.data(), r.data(), count);
  EXPECT_LT(RelativeError(dx, NumericGradient(x, loss)), kGradTolerance);
}

void CheckAttentionGrad(bool with_dropout, int64_t window = 0) {
  const int64_t b = 2, s = 5, h = 2, d = 3;
  auto qkv = RandomVector(b * s * h * 3 * d, 31);
  const auto r = RandomVector(b * s * h * d, 32);
  std::vector<double> mask;
  if (with_dropout) {
    mask.resize(b * h * s * s);
    FillDropoutMask(mask.data(), HashKey("attention-test"), 0, b * h * s * s, 0.3);
  }
  const double* m = with_dropout ? mask.data() : nullptr;
  std::vector<double> out(b * s * h * d), att(b * h * s * s);
  auto loss = [&] {
    AttentionForward(out.data(), att.data(), qkv.data(), m, b, s, h, d, 1, window);
    return Dot(out, r);
  };
  loss();
  std::vector<double> dqkv(qkv.size(), 5.0);  // overwritten
  AttentionBackward(dqkv.data(), r.data(), qkv.data(), att.data(), m, b, s, h, d);
  EXPECT_LT(RelativeError(dqkv, NumericGradient(qkv, loss)), kGradTolerance);
}

TEST(ReferenceGrad, Attention) {
  CheckAttentionGrad(false);
}
TEST(ReferenceGrad, AttentionWithDropout) {
  CheckAttentionGrad(true);
}
// A sliding window of 2 keys before each query (of 5): the backward through the saved
// probabilities, which are 0 outside the window, is the windowed forward's gradient.
TEST(ReferenceGrad, AttentionWithAWindow) {
  CheckAttentionGrad(false, 2);
  CheckAttentionGrad(true, 2);
}

TEST(ReferenceGrad, Embedding) {
  const int64_t b = 2, s = 3, c = 4, vocab = 6;
  const std::vector<int32_t> tokens = {0, 5, 2, 2, 3, 5};
  // Shard [2, 6) of the vocabulary: tokens 0 are someone else's.
  const int64_t vb = 2, ve = 6;
  auto wte = RandomVector((ve - vb) * c, 41);
  auto wpe = RandomVector(s * c, 42);
  const auto r = RandomVector(b * s * c, 43);
  std::vector<double> out(b * s * c);
  auto loss = [&] {
    EmbeddingForward(out.data(), tokens.data(), wte.data(), wpe.data(), b, s, c, vb, ve);
    return Dot(out, r);
  };
  std::vector<double> dwte(wte.size(), 0.0), dwpe(wpe.size(), 0.0);
  EmbeddingBackward(dwte.data(), dwpe.data(), r.data(), tokens.data(), b, s, c, vb, ve);
  EXPECT_LT(RelativeError(dwte, NumericGradient(wte, loss)), kGradTolerance);
  EXPECT_LT(RelativeError(dwpe, NumericGradient(wpe, loss)), kGradTolerance);
  (void)vocab;
}

TEST(ReferenceGrad, CrossEntropyWithPadding) {
  // One shard holding the whole padded vocabulary: 7 real ids of 8 columns.
  const int64_t n = 3, v = 8, v_real = 7;
  auto logits = RandomVector(n * v, 51, 3.0);
  const std::vector<int32_t> targets = {0, 6, 3};
  const std::vector<double> dloss = {1.0, 0.5, -2.0};
  std::vector<double> mx(n), sum(n), tl(n), loss_rows(n);
  auto loss = [&] {
    CrossEntropyLocalStats(mx.data(), sum.data(), tl.data(), logits.data(), targets.data(), n, v, 0,
                           v_real);
    CrossEntropyLoss(loss_rows.data(), mx.data(), sum.data(), tl.data(), n);
    return Dot(loss_rows, dloss);
  };
  loss();
  std::vector<double> dlogits(n * v, 9.0);
  CrossEntropyBackward(dlogits.data(), logits.data(), mx.data(), sum.data(), targets.data(),
                       dloss.data(), n, v, 0, v_real);
  const auto numeric = NumericGradient(logits, loss);
  EXPECT_LT(RelativeError(dlogits, numeric), kGradTolerance);
  for (int64_t r = 0; r < n; ++r) EXPECT_EQ(dlogits[r * v + v - 1], 0.0);  // padding column
}

}  // namespace
}  // namespace ptdp::kernels
