// CUDA vocabulary-parallel cross-entropy, fused AdamW, sum of squares, non-finite flag and casts
// against the reference (or exact host arithmetic).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>

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
class CudaLoss : public testing::CudaTest {};
using ElementTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaLoss, ElementTypes);

// The vocabulary-parallel cross-entropy over `shards` equal shards of v padded columns (v_real
// real) against the reference on the unsplit logits: each shard's one-pass stats, the max
// all-reduce, the rescale and the sum all-reduce (the collectives on the host), the loss, and each
// shard's gradient.
template <typename T>
void CrossEntropyShards(int64_t v, int64_t v_real, int64_t shards) {
  const int64_t n = testing::SizeFor(19, 5), w = v / shards;
  const auto logits = Store<T>(RandomVector(n * v, 7, 3.0));
  const auto logitsd = AsDouble(logits);
  std::vector<int32_t> targets(n);
  for (int64_t r = 0; r < n; ++r) targets[r] = static_cast<int32_t>((r * 97) % v_real);
  targets[0] = static_cast<int32_t>(v_real - 1);  // the last real id
  std::vector<double> dloss(n);
  for (int64_t r = 0; r < n; ++r) dloss[r] = 1.0 / n;
  // Reference on the unsplit logits.
  std::vector<double> mx(n), sum(n), tl(n), loss(n), dl(n * v);
  kernels::CrossEntropyLocalStats(mx.data(), sum.data(), tl.data(), logitsd.data(), targets.data(),
                                  n, v, 0, v_real);
  kernels::CrossEntropyLoss(loss.data(), mx.data(), sum.data(), tl.data(), n);
  kernels::CrossEntropyBackward(dl.data(), logitsd.data(), mx.data(), sum.data(), targets.data(),
                                dloss.data(), n, v, 0, v_real);

  DeviceBuffer<int32_t> gtargets(targets);
  DeviceBuffer<float> gdloss(std::vector<float>(dloss.begin(), dloss.end()));
  std::vector<std::unique_ptr<DeviceBuffer<T>>> shard;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> lmax, lsum;
  std::vector<std::vector<float>> ltl;
  std::vector<float> gm(n, -INFINITY);
  for (int64_t k = 0; k < shards; ++k) {
    std::vector<T> slice(n * w);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < w; ++j) slice[r * w + j] = logits[r * v + k * w + j];
    shard.push_back(std::make_unique<DeviceBuffer<T>>(slice));
    lmax.push_back(std::make_unique<DeviceBuffer<float>>(n));
    lsum.push_back(std::make_unique<DeviceBuffer<float>>(n));
    DeviceBuffer<float> gtl(n);
    CrossEntropyLocalStats<T>(lmax[k]->get(), lsum[k]->get(), gtl.get(), shard[k]->get(),
                              gtargets.get(), n, w, k * w, v_real, nullptr);
    ltl.push_back(gtl.Download());
    const auto m = lmax[k]->Download();
    for (int64_t r = 0; r < n; ++r) gm[r] = std::max(gm[r], m[r]);  // all-reduce max
  }
  DeviceBuffer<float> gmax(gm);
  std::vector<float> total_sum(n, 0.0f), total_tl(n, 0.0f);
  for (int64_t k = 0; k < shards; ++k) {
    CrossEntropyRescaleSums(lsum[k]->get(), lmax[k]->get(), gmax.get(), n, nullptr);
    const auto s = lsum[k]->Download();
    for (int64_t r = 0; r < n; ++r) {  // all-reduce sum
      ASSERT_TRUE(std::isfinite(s[r])) << "shard " << k << " row " << r;
      total_sum[r] += s[r];
      total_tl[r] += ltl[k][r];
    }
  }
  DeviceBuffer<float> gsum(total_sum), gtl(total_tl), gloss(n);
  CrossEntropyLoss(gloss.get(), gmax.get(), gsum.get(), gtl.get(), n, nullptr);
  std::vector<double> got_dl(n * v);
  for (int64_t k = 0; k < shards; ++k) {
    // In place: the gradient overwrites the shard's logits.
    CrossEntropyBackward<T>(shard[k]->get(), shard[k]->get(), gmax.get(), gsum.get(),
                            gtargets.get(), gdloss.get(), n, w, k * w, v_real, nullptr);
    const auto g = AsDouble(shard[k]->Download());
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < w; ++j) got_dl[r * v + k * w + j] = g[r * w + j];
  }
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_LT(Nmse(AsDouble(gloss.Download()), loss), 1e-10);
  EXPECT_LT(Nmse(got_dl, dl), testing::kTolOnce<T>);
  for (int64_t r = 0; r < n; ++r) EXPECT_EQ(got_dl[r * v + v - 1], 0.0);  // padding column
}

// Four shards of 256 (16-byte packs in fp32 and bf16; shard 2 ends in a partial pack, shard 3 is
// padding only: local max -inf, sum 0).
TYPED_TEST(CudaLoss, CrossEntropyFourShardsOneOfPadding) {
  CrossEntropyShards<TypeParam>(1024, 700, 4);
}
// Three shards of 333 columns: rows not on 16-byte boundaries, one logit at a time.
TYPED_TEST(CudaLoss, CrossEntropyThreeUnalignedShards) {
  CrossEntropyShards<TypeParam>(999, 998, 3);
}

class CudaOptim : public testing::CudaTest {};

TEST_F(CudaOptim, AdamWMatchesReferenceAndWritesCopies) {
  const int64_t n = 10007;
  const std::vector<double> p0 = RandomVector(n, 51), g0 = RandomVector(n, 52, 0.1);
  std::vector<float> param(p0.begin(), p0.end()), grad(g0.begin(), g0.end());
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  // Reference in double on the same fp32 values; the kernel's grad_scale 0.5 is folded in.
  std::vector<double> rp(param.begin(), param.end()), rg(n), rm(n, 0.0), rv(n, 0.0);
  for (int64_t i = 0; i < n; ++i) rg[i] = 0.5 * grad[i];
  DeviceBuffer<float> gp(param), gg(grad), gm(m), gv(v);
  DeviceBuffer<bf16> gcopy(n);
  DeviceBuffer<__half> gcopy16(n);
  for (int64_t step = 1; step <= 3; ++step) {
    kernels::AdamWUpdate(rp.data(), rg.data(), rm.data(), rv.data(), n, 1e-3, 0.9, 0.95, 1e-8, 0.1,
                         step);
    AdamWUpdate<bf16>(gp.get(), gcopy.get(), gg.get(), gm.get(), gv.get(), n, 1e-3, 0.9, 0.95, 1e-8,
                      0.1, step, 0.5f, nullptr);
  }
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = gp.Download();
  EXPECT_LT(Nmse(AsDouble(got), rp), 1e-12);
  EXPECT_LT(Nmse(AsDouble(gm.Download()), rm), 1e-10);
  EXPECT_LT(Nmse(AsDouble(gv.Download()), rv), 1e-10);
  const auto copy = gcopy.Download();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(__bfloat162float(copy[i]), __bfloat162float(__float2bfloat16_rn(got[i])));
  }
  // The fp16 copy variant writes the same parameters rounded to fp16.
  AdamWUpdate<__half>(gp.get(), gcopy16.get(), gg.get(), gm.get(), gv.get(), n, 1e-3, 0.9, 0.95,
                      1e-8, 0.1, 4, 0.5f, nullptr);
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  const auto got4 = gp.Download();
  const auto copy16 = gcopy16.Download();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(__half2float(copy16[i]), __half2float(__float2half_rn(got4[i])));
  }
}

TEST_F(CudaOptim, SumSquaresAndNonFinite) {
  const int64_t n = testing::SizeFor(100003, 4099);
  std::vector<float> x(n);
  double want = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>((i % 7) - 3) * 0.25f;  // exactly representable squares
    want += static_cast<double>(x[i]) * x[i];
  }
  DeviceBuffer<float> gx(x);
  DeviceBuffer<double> gsum(1);
  DeviceBuffer<int> gfound(1);
  SumSquaresAccumulate<float>(gsum.get(), gx.get(), n, nullptr);
  FlagNonFinite<float>(gfound.get(), gx.get(), n, nullptr);
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_DOUBLE_EQ(gsum.Download()[0], want);
  EXPECT_EQ(gfound.Download()[0], 0);
  x[n / 2] = std::numeric_limits<float>::infinity();
  gx.Upload(x);
  FlagNonFinite<float>(gfound.get(), gx.get(), n, nullptr);
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(gfound.Download()[0], 1);
}

TEST_F(CudaOptim, CastsRoundToNearestEven) {
  const auto values = RandomVector(4096, 61, 100.0);
  const std::vector<float> f(values.begin(), values.end());
  DeviceBuffer<float> gf(f), gback(f.size());
  DeviceBuffer<bf16> gb(f.size());
  DeviceBuffer<__half> gh(f.size());
  Cast<bf16, float>(gb.get(), gf.get(), f.size(), nullptr);
  Cast<__half, float>(gh.get(), gf.get(), f.size(), nullptr);
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  const auto b = gb.Download();
  const auto h = gh.Download();
  for (size_t i = 0; i < f.size(); ++i) {
    ASSERT_EQ(__bfloat162float(b[i]), __bfloat162float(__float2bfloat16_rn(f[i])));
    ASSERT_EQ(__half2float(h[i]), __half2float(__float2half_rn(f[i])));
  }
  Cast<float, bf16>(gback.get(), gb.get(), f.size(), nullptr);
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  const auto back = gback.Download();
  for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(back[i], __bfloat162float(b[i]));
  Cast<float, __half>(gback.get(), gh.get(), f.size(), nullptr);
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  const auto back16 = gback.Download();
  for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(back16[i], __half2float(h[i]));
}

}  // namespace
}  // namespace ptdp::cuda_kernels
