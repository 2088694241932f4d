// CUDA LayerNorm, bias+GeLU, bias+dropout+residual, embedding and elementwise kernels against
// their kernels/reference twins (run in double on the same stored inputs), by NMSE.
#include <gtest/gtest.h>

#include "kernels/cuda/ops.h"
#include "kernels/reference/ops.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/test_util.h"

namespace ptdp::cuda_kernels {
namespace {

using kernels::testing::RandomVector;
using testing::AsDouble;
using testing::DeviceBuffer;
using testing::Nmse;
using testing::Store;

template <typename T>
class CudaLayers : public testing::CudaTest {};
using ElementTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaLayers, ElementTypes);

// Rows and columns that are not multiples of the warp or block sizes.
constexpr int64_t kN = 37, kC = 200;

// Plain, and LayerNorm1P (weight offset 1, its weights near zero as they start).
TYPED_TEST(CudaLayers, LayerNormForwardBackward) {
  using T = TypeParam;
  for (const float offset : {0.0f, 1.0f}) {
    SCOPED_TRACE(offset);
    const auto x = Store<T>(RandomVector(kN * kC, 1, 3.0));
    const auto w = Store<T>(RandomVector(kC, 2, offset > 0 ? 0.05 : 1.0));
    const auto b = Store<T>(RandomVector(kC, 3));
    const auto dout = Store<T>(RandomVector(kN * kC, 4));
    const auto xd = AsDouble(x), wd = AsDouble(w), bd = AsDouble(b), doutd = AsDouble(dout);
    std::vector<double> out(kN * kC), mean(kN), rstd(kN), dx(kN * kC), dw(kC, 1.0), db(kC, -1.0);
    kernels::LayerNormForward(out.data(), mean.data(), rstd.data(), xd.data(), wd.data(), bd.data(),
                              kN, kC, offset);
    kernels::LayerNormBackward(dx.data(), dw.data(), db.data(), doutd.data(), xd.data(), wd.data(),
                               mean.data(), rstd.data(), kN, kC, offset);

    DeviceBuffer<T> gx(x), gw(w), gb(b), gdout(dout), gout(kN * kC), gdx(kN * kC);
    DeviceBuffer<float> gmean(kN), grstd(kN), gdw(std::vector<float>(kC, 1.0f)),
        gdb(std::vector<float>(kC, -1.0f));
    LayerNormForward<T>(gout.get(), gmean.get(), grstd.get(), gx.get(), gw.get(), gb.get(), kN, kC,
                        nullptr, offset);
    LayerNormBackward<T>(gdx.get(), gdw.get(), gdb.get(), gdout.get(), gx.get(), gw.get(),
                         gmean.get(), grstd.get(), kN, kC, nullptr, offset);
    this->Sync();
    EXPECT_LT(Nmse(AsDouble(gout.Download()), out), testing::kTolOnce<T>);
    EXPECT_LT(Nmse(AsDouble(gmean.Download()), mean), 1e-10);
    EXPECT_LT(Nmse(AsDouble(grstd.Download()), rstd), 1e-10);
    EXPECT_LT(Nmse(AsDouble(gdx.Download()), dx), testing::kTolOnce<T>);
    EXPECT_LT(Nmse(AsDouble(gdw.Download()), dw), 1e-10);  // fp32 main grads, accumulated
    EXPECT_LT(Nmse(AsDouble(gdb.Download()), db), 1e-10);
  }
}

TYPED_TEST(CudaLayers, BiasGeluForwardBackward) {
  using T = TypeParam;
  const auto x = Store<T>(RandomVector(kN * kC, 11, 2.0));
  const auto bias = Store<T>(RandomVector(kC, 12));
  const auto dout = Store<T>(RandomVector(kN * kC, 13));
  const auto xd = AsDouble(x), biasd = AsDouble(bias), doutd = AsDouble(dout);
  // Reference: pre = x + bias, then GeLU; dbias = column sums of dpre.
  std::vector<double> pre(kN * kC), out(kN * kC), dx(kN * kC), dbias(kC, 0.5);
  for (int64_t r = 0; r < kN; ++r)
    for (int64_t c = 0; c < kC; ++c) pre[r * kC + c] = xd[r * kC + c] + biasd[c];
  kernels::GeluForward(out.data(), pre.data(), kN * kC);
  kernels::GeluBackward(dx.data(), pre.data(), doutd.data(), kN * kC);
  for (int64_t r = 0; r < kN; ++r)
    for (int64_t c = 0; c < kC; ++c) dbias[c] += dx[r * kC + c];

  DeviceBuffer<T> gx(x), gbias(bias), gdout(dout), gout(kN * kC), gdx(kN * kC);
  DeviceBuffer<float> gdbias(std::vector<float>(kC, 0.5f));
  BiasGeluForward<T>(gout.get(), gx.get(), gbias.get(), kN, kC, nullptr);
  BiasGeluBackward<T>(gdx.get(), gdbias.get(), gx.get(), gbias.get(), gdout.get(), kN, kC, nullptr);
  this->Sync();
  EXPECT_LT(Nmse(AsDouble(gout.Download()), out), testing::kTolOnce<T>);
  EXPECT_LT(Nmse(AsDouble(gdx.Download()), dx), testing::kTolOnce<T>);
  EXPECT_LT(Nmse(AsDouble(gdbias.Download()), dbias), 1e-10);
}

TYPED_TEST(CudaLayers, BiasDropoutResidual) {
  using T = TypeParam;
  const auto x = Store<T>(RandomVector(kN * kC, 21));
  const auto bias = Store<T>(RandomVector(kC, 22));
  const auto res = Store<T>(RandomVector(kN * kC, 23));
  const auto dout = Store<T>(RandomVector(kN * kC, 24));
  const auto xd = AsDouble(x), biasd = AsDouble(bias), resd = AsDouble(res);
  const auto doutd = AsDouble(dout);
  for (float p : {0.0f, 0.25f}) {
    DropoutSpec spec;
    spec.key = kernels::HashKey("layer3.mlp.dropout");
    spec.first_index = 1000;
    spec.p = p;
    // Reference: out = residual + (x + bias) * mask, dx = dout * mask, dbias = sum_rows dx.
    std::vector<double> mask(kN * kC), pre(kN * kC), out(kN * kC), dx(kN * kC), dbias(kC, 0.0);
    kernels::FillDropoutMask(mask.data(), spec.key, spec.first_index, kN * kC, p);
    for (int64_t r = 0; r < kN; ++r)
      for (int64_t c = 0; c < kC; ++c) pre[r * kC + c] = xd[r * kC + c] + biasd[c];
    kernels::Mul(pre.data(), pre.data(), mask.data(), kN * kC);
    kernels::Add(out.data(), resd.data(), pre.data(), kN * kC);
    kernels::Mul(dx.data(), doutd.data(), mask.data(), kN * kC);
    for (int64_t r = 0; r < kN; ++r)
      for (int64_t c = 0; c < kC; ++c) dbias[c] += dx[r * kC + c];

    DeviceBuffer<T> gx(x), gbias(bias), gres(res), gdout(dout), gout(kN * kC), gdx(kN * kC);
    DeviceBuffer<float> gdbias(kC);
    BiasDropoutResidualForward<T>(gout.get(), gx.get(), gbias.get(), gres.get(), kN, kC, spec,
                                  nullptr);
    BiasDropoutResidualBackward<T>(gdx.get(), gdbias.get(), gdout.get(), kN, kC, spec, nullptr);
    this->Sync();
    EXPECT_LT(Nmse(AsDouble(gout.Download()), out), testing::kTolOnce<T>) << "p=" << p;
    // The same elements are dropped: exact zeros where the reference mask is 0.
    const auto gdx_host = AsDouble(gdx.Download());
    for (int64_t i = 0; i < kN * kC; ++i) {
      if (mask[i] == 0.0) {
        ASSERT_EQ(gdx_host[i], 0.0) << "element " << i;
      }
    }
    EXPECT_LT(Nmse(gdx_host, dx), testing::kTolOnce<T>) << "p=" << p;
    EXPECT_LT(Nmse(AsDouble(gdbias.Download()), dbias), 1e-10) << "p=" << p;
  }
}

TYPED_TEST(CudaLayers, EmbeddingShard) {
  using T = TypeParam;
  const int64_t b = 3, s = 7, c = 48, vb = 16, ve = 40;
  std::vector<int32_t> tokens(b * s);
  for (int64_t i = 0; i < b * s; ++i) tokens[i] = static_cast<int32_t>((i * 13 + 5) % 50);
  tokens[1] = tokens[2] = 20;  // a repeated token: the backward must add both rows
  const auto wte = Store<T>(RandomVector((ve - vb) * c, 31));
  const auto wpe = Store<T>(RandomVector(s * c, 32));
  const auto dout = Store<T>(RandomVector(b * s * c, 33));
  const auto wted = AsDouble(wte), wped = AsDouble(wpe), doutd = AsDouble(dout);
  std::vector<double> out(b * s * c), dwte(wte.size(), 0.0), dwpe(wpe.size(), 0.0);
  kernels::EmbeddingForward(out.data(), tokens.data(), wted.data(), wped.data(), b, s, c, vb, ve);
  kernels::EmbeddingBackward(dwte.data(), dwpe.data(), doutd.data(), tokens.data(), b, s, c, vb,
                             ve);
  DeviceBuffer<int32_t> gtok(tokens);
  DeviceBuffer<T> gwte(wte), gwpe(wpe), gdout(dout), gout(b * s * c);
  DeviceBuffer<float> gdwte(wte.size()), gdwpe(wpe.size());
  EmbeddingForward<T>(gout.get(), gtok.get(), gwte.get(), gwpe.get(), b, s, c, vb, ve, nullptr);
  EmbeddingBackward<T>(gdwte.get(), gdwpe.get(), gdout.get(), gtok.get(), b, s, c, vb, ve, nullptr);
  this->Sync();
  EXPECT_LT(Nmse(AsDouble(gout.Download()), out), testing::kTolOnce<T>);
  EXPECT_LT(Nmse(AsDouble(gdwte.Download()), dwte), 1e-10);
  EXPECT_LT(Nmse(AsDouble(gdwpe.Download()), dwpe), 1e-10);
}

TYPED_TEST(CudaLayers, BiasGradAccumulate) {
  using T = TypeParam;
  const int64_t c = 48;
  const auto dout = Store<T>(RandomVector(kN * c, 51));
  const auto doutd = AsDouble(dout);
  // Reference: MatmulBackward's dbias (only dbias requested) accumulates column sums.
  std::vector<double> dbias(c, 2.0), x(kN * 1, 0.0), w(c * 1, 0.0);
  kernels::MatmulBackward<double>(nullptr, nullptr, dbias.data(), doutd.data(), x.data(), w.data(),
                                  kN, 1, c);
  DeviceBuffer<T> gdout(dout);
  DeviceBuffer<float> gdbias(std::vector<float>(c, 2.0f));
  BiasGradAccumulate<T>(gdbias.get(), gdout.get(), kN, c, nullptr);
  this->Sync();
  EXPECT_LT(Nmse(AsDouble(gdbias.Download()), dbias), 1e-10);
}

TYPED_TEST(CudaLayers, AddAccumulateScale) {
  using T = TypeParam;
  const int64_t n = 1000;
  const auto a = Store<T>(RandomVector(n, 41)), b = Store<T>(RandomVector(n, 42));
  const auto ad = AsDouble(a), bd = AsDouble(b);
  std::vector<double> sum(n), twice(n);
  kernels::Add(sum.data(), ad.data(), bd.data(), n);
  DeviceBuffer<T> ga(a), gb(b), gout(n);
  Add<T>(gout.get(), ga.get(), gb.get(), n, nullptr);
  this->Sync();
  EXPECT_LT(Nmse(AsDouble(gout.Download()), sum), testing::kTolOnce<T>);
  Accumulate<T>(ga.get(), gb.get(), n, nullptr);  // a += b
  Scale<T>(ga.get(), 2.0f, n, nullptr);           // exact in any binary format
  this->Sync();
  const auto added = AsDouble(gout.Download());  // Accumulate rounds a + b as Add does
  for (int64_t i = 0; i < n; ++i) twice[i] = 2.0 * added[i];
  EXPECT_LT(Nmse(AsDouble(ga.Download()), twice), 1e-20);
}

}  // namespace
}  // namespace ptdp::cuda_kernels
