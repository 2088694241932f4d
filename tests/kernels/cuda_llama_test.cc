// The CUDA kernels of Llama-style layers (kernels/cuda/llama.cu) against their kernels/reference
// twins (run in double on the same stored inputs), by NMSE: RMSNorm forward and backward, SwiGLU
// forward and backward, and the rotary embedding of a grouped QKV at context-parallel positions
// and back.
#include <gtest/gtest.h>

#include "kernels/cuda/ops.h"
#include "kernels/reference/ops.h"
#include "kernels/reference/qkv_layout.h"
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
class CudaLlama : public testing::CudaTest {};
using ElementTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaLlama, ElementTypes);

// Rows and columns that are not multiples of the warp or block sizes.
constexpr int64_t kRows = 37, kCols = 200;

TYPED_TEST(CudaLlama, RmsNormForwardBackward) {
  using T = TypeParam;
  const auto x = Store<T>(RandomVector(kRows * kCols, 1, 3.0));
  const auto w = Store<T>(RandomVector(kCols, 2));
  const auto dout = Store<T>(RandomVector(kRows * kCols, 4));
  const auto xd = AsDouble(x), wd = AsDouble(w), doutd = AsDouble(dout);
  std::vector<double> out(kRows * kCols), rstd(kRows), dx(kRows * kCols), dw(kCols, 1.0);
  kernels::RmsNormForward(out.data(), rstd.data(), xd.data(), wd.data(), kRows, kCols, 1e-6);
  kernels::RmsNormBackward(dx.data(), dw.data(), doutd.data(), xd.data(), wd.data(), rstd.data(),
                           kRows, kCols);
  DeviceBuffer<T> gx(x), gw(w), gdout(dout), gout(kRows * kCols), gdx(kRows * kCols);
  DeviceBuffer<float> grstd(kRows), gdw(std::vector<float>(kCols, 1.0f));
  RmsNormForward<T>(gout.get(), grstd.get(), gx.get(), gw.get(), kRows, kCols, 1e-6f, nullptr);
  RmsNormBackward<T>(gdx.get(), gdw.get(), gdout.get(), gx.get(), gw.get(), grstd.get(), kRows,
                     kCols, nullptr);
  this->Sync();
  EXPECT_LT(Nmse(AsDouble(gout.Download()), out), testing::kTolOnce<T>);
  EXPECT_LT(Nmse(AsDouble(grstd.Download()), rstd), 1e-10);
  EXPECT_LT(Nmse(AsDouble(gdx.Download()), dx), testing::kTolOnce<T>);
  EXPECT_LT(Nmse(AsDouble(gdw.Download()), dw), 1e-10);  // fp32 main grads, accumulated
}

TYPED_TEST(CudaLlama, SwigluForwardBackward) {
  using T = TypeParam;
  const int64_t count = kRows * kCols;
  const auto in = Store<T>(RandomVector(2 * count, 11, 2.0));
  const auto dout = Store<T>(RandomVector(count, 12));
  const auto ind = AsDouble(in), doutd = AsDouble(dout);
  std::vector<double> out(count), din(2 * count);
  kernels::SwigluForward(out.data(), ind.data(), count);
  kernels::SwigluBackward(din.data(), ind.data(), doutd.data(), count);
  DeviceBuffer<T> gin(in), gdout(dout), gout(count), gdin(2 * count);
  SwigluForward<T>(gout.get(), gin.get(), count, nullptr);
  SwigluBackward<T>(gdin.get(), gin.get(), gdout.get(), count, nullptr);
  this->Sync();
  EXPECT_LT(Nmse(AsDouble(gout.Download()), out), testing::kTolOnce<T>);
  EXPECT_LT(Nmse(AsDouble(gdin.Download()), din), testing::kTolOnce<T>);
}

// 4 query heads over 2 key/value heads, rank 1 of cp 2 (its positions are two chunks of the
// sequence), turned and turned back.
TYPED_TEST(CudaLlama, RotaryOfGroupedQkvAtContextPositions) {
  using T = TypeParam;
  kernels::RotaryDims ref;
  ref.b = 2;
  ref.s = 24;
  ref.h = 4;
  ref.d = 16;
  ref.group = 2;
  ref.cp = 2;
  ref.rank = 1;
  ref.base = 10000;
  const kernels::QkvLayout row{ref.h, ref.d, ref.group};
  const int64_t elements = ref.b * (ref.s / ref.cp) * row.Width();
  const auto qkv = Store<T>(RandomVector(elements, 21));
  auto want = AsDouble(qkv);
  kernels::RotaryEmbedding(want.data(), ref, false);
  const RotaryDims dims{ref.b, ref.s, ref.h, ref.d, ref.group, ref.cp, ref.rank, 10000.0f};
  DeviceBuffer<T> g(qkv);
  RotaryEmbedding<T>(g.get(), dims, false, nullptr);
  this->Sync();
  const auto turned = g.Download();
  EXPECT_LT(Nmse(AsDouble(turned), want), testing::kTolOnce<T>);
  kernels::RotaryEmbedding(want.data(), ref, true);
  RotaryEmbedding<T>(g.get(), dims, true, nullptr);
  this->Sync();
  EXPECT_LT(Nmse(AsDouble(g.Download()), want), testing::kTolChained<T>);
}

}  // namespace
}  // namespace ptdp::cuda_kernels
