// The CUDA kernels of Llama-style layers (kernels/cuda/llama.cu) against their kernels/reference
// twins (run in double on the same stored inputs), by NMSE: RMSNorm forward and backward, SwiGLU
// forward and backward, the rotary embedding of a grouped QKV at context-parallel positions
// and back, Qwen3's QK norm forward and backward, and grouped-query attention run on the
// multi-head attention kernels through the copy to multi-head rows and the sum back.
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

// Nemotron-4's squared ReLU, forward and backward, against the reference.
TYPED_TEST(CudaLlama, SquaredReluForwardBackward) {
  using T = TypeParam;
  const int64_t count = kRows * kCols;
  const auto in = Store<T>(RandomVector(count, 13, 2.0));
  const auto dout = Store<T>(RandomVector(count, 14));
  const auto ind = AsDouble(in), doutd = AsDouble(dout);
  std::vector<double> out(count), din(count);
  kernels::SquaredReluForward(out.data(), ind.data(), count);
  kernels::SquaredReluBackward(din.data(), ind.data(), doutd.data(), count);
  DeviceBuffer<T> gin(in), gdout(dout), gout(count), gdin(count);
  SquaredReluForward<T>(gout.get(), gin.get(), count, nullptr);
  SquaredReluBackward<T>(gdin.get(), gin.get(), gdout.get(), count, nullptr);
  this->Sync();
  EXPECT_LT(Nmse(AsDouble(gout.Download()), out), testing::kTolOnce<T>);
  EXPECT_LT(Nmse(AsDouble(gdin.Download()), din), testing::kTolOnce<T>);
}

// 4 query heads over 2 key/value heads, rank 1 of cp 2 (its positions are two chunks of the
// sequence), turned and turned back; unscaled, with Llama 3.1's scaling of an original length
// of 16 (pair 0 in the blended band, the others divided by the factor), turning half of each
// head (rotary_percent 0.5, Nemotron-4's), and with YaRN over an original length of 64 (pair 0
// kept, 1 to 4 on the ramp, 5 to 7 divided) and a concentration of 1.25.
TYPED_TEST(CudaLlama, RotaryOfGroupedQkvAtContextPositions) {
  using T = TypeParam;
  kernels::RopeFreqs yarn{100, 8, 1, 4, 64};
  yarn.yarn = true;
  yarn.attention_factor = 1.25;
  for (const kernels::RopeFreqs& rope :
       {kernels::RopeFreqs{10000}, kernels::RopeFreqs{500000, 8, 1, 4, 16},
        kernels::RopeFreqs{10000, 0, 1, 4, 8192, 0.5}, yarn}) {
    SCOPED_TRACE(::testing::Message() << rope.factor << " " << rope.percent);
    kernels::RotaryDims ref;
    ref.b = 2;
    ref.s = 24;
    ref.h = 4;
    ref.d = 16;
    ref.group = 2;
    ref.cp = 2;
    ref.rank = 1;
    ref.rope = rope;
    const kernels::QkvLayout row{ref.h, ref.d, ref.group};
    const int64_t elements = ref.b * (ref.s / ref.cp) * row.Width();
    const auto qkv = Store<T>(RandomVector(elements, 21));
    auto want = AsDouble(qkv);
    kernels::RotaryEmbedding(want.data(), ref, false);
    const RotaryDims dims{ref.b, ref.s, ref.h, ref.d, ref.group, ref.cp, ref.rank, rope};
    DeviceBuffer<T> g(qkv);
    RotaryEmbedding<T>(g.get(), dims, false, nullptr);
    this->Sync();
    EXPECT_LT(Nmse(AsDouble(g.Download()), want), testing::kTolOnce<T>);
    kernels::RotaryEmbedding(want.data(), ref, true);
    RotaryEmbedding<T>(g.get(), dims, true, nullptr);
    this->Sync();
    EXPECT_LT(Nmse(AsDouble(g.Download()), want), testing::kTolChained<T>);
  }
}

// 3 rows of 6 query heads over 2 key/value heads (group 3) of 40 features (not a warp's multiple).
TYPED_TEST(CudaLlama, QkNormForwardBackward) {
  using T = TypeParam;
  const kernels::QkvLayout row{6, 40, 3};
  const int64_t rows = 3, slots = rows * 2 * 4;
  const auto qkv = Store<T>(RandomVector(rows * row.Width(), 31, 2.0));
  const auto dy = Store<T>(RandomVector(rows * row.Width(), 32));
  const auto qw = Store<T>(RandomVector(row.d, 33)), kw = Store<T>(RandomVector(row.d, 34));
  auto want = AsDouble(qkv), dwant = AsDouble(dy);
  const auto qwd = AsDouble(qw), kwd = AsDouble(kw);
  std::vector<double> saved(slots * row.d), rstd(slots), dqw(row.d, 1.0), dkw(row.d, -1.0);
  kernels::QkNormForward(want.data(), saved.data(), rstd.data(), qwd.data(), kwd.data(), rows, row,
                         1e-6);
  kernels::QkNormBackward(dwant.data(), dqw.data(), dkw.data(), saved.data(), rstd.data(),
                          qwd.data(), kwd.data(), rows, row);
  DeviceBuffer<T> g(qkv), gdy(dy), gqw(qw), gkw(kw), gsaved(slots * row.d);
  DeviceBuffer<float> grstd(slots), gdqw(std::vector<float>(row.d, 1.0f)),
      gdkw(std::vector<float>(row.d, -1.0f));
  QkNormForward<T>(g.get(), gsaved.get(), grstd.get(), gqw.get(), gkw.get(), rows, row, 1e-6f,
                   nullptr);
  QkNormBackward<T>(gdy.get(), gdqw.get(), gdkw.get(), gsaved.get(), grstd.get(), gqw.get(),
                    gkw.get(), rows, row, nullptr);
  this->Sync();
  EXPECT_LT(Nmse(AsDouble(g.Download()), want), testing::kTolOnce<T>);  // values untouched too
  EXPECT_EQ(AsDouble(gsaved.Download()), saved);                        // copies
  EXPECT_LT(Nmse(AsDouble(grstd.Download()), rstd), 1e-10);
  EXPECT_LT(Nmse(AsDouble(gdy.Download()), dwant), testing::kTolOnce<T>);
  EXPECT_LT(Nmse(AsDouble(gdqw.Download()), dqw), 1e-10);  // fp32 main grads, accumulated
  EXPECT_LT(Nmse(AsDouble(gdkw.Download()), dkw), 1e-10);
}

// The multi-head attention kernels on the grouped QKV copied to multi-head rows give the grouped
// reference attention (4 query heads over 2, head dim 32), and the gradient summed back its
// gradient, a group's key and value gradients summed over its heads.
TYPED_TEST(CudaLlama, GroupedAttentionOnMultiHeadKernels) {
  using T = TypeParam;
  const int64_t b = 2, s = testing::SizeFor(40, 24), h = 4, d = 32;
  const kernels::QkvLayout row{h, d, 2};
  const auto qkv = Store<T>(RandomVector(b * s * row.Width(), 41, 1.5));
  const auto dout = Store<T>(RandomVector(b * s * h * d, 42));
  const auto qkvd = AsDouble(qkv), doutd = AsDouble(dout);
  std::vector<double> out(b * s * h * d), att(b * h * s * s), dqkv(qkvd.size());
  kernels::AttentionForward<double>(out.data(), att.data(), qkvd.data(), nullptr, b, s, h, d, 2);
  kernels::AttentionBackward<double>(dqkv.data(), doutd.data(), qkvd.data(), att.data(), nullptr, b,
                                     s, h, d, 2);
  DeviceBuffer<T> g(qkv), gmha(b * s * h * 3 * d), gdout(dout), gout(out.size());
  DeviceBuffer<T> gdmha(b * s * h * 3 * d), gdqkv(qkv.size());
  DeviceBuffer<float> glse(b * h * s), gws(AttentionBackwardWorkspaceFloats(b, s, h, d));
  ExpandGroupedQkv<T>(gmha.get(), g.get(), b * s, row, nullptr);
  AttentionForward<T>(gout.get(), glse.get(), gmha.get(), b, s, h, d, {}, nullptr);
  AttentionBackward<T>(gdmha.get(), gws.get(), gdout.get(), gmha.get(), gout.get(), glse.get(), b,
                       s, h, d, {}, nullptr);
  SumGroupedDqkv<T>(gdqkv.get(), gdmha.get(), b * s, row, nullptr);
  this->Sync();
  EXPECT_LT(Nmse(AsDouble(gout.Download()), out), testing::kTolOnce<T>);
  EXPECT_LT(Nmse(AsDouble(gdqkv.Download()), dqkv), testing::kTolChained<T>);
}

}  // namespace
}  // namespace ptdp::cuda_kernels
