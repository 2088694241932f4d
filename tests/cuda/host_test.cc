// Host-only checks of runtime/cuda (label unit: they run and pass without a GPU, so they are kept
// out of the gpu-labelled binaries, whose results must mean "ran on a GPU").
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <vector>

#include <cublasLt.h>
#include <cublas_v2.h>

#include <string>

#include "kernels/cublas/lazy_cublas.h"
#include "kernels/cublas/tune_pick.h"
#include "runtime/cuda/caching_allocator.h"
#include "runtime/cuda/staged_mpi_communicator.h"

namespace ptdp::runtime::cuda {
namespace {

TEST(CachingAllocatorHostTest, SizeClasses) {
  EXPECT_EQ(CachingAllocator::RoundedSize(1), 512);
  EXPECT_EQ(CachingAllocator::RoundedSize(512), 512);
  EXPECT_EQ(CachingAllocator::RoundedSize(513), 1024);
  EXPECT_EQ(CachingAllocator::RoundedSize((1 << 20) - 1), 1 << 20);
  EXPECT_EQ(CachingAllocator::RoundedSize(1 << 20), 2 << 20);
  EXPECT_EQ(CachingAllocator::RoundedSize((2 << 20) + 1), 4 << 20);
}

TEST(StagedConversionHostTest, Bf16WidenNarrowIsExactForRepresentableValues) {
  // Small integers and powers of two are exact in bf16: a round trip must return them bit for bit.
  std::vector<float> in = {0.f, 1.f, -2.f, 3.f, 0.5f, 256.f, -0.125f, 7.f};
  std::vector<__nv_bfloat16> half(in.size());
  NarrowFromFp32(half.data(), in.data(), int64_t(in.size()), DType::kBf16);
  std::vector<float> back(in.size());
  WidenToFp32(back.data(), half.data(), int64_t(in.size()), DType::kBf16);
  EXPECT_EQ(back, in);
  // 1 + 2^-9 is not representable (8 mantissa bits): round to nearest even gives 1.
  const float odd = 1.0f + 1.0f / 512;
  NarrowFromFp32(half.data(), &odd, 1, DType::kBf16);
  WidenToFp32(back.data(), half.data(), 1, DType::kBf16);
  EXPECT_EQ(back[0], 1.0f);
}

// cuBLAS and cuBLASLt are loaded on first use (kernels/cublas/lazy_cublas.h): the toolkit's files
// load and export every forwarded entry point, and the forwarders reach them (the status strings
// come from the libraries; no call here needs a GPU).
TEST(LazyCublasHostTest, EveryForwardedEntryPointResolves) {
  const Status st = cublas::LoadCublasLibraries();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(std::string(cublasLtGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)),
            "the requested functionality is not supported");
  EXPECT_EQ(std::string(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)),
            "an unsupported value or parameter was passed to the function");
}

TEST(LazyCublasHostTest, AFileThatDoesNotLoadIsNamed) {
  const Status missing =
      cublas::TryLoadCublasFrom("/nonexistent/libcublasLt.so.99", cublas::CublasLibraryPath());
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.ToString().find("/nonexistent/libcublasLt.so.99"), std::string::npos)
      << missing.ToString();
  // A library that loads but lacks the entry points (the C maths library given as cuBLASLt).
  const Status wrong = cublas::TryLoadCublasFrom("libm.so.6", cublas::CublasLibraryPath());
  EXPECT_FALSE(wrong.ok());
  EXPECT_NE(wrong.ToString().find("cublasLtCreate is missing"), std::string::npos)
      << wrong.ToString();
}

// kernels/cublas's choice among cuBLASLt's candidates (rounds x candidates, milliseconds).
TEST(GemmTunePick, KeepsTheFirstPickUnlessAnotherBeatsItByTheMargin) {
  using cublas::PickFastest;
  EXPECT_EQ(PickFastest({}, 0.02), 0u);
  // 1% faster is within the margin: the heuristic's pick stays.
  EXPECT_EQ(PickFastest({{1.00f, 0.99f, 1.20f}}, 0.02), 0u);
  // 5% faster in its best round: taken; then the fastest of the rest without a margin.
  EXPECT_EQ(PickFastest({{1.00f, 0.95f, 0.96f}}, 0.02), 1u);
  EXPECT_EQ(PickFastest({{1.00f, 0.95f, 0.94f}}, 0.02), 2u);
}

TEST(GemmTunePick, EachCandidatesBestRoundCountsSoADriftingClockFavoursNone) {
  using cublas::PickFastest;
  // Round 1 ran while the clock ramped up (the first candidate looked slowest); the best rounds
  // show the first pick is fastest.
  EXPECT_EQ(
      PickFastest({{2.00f, 1.10f, 1.05f}, {1.00f, 1.04f, 1.03f}, {1.00f, 1.04f, 1.03f}}, 0.02), 0u);
}

TEST(GemmTunePick, AFailedCandidateIsNeverPicked) {
  using cublas::PickFastest;
  EXPECT_EQ(PickFastest({{1.00f, -1.0f}, {1.00f, -1.0f}}, 0.02), 0u);
  EXPECT_EQ(PickFastest({{-1.0f, 1.50f, 1.40f}}, 0.02), 2u);
  EXPECT_EQ(PickFastest({{-1.0f, -1.0f}}, 0.02), 0u);  // nothing timed: the heuristic's pick
}

}  // namespace
}  // namespace ptdp::runtime::cuda
