// The CUDA kernels of a mixture-of-experts layer (kernels/cuda/moe.cu) against their
// kernels/reference/moe.h twins: the router's choice (the same experts, exactly) and
// probabilities, plain, pre-softmax and group-limited, and its backward; the auxiliary and z-loss
// gradients and values; the row moves in fp32 (the combine bit for bit: each row's copies added in
// ascending order, as the reference adds them) and bf16.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "kernels/cuda/ops.h"
#include "kernels/reference/moe.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/test_util.h"

namespace ptdp::cuda_kernels {
namespace {

using kernels::testing::RandomVector;
using testing::AsDouble;
using testing::DeviceBuffer;
using testing::Nmse;
using testing::Store;

class CudaMoe : public testing::CudaTest {};

// Rows not a multiple of the block, logits that are floats (the reference reads the same values).
constexpr int64_t kRouterRows = 300;

std::vector<float> Logits(int64_t rows, int64_t experts, uint64_t seed) {
  return Store<float>(RandomVector(rows * experts, seed, 2.0));
}

// An expert bias of the size of the sigmoid scores' differences (so that it moves choices).
std::vector<float> Bias(int64_t experts) {
  return Store<float>(RandomVector(experts, 13, 0.05));
}

void CheckRouter(const MoeRouterShape& m, const char* what) {
  const std::vector<float> logits = Logits(kRouterRows, m.experts, 11);
  const std::vector<double> ld = AsDouble(logits);
  std::vector<double> probs(kRouterRows * m.k);
  std::vector<int32_t> index(kRouterRows * m.k);
  // The bias on the host for the reference (the kernel reads m.bias on the device).
  std::vector<double> bias_host;
  if (m.bias != nullptr) bias_host = AsDouble(Bias(m.experts));
  const kernels::MoeRouterRule<double> rule{
      m.groups,  m.group_topk, m.pre_softmax,
      m.sigmoid, m.scale,      bias_host.empty() ? nullptr : bias_host.data()};
  kernels::MoeRouterTopK(probs.data(), index.data(), ld.data(), kRouterRows, m.experts, m.k, rule);
  DeviceBuffer<float> gl(logits), gp(kRouterRows * m.k);
  DeviceBuffer<int32_t> gi(kRouterRows * m.k);
  MoeRouterTopK(gp.get(), gi.get(), gl.get(), kRouterRows, m, nullptr);
  const std::vector<float> dprobs = Store<float>(RandomVector(kRouterRows * m.k, 12));
  const std::vector<double> dpd = AsDouble(dprobs);
  std::vector<double> dlogits(kRouterRows * m.experts);
  kernels::MoeRouterTopKBackward(dlogits.data(), dpd.data(), probs.data(), index.data(), ld.data(),
                                 kRouterRows, m.experts, m.k, rule);
  // The backward from the kernel's own probabilities (float), as the layer runs it.
  DeviceBuffer<float> gdp(dprobs), gdl(std::vector<float>(kRouterRows * m.experts, 7.0f));
  MoeRouterTopKBackward(gdl.get(), gdp.get(), gp.get(), gi.get(), gl.get(), kRouterRows, m,
                        nullptr);
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(gi.Download(), index) << what;
  EXPECT_LT(Nmse(AsDouble(gp.Download()), probs), 1e-13) << what;
  EXPECT_LT(Nmse(AsDouble(gdl.Download()), dlogits), 1e-12) << what;  // overwritten, not added
}

TEST_F(CudaMoe, RouterChoosesTheReferenceExperts) {
  CheckRouter({8, 2, 0, 0, false}, "top 2 of 8");
  CheckRouter({8, 2, 0, 0, true}, "pre-softmax top 2 of 8");
  CheckRouter({64, 6, 0, 0, false}, "top 6 of 64");
  // Group-limited: 4 groups of 4, the best 2 groups, 3 of their 8 experts (each group scored by
  // its best one, k / group_topk = 1); and with k < group_topk (each group by its best one).
  CheckRouter({16, 3, 4, 2, false}, "groups 4, best 2, top 3");
  CheckRouter({16, 4, 4, 2, true}, "pre-softmax groups 4, best 2, top 4");
  CheckRouter({16, 1, 4, 2, false}, "groups 4, best 2, top 1");
  // Scaled, and DeepSeek-V3's sigmoid scores with and without the expert bias (on the device).
  CheckRouter({8, 2, 0, 0, false, false, 2.5}, "top 2 of 8 scaled 2.5");
  CheckRouter({8, 2, 0, 0, true, false, 16}, "pre-softmax top 2 of 8 scaled 16");
  CheckRouter({16, 4, 4, 2, false, true, 2.5}, "sigmoid groups 4, best 2, top 4, scaled 2.5");
  CheckRouter({8, 1, 0, 0, false, true, 1}, "sigmoid top 1");
  DeviceBuffer<float> bias(Bias(16));
  CheckRouter({16, 4, 4, 2, false, true, 2.5, bias.get()}, "biased sigmoid groups 4, top 4");
  CheckRouter({16, 3, 0, 0, false, true, 1, bias.get()}, "biased sigmoid top 3");
}

// The auxiliary loss's gradient and sums for one grouping (kernels/reference/moe.h MoeAuxRule):
// counts per group, the rows placed by first_row.
void CheckAuxLoss(const MoeAuxShape& g, int64_t groups, const char* what) {
  constexpr int64_t experts = 8;
  const std::vector<float> logits = Logits(kRouterRows, experts, 21);
  const std::vector<double> ld = AsDouble(logits);
  std::vector<float> counts(size_t(groups * experts));
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = float(30 + 7 * (i % 11));
  const std::vector<double> cd = AsDouble(counts);
  const std::vector<float> start = Store<float>(RandomVector(kRouterRows * experts, 22));
  std::vector<double> aux = AsDouble(start), sums(counts.size());
  const kernels::MoeAuxRule rule{g.group_rows, g.first_row, g.sigmoid};
  kernels::MoeAuxLossBackward(aux.data(), ld.data(), cd.data(), 0.37, kRouterRows, experts, rule);
  kernels::MoeRouterProbSums(sums.data(), ld.data(), kRouterRows, experts, groups, rule);
  DeviceBuffer<float> gl(logits), gc(counts), gaux(start), gsums(counts.size());
  DeviceBuffer<char> scratch(static_cast<size_t>(MoeProbSumsScratchBytes(kRouterRows)));
  MoeAuxLossBackward(gaux.get(), gl.get(), gc.get(), 0.37, kRouterRows, experts, g, nullptr);
  MoeRouterProbSums(gsums.get(), scratch.get(), gl.get(), kRouterRows, experts, groups, g, nullptr);
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_LT(Nmse(AsDouble(gaux.Download()), aux), 1e-13) << what;  // accumulated onto `start`
  EXPECT_LT(Nmse(AsDouble(gsums.Download()), sums), 1e-13) << what;
  // Every row's scores sum to 1: the sums over the groups and experts are the rows.
  const std::vector<float> got = gsums.Download();
  EXPECT_NEAR(std::accumulate(got.begin(), got.end(), 0.0), double(kRouterRows), 1e-3) << what;
}

TEST_F(CudaMoe, AuxAndZLossGradientsAndValues) {
  CheckAuxLoss({}, 1, "the microbatch's softmax");
  CheckAuxLoss({0, 0, true}, 1, "the microbatch's sigmoids");
  // Per sequence of 64 rows, this rank's 300 starting 20 rows into the first: 6 groups touched.
  CheckAuxLoss({64, 20, false}, 6, "per sequence, softmax");
  CheckAuxLoss({64, 20, true}, 6, "per sequence, sigmoids");
  constexpr int64_t experts = 8;
  const std::vector<float> logits = Logits(kRouterRows, experts, 21);
  const std::vector<double> ld = AsDouble(logits);
  const std::vector<float> start = Store<float>(RandomVector(kRouterRows * experts, 22));
  std::vector<double> z = AsDouble(start);
  double sum_sq = 0;
  kernels::MoeZLossBackward(z.data(), &sum_sq, ld.data(), 0.05, kRouterRows, experts);
  DeviceBuffer<float> gl(logits), gz(start), gsq(1);
  DeviceBuffer<double> rows_sq(kRouterRows);
  MoeZLossBackward(gz.get(), gsq.get(), rows_sq.get(), gl.get(), 0.05, kRouterRows, experts,
                   nullptr);
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_LT(Nmse(AsDouble(gz.Download()), z), 1e-13);
  EXPECT_NEAR(gsq.Download()[0], sum_sq, 1e-6 * sum_sq);
}

// Destination rows of n copies among `out_rows`: some rows get several copies, some none.
std::vector<int32_t> Destinations(int64_t n, int64_t out_rows) {
  std::vector<int32_t> rows(size_t(n), 0);
  for (int64_t i = 0; i < n; ++i) rows[size_t(i)] = int32_t((i * 7 + i / 3) % (out_rows - 3));
  return rows;
}

TEST_F(CudaMoe, CombineAddsEachRowsCopiesInOrderBitForBit) {
  constexpr int64_t n = 250, out_rows = 90, width = 37;
  const std::vector<int32_t> rows = Destinations(n, out_rows);
  const std::vector<float> y = Store<float>(RandomVector(n * width, 31));
  std::vector<float> out = Store<float>(RandomVector(out_rows * width, 32));
  DeviceBuffer<float> gy(y), gout(out);
  DeviceBuffer<int32_t> grows(rows);
  DeviceBuffer<char> scratch(static_cast<size_t>(MoeUnpermuteScratchBytes(n, out_rows)));
  MoeUnpermuteAddRows<float>(gout.get(), gy.get(), grows.get(), n, out_rows, width, scratch.get(),
                             nullptr);
  kernels::MoeUnpermuteAddRows(out.data(), y.data(), rows.data(), n, width);
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(gout.Download(), out);  // the same float additions in the same order
}

template <typename T>
class CudaMoeRows : public testing::CudaTest {};
using MoeElementTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaMoeRows, MoeElementTypes);

TYPED_TEST(CudaMoeRows, PermuteScaleDotsAndCombine) {
  using T = TypeParam;
  constexpr int64_t tokens = 40, n = 100, width = 45;
  std::vector<int32_t> rows(n), slot(n);
  for (int64_t i = 0; i < n; ++i) {
    rows[size_t(i)] = int32_t((i * 13) % tokens);
    slot[size_t(i)] = int32_t((i * 29 + 5) % n);  // a permutation (29 and 100 are coprime)
  }
  const auto x = Store<T>(RandomVector(tokens * width, 41));
  const auto b = Store<T>(RandomVector(n * width, 42));
  const std::vector<float> weight = Store<float>(RandomVector(n, 43));
  const auto xd = AsDouble(x), bd = AsDouble(b), wd = AsDouble(weight);
  std::vector<double> permuted(n * width), scaled(n * width), dots(n, -1.0);
  std::vector<double> combined(tokens * width, 0.5);
  kernels::MoePermuteRows(permuted.data(), xd.data(), rows.data(), n, width);
  kernels::MoeScaleRows(scaled.data(), permuted.data(), wd.data(), slot.data(), n, width);
  kernels::MoeRowDots(dots.data(), permuted.data(), bd.data(), slot.data(), n, width);
  kernels::MoeUnpermuteAddRows(combined.data(), bd.data(), rows.data(), n, width);
  DeviceBuffer<T> gx(x), gb(b), gperm(n * width), gscaled(n * width);
  DeviceBuffer<T> gcomb(Store<T>(std::vector<double>(tokens * width, 0.5)));
  DeviceBuffer<float> gw(weight), gdots(std::vector<float>(n, -1.0f));
  DeviceBuffer<int32_t> grows(rows), gslot(slot);
  DeviceBuffer<char> scratch(static_cast<size_t>(MoeUnpermuteScratchBytes(n, tokens)));
  MoePermuteRows<T>(gperm.get(), gx.get(), grows.get(), n, width, nullptr);
  MoeScaleRows<T>(gscaled.get(), gperm.get(), gw.get(), gslot.get(), n, width, nullptr);
  MoeRowDots<T>(gdots.get(), gperm.get(), gb.get(), gslot.get(), n, width, nullptr);
  MoeUnpermuteAddRows<T>(gcomb.get(), gb.get(), grows.get(), n, tokens, width, scratch.get(),
                         nullptr);
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(AsDouble(gperm.Download()), permuted);  // copies, exactly
  EXPECT_LT(Nmse(AsDouble(gscaled.Download()), scaled), testing::kTolOnce<T>);
  EXPECT_LT(Nmse(AsDouble(gdots.Download()), dots), 1e-10);  // fp32 sums of the stored values
  EXPECT_LT(Nmse(AsDouble(gcomb.Download()), combined), testing::kTolOnce<T>);
}

TYPED_TEST(CudaMoeRows, SharedExpertGate) {
  using T = TypeParam;
  constexpr int64_t n = 333;
  const auto logit = Store<T>(RandomVector(n, 51, 4.0));
  const std::vector<float> dgate = Store<float>(RandomVector(n, 52));
  const auto ld = AsDouble(logit), dd = AsDouble(dgate);
  std::vector<double> gate(n), dlogit(n);
  kernels::MoeGateSigmoid(gate.data(), ld.data(), n);
  kernels::MoeGateSigmoidBackward(dlogit.data(), gate.data(), dd.data(), n);
  DeviceBuffer<T> gl(logit), gdl(n);
  DeviceBuffer<float> gg(n), gd(dgate);
  MoeGateSigmoid<T>(gg.get(), gl.get(), n, nullptr);
  MoeGateSigmoidBackward<T>(gdl.get(), gg.get(), gd.get(), n, nullptr);
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_LT(Nmse(AsDouble(gg.Download()), gate), 1e-12);
  EXPECT_LT(Nmse(AsDouble(gdl.Download()), dlogit), testing::kTolOnce<T>);
}

}  // namespace
}  // namespace ptdp::cuda_kernels
