// The fused CUDA attention (online softmax, never materialising s x s) against the reference
// attention with materialised probabilities, forward and backward, with and without dropout.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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
using testing::SizeFor;
using testing::Store;

template <typename T>
class CudaAttention : public testing::CudaTest {};
using ElementTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaAttention, ElementTypes);

// lse[b][h][s] = log sum_{j <= i} exp(q_i . k_j / sqrt(d)), in double.
std::vector<double> ReferenceLse(const std::vector<double>& qkv, int64_t b, int64_t s, int64_t h,
                                 int64_t d) {
  std::vector<double> lse(b * h * s);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto at = [&](int64_t bi, int64_t i, int64_t hh, int part) {
    return ((bi * s + i) * h + hh) * 3 * d + part * d;
  };
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t i = 0; i < s; ++i) {
        std::vector<double> sc(i + 1);
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0.0;
          for (int64_t e = 0; e < d; ++e)
            dot += qkv[at(bi, i, hh, 0) + e] * qkv[at(bi, j, hh, 1) + e];
          sc[j] = dot * scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0.0;
        for (double v : sc) sum += std::exp(v - mx);
        lse[(bi * h + hh) * s + i] = mx + std::log(sum);
      }
  return lse;
}

template <typename T>
void CheckAttention(int64_t b, int64_t s, int64_t h, int64_t d, float p, int64_t window = 0) {
  SCOPED_TRACE(::testing::Message() << "b=" << b << " s=" << s << " h=" << h << " d=" << d
                                    << " p=" << p << " window=" << window);
  const auto qkv = Store<T>(RandomVector(b * s * h * 3 * d, 100 + d, 1.5));
  const auto dout = Store<T>(RandomVector(b * s * h * d, 200 + d));
  const auto qkvd = AsDouble(qkv), doutd = AsDouble(dout);
  AttentionDropout drop;
  drop.key = kernels::HashKey("layer1.attention.dropout");
  drop.batch_begin = 5;  // the micro-batch's first global sequence
  drop.head_begin = 2;   // as on the second of two tensor ranks ...
  drop.h_total = 2 * h;  // ... of 2h heads
  drop.p = p;

  std::vector<double> mask;
  if (p > 0.0f) {
    mask.resize(b * h * s * s);
    kernels::FillAttentionDropoutMask(mask.data(), drop.key, b, s, h, drop.head_begin, drop.h_total,
                                      p, drop.batch_begin);
  }
  const double* m = p > 0.0f ? mask.data() : nullptr;
  std::vector<double> out(b * s * h * d), att(b * h * s * s), dqkv(qkvd.size());
  kernels::AttentionForward(out.data(), att.data(), qkvd.data(), m, b, s, h, d, 1, window);
  kernels::AttentionBackward(dqkv.data(), doutd.data(), qkvd.data(), att.data(), m, b, s, h, d);
  // The test's own log-sum-exp without a window; the reference kernel's (checked against the
  // explicit probabilities in ReferenceForward.AttentionWindowMasksEarlierKeys) with one.
  std::vector<double> lse = ReferenceLse(qkvd, b, s, h, d);
  if (window > 0) kernels::AttentionLogSumExp(lse.data(), qkvd.data(), b, s, h, d, 1, window);

  DeviceBuffer<T> gqkv(qkv), gdout(dout), gout(out.size()), gdqkv(qkv.size());
  DeviceBuffer<float> glse(lse.size()), gws(AttentionBackwardWorkspaceFloats(b, s, h, d));
  AttentionForward<T>(gout.get(), glse.get(), gqkv.get(), b, s, h, d, drop, nullptr, window);
  AttentionBackward<T>(gdqkv.get(), gws.get(), gdout.get(), gqkv.get(), gout.get(), glse.get(), b,
                       s, h, d, drop, nullptr, window);
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_LT(Nmse(AsDouble(gout.Download()), out), testing::kTolOnce<T>);
  EXPECT_LT(Nmse(AsDouble(glse.Download()), lse), 1e-10);
  EXPECT_LT(Nmse(AsDouble(gdqkv.Download()), dqkv), testing::kTolChained<T>);
}

TYPED_TEST(CudaAttention, EveryHeadDim) {
  // s = 100 (70 emulated) leaves partial query and key tiles (64-row forward blocks, 64-key
  // backward blocks).
  // 192: multi-latent attention's query/key heads (128 + 64), 4 threads a row of 48 each.
  for (int64_t d : {16, 32, 64, 128, 192}) {
    CheckAttention<TypeParam>(SizeFor(2, 1), SizeFor(100, 70), SizeFor(3, 2), d, 0.0f);
  }
}

TYPED_TEST(CudaAttention, WithDropout) {
  for (int64_t d : {32, 128, 192}) CheckAttention<TypeParam>(SizeFor(2, 1), 70, 2, d, 0.2f);
}

TYPED_TEST(CudaAttention, ShortAndLongSequences) {
  CheckAttention<TypeParam>(1, 1, 1, 64, 0.0f);  // a single position attends to itself
  CheckAttention<TypeParam>(1, SizeFor(300, 150), SizeFor(2, 1), 64, 0.0f);  // several tiles
}

// A sliding window (model.window_size) shorter than a tile and longer than one, with dropout:
// the forward's first tile and the backward's last query tile move with it.
TYPED_TEST(CudaAttention, SlidingWindow) {
  for (int64_t window : {int64_t(5), int64_t(80)}) {
    CheckAttention<TypeParam>(1, SizeFor(200, 150), 2, 32, 0.0f, window);
  }
  CheckAttention<TypeParam>(1, SizeFor(200, 150), 2, 64, 0.2f, 40);
}

TEST(CudaAttentionApi, HeadDims) {
  EXPECT_TRUE(AttentionSupportsHeadDim(64));
  EXPECT_TRUE(AttentionSupportsHeadDim(128));
  EXPECT_TRUE(AttentionSupportsHeadDim(192));
  EXPECT_FALSE(AttentionSupportsHeadDim(96));
  EXPECT_EQ(AttentionBackwardWorkspaceFloats(2, 10, 3, 64), 2 * 10 * 3 * 64 + 2 * 3 * 10);
}

}  // namespace
}  // namespace ptdp::cuda_kernels
