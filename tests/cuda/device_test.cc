// CachingAllocator and CudaDevice on a GPU (label gpu): every test GTEST_SKIP()s when no CUDA
// device is visible, so it reports SKIPPED. The host-only checks are in host_test.cc (label unit).
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/cuda/caching_allocator.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/staged_mpi_communicator.h"

namespace ptdp::runtime::cuda {
namespace {

#define PTDP_REQUIRE_GPU()                                                         \
  do {                                                                             \
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped"; \
  } while (0)

TEST(CachingAllocatorTest, ReusesFreedBlocksAndAccountsEveryByte) {
  PTDP_REQUIRE_GPU();
  CachingAllocator a;
  auto p = a.Allocate(1000, MemTag::kActivations);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto q = a.Allocate(3 << 20, MemTag::kWeights);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  const auto& s = a.stats();
  EXPECT_EQ(s.requested.current_total, 1000 + (3 << 20));
  EXPECT_EQ(s.requested.current[int(MemTag::kActivations)], 1000);
  EXPECT_EQ(s.reserved, 1024 + (4 << 20));
  EXPECT_EQ(s.cuda_malloc_calls, 2);
  a.Free(*p);
  EXPECT_EQ(s.requested.current_total, 3 << 20);
  EXPECT_EQ(s.requested.peak_total, 1000 + (3 << 20));
  auto r = a.Allocate(900, MemTag::kActivations);  // same 1 KiB class: reused
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, *p);
  EXPECT_EQ(s.cuda_malloc_calls, 2);
  EXPECT_EQ(s.cache_hits, 1);
  a.Free(*r);
  a.Free(*q);
  EXPECT_EQ(s.requested.current_total, 0);
  ASSERT_TRUE(a.ReleaseCached().ok());
  EXPECT_EQ(s.reserved, 0);
}

TEST(CachingAllocatorTest, LimitGivesDoesNotFit) {
  PTDP_REQUIRE_GPU();
  CachingAllocator a(/*limit_bytes=*/8 << 20);
  auto p = a.Allocate(6 << 20, MemTag::kWeights);
  ASSERT_TRUE(p.ok());
  auto q = a.Allocate(6 << 20, MemTag::kGrads);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), StatusCode::kDoesNotFit);
  EXPECT_NE(q.status().message().find("grads"), std::string::npos);
  a.Free(*p);
}

// The event timer measures device time on the stream; the device's Ops are CudaOps.
TEST(CudaDeviceTest, EventTimerAndOpsFill) {
  PTDP_REQUIRE_GPU();
  auto dev = CudaDevice::Create(0);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  EXPECT_STREQ((*dev)->ops()->name(), "cuda");
  ASSERT_TRUE((*dev)->StartTimer().ok());
  auto buf = Tensor::Make(dev->get(), 1 << 20, DType::kFp32, MemTag::kWorkspace);
  ASSERT_TRUE(buf.ok());
  const Status st = (*dev)->ops()->Fill(buf->ref(), 1.5);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto s = (*dev)->ElapsedSeconds();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_GE(*s, 0.0);
  EXPECT_TRUE((*dev)->Synchronize().ok());
  std::vector<float> host(1 << 20);
  (*dev)->Copy(host.data(), buf->data(), int64_t{4} << 20);
  for (float x : host) ASSERT_EQ(x, 1.5f);
}

// Alloc does not clear memory (the runtime fills what it needs); copies round-trip; tags count.
TEST(CudaDeviceTest, AllocCopyRoundTripAndTags) {
  PTDP_REQUIRE_GPU();
  auto dev = CudaDevice::Create(0);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  auto buf = Tensor::Make(dev->get(), 1000, DType::kFp32, MemTag::kOptimizer);
  ASSERT_TRUE(buf.ok()) << buf.status().ToString();
  std::vector<float> host(1000);
  for (int i = 0; i < 1000; ++i) host[i] = float(i);
  (*dev)->Copy(buf->data(), host.data(), 1000 * 4);
  std::vector<float> back(1000);
  (*dev)->Copy(back.data(), buf->data(), 1000 * 4);
  EXPECT_EQ(back, host);
  EXPECT_EQ((*dev)->stats().current[int(MemTag::kOptimizer)], 4000);
  EXPECT_EQ((*dev)->allocator_stats().requested.current_total, 4000);
  buf->Reset();
  EXPECT_EQ((*dev)->stats().current_total, 0);
  EXPECT_EQ((*dev)->stats().peak_total, 4000);
}

// Upload returns before the copy has run (no stream synchronisation) and the host buffer may be
// overwritten at once: each upload lands what the host held when it was called, in stream order
// with the kernels around it, and the staging buffers are given back as their copies complete.
TEST(CudaDeviceTest, UploadIsStreamOrderedAndCopiesTheHostDataAtOnce) {
  PTDP_REQUIRE_GPU();
  auto dev = CudaDevice::Create(0);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  constexpr int kCount = 1 << 20, kUploads = 6;
  std::vector<Tensor> dst;
  std::vector<int32_t> host(kCount);
  for (int u = 0; u < kUploads; ++u) {
    auto t = Tensor::Make(dev->get(), kCount, DType::kI32, MemTag::kActivations);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    // A fill queued before the upload must not overwrite it (stream order).
    ASSERT_TRUE((*dev)->ops()->Fill(t->ref(), -1.0).ok());
    for (int i = 0; i < kCount; ++i) host[i] = u * 7 + i % 1000;
    (*dev)->Upload(t->data(), host.data(), int64_t(kCount) * 4);
    std::fill(host.begin(), host.end(), 123456);  // reused at once
    dst.push_back(std::move(*t));
  }
  ASSERT_TRUE((*dev)->Synchronize().ok());
  std::vector<int32_t> back(kCount);
  for (int u = 0; u < kUploads; ++u) {
    (*dev)->Copy(back.data(), dst[u].data(), int64_t(kCount) * 4);
    for (int i = 0; i < kCount; i += 4099) ASSERT_EQ(back[i], u * 7 + i % 1000) << u << " " << i;
  }
  // Everything has completed: the next upload gives every earlier staging buffer back.
  (*dev)->Upload(dst[0].data(), host.data(), 4);
  EXPECT_LE((*dev)->uploads_in_flight(), 1u);
}

TEST(CudaDeviceTest, MissingDeviceIsNotFound) {
  auto dev = CudaDevice::Create(CudaDeviceCount() + 5);
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ptdp::runtime::cuda
