// Multi-rank checks of the NCCL and the staged MPI communicators, run under mpirun with exactly
// predictable data (nccl-tests' trick): rank r contributes small integers, so sums and maxima are
// exact in fp32 and bf16 whatever the reduction order.
//   NCCL: needs one GPU per rank (NCCL refuses two ranks on one GPU): skipped otherwise.
//   Staged MPI: several ranks may share one GPU: needs one GPU.
// Without a GPU every test GTEST_SKIP()s. Own main: MPI is started before the tests.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <vector>

#include "runtime/comm/world.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/group.h"
#include "runtime/cuda/nccl_communicator.h"
#include "runtime/cuda/staged_mpi_communicator.h"

namespace ptdp::runtime::cuda {
namespace {

std::unique_ptr<Communicator> g_world;

int WorldSize() {
  return g_world->size();
}
int WorldRank() {
  return g_world->rank();
}

// Runs the same checks on any device-buffer communicator over the whole world.
void CheckCollectives(Communicator& c) {
  const int n = c.size();
  const int r = c.rank();
  const int64_t count = 1000;
  float* d = nullptr;
  float* g = nullptr;
  ASSERT_EQ(cudaMalloc(&d, count * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&g, count * n * 4), cudaSuccess);
  std::vector<float> h(count);
  for (int64_t i = 0; i < count; ++i) h[i] = float(r + 1 + i % 7);
  ASSERT_EQ(cudaMemcpy(d, h.data(), count * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(c.AllReduceSum(d, count, DType::kFp32).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(h.data(), d, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(h[i], float(n * (n + 1) / 2 + n * (i % 7))) << "element " << i;
  }
  // All-gather of rank ids.
  for (int64_t i = 0; i < count; ++i) h[i] = float(r);
  ASSERT_EQ(cudaMemcpy(d, h.data(), count * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(c.AllGather(d, g, count, DType::kFp32).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> all(count * n);
  ASSERT_EQ(cudaMemcpy(all.data(), g, count * n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int q = 0; q < n; ++q) ASSERT_EQ(all[q * count], float(q));
  // Ring send/recv: each rank sends to r+1 and receives from r-1.
  if (n > 1) {
    auto req = c.ISend(d, count, DType::kFp32, (r + 1) % n, 3);
    ASSERT_TRUE(req.ok()) << req.status().ToString();
    ASSERT_TRUE(c.Recv(g, count, DType::kFp32, (r + n - 1) % n, 3).ok());
    ASSERT_TRUE((*req)->Wait().ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(h.data(), g, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(h[0], float((r + n - 1) % n));
  }
  cudaFree(d);
  cudaFree(g);
}

TEST(NcclCommunicatorTest, CollectivesAndRingExact) {
  int gpus = CudaDeviceCount();
  if (gpus == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  if (gpus < WorldSize())
    GTEST_SKIP() << "NCCL needs one GPU per rank: " << gpus << " GPUs for " << WorldSize()
                 << " ranks: skipped";
  auto local = LocalRankOnNode();
  ASSERT_TRUE(local.ok());
  ASSERT_EQ(cudaSetDevice(*local % gpus), cudaSuccess);
  auto c = NcclCommunicator::Create(g_world->members());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  CheckCollectives(**c);
  ASSERT_TRUE((*c)->Barrier().ok());
}

TEST(NcclCommunicatorTest, RejectsAGroupWithoutTheCaller) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  if (WorldSize() < 2) GTEST_SKIP() << "needs 2 ranks: skipped";
  // Each rank names a group that is only the other rank: bad input, before any NCCL call.
  auto c = NcclCommunicator::Create({(WorldRank() + 1) % WorldSize()});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
}

TEST(StagedMpiCommunicatorTest, CollectivesAndRingExactOnSharedGpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);  // every rank on GPU 0
  auto host = SplitComm(*g_world, {g_world->members()});
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  StagedMpiCommunicator c(std::move(*host));
  CheckCollectives(c);
  // bf16 all-reduce: reduced in fp32 on the host, exact for small integers.
  const int64_t count = 64;
  std::vector<__nv_bfloat16> h(count, __float2bfloat16(float(WorldRank() + 1)));
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, count * 2), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, h.data(), count * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(c.AllReduceSum(d, count, DType::kBf16).ok());
  ASSERT_EQ(cudaMemcpy(h.data(), d, count * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  const int n = WorldSize();
  EXPECT_EQ(__bfloat162float(h[0]), float(n * (n + 1) / 2));
  cudaFree(d);
}

}  // namespace
}  // namespace ptdp::runtime::cuda

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!ptdp::runtime::InitComm(&argc, &argv).ok()) return 1;
  auto world = ptdp::runtime::WorldComm();
  if (!world.ok()) return 1;
  ptdp::runtime::cuda::g_world = std::move(*world);
  const int rc = RUN_ALL_TESTS();
  ptdp::runtime::cuda::g_world.reset();
  ptdp::runtime::FinalizeComm();
  return rc;
}
