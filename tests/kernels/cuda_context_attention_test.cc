// The CUDA context-parallel attention (kernels/cuda/context_attention.cu) against its reference
// twin (kernels/reference/context_attention.cc), rank by rank: the packs, every rank's output and
// log-sum-exp, and its query gradient and key-value shares through every source rank, with and
// without dropout, for cp 2 and 4 (the reference twin is itself checked against the
// whole-sequence kernels in reference_context_attention_test.cc); and grouped-query attention
// (kernels/cuda/llama.cu GroupedContext*: grouped packs, the multi-head kernels on copies).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

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
using testing::SizeFor;
using testing::Store;

template <typename T>
class CudaContextAttention : public testing::CudaTest {};
using ElementTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaContextAttention, ElementTypes);

template <typename T>
void CheckRanks(int64_t b, int64_t s, int64_t h, int64_t d, int cp, float p, int64_t group = 1) {
  SCOPED_TRACE(::testing::Message() << "b=" << b << " s=" << s << " h=" << h << " d=" << d
                                    << " cp=" << cp << " p=" << p << " group=" << group);
  const kernels::QkvLayout row{h, d, group};
  const int64_t S = s / cp, rows = b * S, unit = rows * row.KvHeads() * 2 * d;
  AttentionDropout drop;
  drop.key = kernels::HashKey("layer2.attention.dropout");
  drop.batch_begin = 3;
  drop.head_begin = h;  // the second of two tensor ranks
  drop.h_total = 2 * h;
  drop.p = p;
  kernels::ContextAttentionDims ref{
      b, s, h, d, cp, 0, p, drop.key, drop.h_total, drop.head_begin, drop.batch_begin, group};
  // Every rank's local qkv and output gradient (rounded to T once), and the group's packs.
  std::vector<std::vector<T>> qkv, dout;
  std::vector<double> kv_all(size_t(cp * unit));
  for (int r = 0; r < cp; ++r) {
    qkv.push_back(Store<T>(RandomVector(rows * row.Width(), 300 + r, 1.5)));
    dout.push_back(Store<T>(RandomVector(rows * h * d, 400 + r)));
    kernels::ContextKvPack(kv_all.data() + r * unit, AsDouble(qkv[size_t(r)]).data(), rows, h, d,
                           group);
  }
  const std::vector<T> kv_all_t = Store<T>(kv_all);
  DeviceBuffer<T> gkv_all(kv_all_t);
  for (int r = 0; r < cp; ++r) {
    SCOPED_TRACE(::testing::Message() << "rank " << r);
    ref.rank = r;
    const std::vector<double> q = AsDouble(qkv[size_t(r)]), g = AsDouble(dout[size_t(r)]);
    std::vector<double> out(size_t(rows * h * d)), lse(size_t(b * h * S));
    kernels::ContextAttentionForward(out.data(), lse.data(), q.data(), kv_all.data(), ref);
    const ContextDims dims{b, s, h, d, cp, r};
    DeviceBuffer<T> gqkv(qkv[size_t(r)]), gdout(dout[size_t(r)]), gout(out.size()),
        gkv(static_cast<size_t>(unit)), gdkv(static_cast<size_t>(unit));
    DeviceBuffer<float> glse(lse.size()),
        gws(static_cast<size_t>(ContextAttentionBackwardWorkspaceFloats(dims)));
    DeviceBuffer<T> copies(static_cast<size_t>(
        group > 1
            ? std::max(GroupedContextWorkspace(dims, false), GroupedContextWorkspace(dims, true))
            : 1));
    if (group > 1) {
      GroupedContextKvPack<T>(gkv.get(), gqkv.get(), rows, row, nullptr);
      GroupedContextAttentionForward<T>(gout.get(), glse.get(), gqkv.get(), gkv_all.get(), dims,
                                        group, drop, copies.get(), nullptr);
    } else {
      ContextKvPack<T>(gkv.get(), gqkv.get(), rows, h, d, nullptr);
      ContextAttentionForward<T>(gout.get(), glse.get(), gqkv.get(), gkv_all.get(), dims, drop,
                                 nullptr);
    }
    PTDP_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(AsDouble(gkv.Download()),
              std::vector<double>(kv_all.begin() + r * unit, kv_all.begin() + (r + 1) * unit));
    EXPECT_LT(Nmse(AsDouble(gout.Download()), out), testing::kTolOnce<T>);
    EXPECT_LT(Nmse(AsDouble(glse.Download()), lse), 1e-10);
    // The backward through each source, the reference reading the device's output as the layer's
    // stash does; the query gradient accumulates over the sources on both sides.
    const std::vector<double> stash_out = AsDouble(gout.Download());
    std::vector<double> dqkv(q.size(), 0.0), dkv(static_cast<size_t>(unit));
    DeviceBuffer<T> gdqkv(std::vector<T>(q.size(), T(0.0f)));
    for (int src = 0; src < cp; ++src) {
      SCOPED_TRACE(::testing::Message() << "source " << src);
      kernels::ContextAttentionBackward(dqkv.data(), dkv.data(), g.data(), stash_out.data(),
                                        q.data(), kv_all.data() + src * unit, lse.data(), ref, src);
      DeviceBuffer<T> gkv_src(
          std::vector<T>(kv_all_t.begin() + src * unit, kv_all_t.begin() + (src + 1) * unit));
      if (group > 1) {
        GroupedContextAttentionBackward<T>(gdqkv.get(), gdkv.get(), gws.get(), copies.get(),
                                           gdout.get(), gout.get(), gqkv.get(), gkv_src.get(),
                                           glse.get(), dims, group, src, drop, nullptr);
      } else {
        ContextAttentionBackward<T>(gdqkv.get(), gdkv.get(), gws.get(), gdout.get(), gout.get(),
                                    gqkv.get(), gkv_src.get(), glse.get(), dims, src, drop,
                                    nullptr);
      }
      PTDP_CUDA_CHECK(cudaDeviceSynchronize());
      EXPECT_LT(Nmse(AsDouble(gdkv.Download()), dkv), testing::kTolChained<T>);
    }
    // The key-value slots from the last source's share, as the layer unpacks the summed shares.
    kernels::ContextKvUnpack(dqkv.data(), dkv.data(), rows, h, d, group);
    if (group > 1) {
      GroupedContextKvUnpack<T>(gdqkv.get(), gdkv.get(), rows, row, nullptr);
    } else {
      ContextKvUnpack<T>(gdqkv.get(), gdkv.get(), rows, h, d, nullptr);
    }
    PTDP_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_LT(Nmse(AsDouble(gdqkv.Download()), dqkv), testing::kTolChained<T>);
  }
}

TYPED_TEST(CudaContextAttention, EveryHeadDim) {
  // s / cp = 96 (32 emulated) local rows: two forward blocks on a GPU, partial tiles (three of
  // 32 rows at 192, multi-latent attention's width).
  for (int64_t d : {16, 64, 128, 192}) {
    CheckRanks<TypeParam>(SizeFor(2, 1), SizeFor(192, 64), SizeFor(3, 2), d, 2, 0.0f);
  }
}

TYPED_TEST(CudaContextAttention, WithDropoutAndFourRanks) {
  CheckRanks<TypeParam>(SizeFor(2, 1), SizeFor(128, 64), 2, 32, 2, 0.2f);
  CheckRanks<TypeParam>(1, SizeFor(256, 64), 2, 64, 4, 0.1f);
}

// 4 query heads over 2 key/value heads, with dropout, at cp 2 and 4.
TYPED_TEST(CudaContextAttention, GroupedQueriesOnMultiHeadKernels) {
  CheckRanks<TypeParam>(SizeFor(2, 1), SizeFor(128, 64), 4, 32, 2, 0.2f, 2);
  CheckRanks<TypeParam>(1, SizeFor(256, 64), 4, 16, 4, 0.0f, 4);
}

TEST(CudaContextAttentionApi, Workspace) {
  const ContextDims dims{2, 40, 3, 64, 2, 1};
  EXPECT_EQ(ContextAttentionBackwardWorkspaceFloats(dims), 2 * 20 * 3 * 64 + 2 * 3 * 20);
}

}  // namespace
}  // namespace ptdp::cuda_kernels
