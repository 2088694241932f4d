// The cuBLASLt GEMM wrapper (bf16 inputs, fp32 accumulation) against reference Matmul in double
// on the same bf16 inputs.
#include <gtest/gtest.h>

#include "kernels/cublas/gemm.h"
#include "kernels/reference/ops.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/test_util.h"

namespace ptdp::cuda_kernels {
namespace {

using kernels::testing::RandomVector;
using testing::AsDouble;
using testing::bf16;
using testing::DeviceBuffer;
using testing::Nmse;
using testing::Store;

class CudaGemm : public testing::CudaTest {};

TEST_F(CudaGemm, LinearForwardAndBackward) {
  const int64_t n = 96, c = 64, oc = 40;
  const auto x = Store<bf16>(RandomVector(n * c, 1));
  const auto w = Store<bf16>(RandomVector(oc * c, 2));
  const auto bias = Store<bf16>(RandomVector(oc, 3));
  const auto dout = Store<bf16>(RandomVector(n * oc, 4));
  const auto xd = AsDouble(x), wd = AsDouble(w), biasd = AsDouble(bias), doutd = AsDouble(dout);
  std::vector<double> out(n * oc), out_nobias(n * oc), dx(n * c), dw(oc * c, 0.25);
  kernels::MatmulForward(out.data(), xd.data(), wd.data(), biasd.data(), n, c, oc);
  kernels::MatmulForward<double>(out_nobias.data(), xd.data(), wd.data(), nullptr, n, c, oc);
  kernels::MatmulBackward<double>(dx.data(), dw.data(), nullptr, doutd.data(), xd.data(), wd.data(),
                                  n, c, oc);

  auto ctx = cublas::LtGemm::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  cublas::LtGemm& gemm = **ctx;
  DeviceBuffer<bf16> gx(x), gw(w), gbias(bias), gdout(dout), gout(n * oc), gdx(n * c);
  DeviceBuffer<float> gout32(n * oc), gbias32(std::vector<float>(biasd.begin(), biasd.end()));
  DeviceBuffer<float> gdw(std::vector<float>(oc * c, 0.25f));
  gemm.LinearForward<bf16>(gout.get(), gx.get(), gw.get(), gbias.get(), n, c, oc, nullptr);
  gemm.LinearForward<float>(gout32.get(), gx.get(), gw.get(), nullptr, n, c, oc, nullptr);
  gemm.LinearBackwardData(gdx.get(), gdout.get(), gw.get(), n, c, oc, false, nullptr);
  gemm.LinearBackwardWeight(gdw.get(), gdout.get(), gx.get(), n, c, oc, nullptr);
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_LT(Nmse(AsDouble(gout.Download()), out), 1e-5);            // bf16 output
  EXPECT_LT(Nmse(AsDouble(gout32.Download()), out_nobias), 1e-10);  // fp32 output
  EXPECT_LT(Nmse(AsDouble(gdx.Download()), dx), 1e-5);
  EXPECT_LT(Nmse(AsDouble(gdw.Download()), dw), 1e-10);  // accumulated into fp32

  // accumulate = true adds to dx: twice the gradient.
  gemm.LinearBackwardData(gdx.get(), gdout.get(), gw.get(), n, c, oc, true, nullptr);
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> twice(dx.size());
  for (size_t i = 0; i < dx.size(); ++i) twice[i] = 2.0 * dx[i];
  EXPECT_LT(Nmse(AsDouble(gdx.Download()), twice), 1e-4);
}

TEST_F(CudaGemm, OddShapesAndOffsetPointers) {
  // Row counts that are not tile multiples, and operands starting 16 bytes into their buffers
  // (not 256-byte aligned): the plan must pick an algorithm that accepts them.
  const int64_t n = 33, c = 24, oc = 72, off = 8;  // 8 bf16 = 16 bytes
  const auto x = Store<bf16>(RandomVector(n * c + off, 5));
  const auto w = Store<bf16>(RandomVector(oc * c + off, 6));
  const auto xd = AsDouble(x), wd = AsDouble(w);
  std::vector<double> out(n * oc);
  kernels::MatmulForward<double>(out.data(), xd.data() + off, wd.data() + off, nullptr, n, c, oc);
  auto ctx = cublas::LtGemm::Create();
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  DeviceBuffer<bf16> gx(x), gw(w), gout(n * oc + off);
  (*ctx)->LinearForward<bf16>(gout.get() + off, gx.get() + off, gw.get() + off, nullptr, n, c, oc,
                              nullptr);
  PTDP_CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = AsDouble(gout.Download());
  EXPECT_LT(Nmse(std::vector<double>(got.begin() + off, got.end()), out), 1e-5);
  for (int64_t i = 0; i < off; ++i) EXPECT_EQ(got[i], 0.0);  // nothing written before the output
}

}  // namespace
}  // namespace ptdp::cuda_kernels
