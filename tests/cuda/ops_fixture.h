// The fixture of the CudaOps tests (ops_test.cc, ops_moe_test.cc): CudaOps against CpuOps on the
// same inputs, in fp32 and bf16 (the suite is instantiated once, in ops_test.cc).
//
// Tolerance (Tol): both backends read the same 16-bit inputs, compute in fp32 and round each
// output once, so they differ by the fp32 summation order (at most ~k * 2^-24 of the sum of |terms|
// for a length-k reduction, bounded here by k * 2^-23 * max|output|) plus, in bf16, one flipped
// rounding of the output (2^-8 relative: the unit roundoff 2^-9, twice). Attention also rounds its
// probabilities in the kernel (a second 2^-8 term).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend/cpu_ops.h"
#include "runtime/backend/device.h"
#include "runtime/backend/half.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_ops.h"

namespace ptdp::runtime::cuda {

#define PTDP_REQUIRE_GPU()                                                         \
  do {                                                                             \
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped"; \
  } while (0)

// One tensor on each backend holding the same values.
struct Pair {
  Tensor c, g;
};

class CudaOpsTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
    auto dev = CudaDevice::Create(0);
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    gpu_ = std::move(*dev);
  }
  DType act() const { return GetParam(); }
  void LayerNormCase(int64_t c);  // forward and backward against CpuOps at width c

  Pair Make(int64_t n, DType t) {
    Pair p;
    auto c = Tensor::Make(&cpu_, n, t, MemTag::kWorkspace);
    auto g = Tensor::Make(gpu_.get(), n, t, MemTag::kWorkspace);
    EXPECT_TRUE(c.ok() && g.ok());
    if (c.ok()) p.c = std::move(*c);
    if (g.ok()) p.g = std::move(*g);
    return p;
  }
  // Values on both sides (rounded once to t on the host).
  Pair Put(const std::vector<double>& v, DType t) {
    Pair p = Make(int64_t(v.size()), t);
    std::vector<char> bytes(v.size() * size_t(DTypeBytes(t)));
    if (t == DType::kFp64) {
      std::memcpy(bytes.data(), v.data(), bytes.size());
    } else if (t == DType::kI32) {
      for (size_t i = 0; i < v.size(); ++i) reinterpret_cast<int32_t*>(bytes.data())[i] = int(v[i]);
    } else if (t == DType::kU8) {
      for (size_t i = 0; i < v.size(); ++i) bytes[i] = static_cast<char>(v[i]);
    } else {
      std::vector<float> f(v.begin(), v.end());
      if (t == DType::kFp32)
        std::memcpy(bytes.data(), f.data(), bytes.size());
      else
        half::Narrow(bytes.data(), f.data(), int64_t(f.size()), t);
    }
    cpu_.Copy(p.c.data(), bytes.data(), Bytes(bytes.size()));
    gpu_->Copy(p.g.data(), bytes.data(), Bytes(bytes.size()));
    return p;
  }
  Pair Rand(int64_t n, DType t, double lo = -1, double hi = 1) {
    std::uniform_real_distribution<double> u(lo, hi);
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = u(rng_);
    return Put(v, t);
  }
  Pair Zeros(int64_t n, DType t) { return Put(std::vector<double>(size_t(n), 0.0), t); }
  std::vector<double> Get(Device* dev, const Tensor& t) {
    std::vector<char> bytes(size_t(t.bytes()));
    dev->Copy(bytes.data(), t.data(), t.bytes());
    std::vector<double> v(size_t(t.count()));
    const DType d = t.dtype();
    for (size_t i = 0; i < v.size(); ++i) {
      if (d == DType::kFp64)
        v[i] = reinterpret_cast<double*>(bytes.data())[i];
      else if (d == DType::kI32)
        v[i] = reinterpret_cast<int32_t*>(bytes.data())[i];
      else if (d == DType::kU8)
        v[i] = static_cast<uint8_t>(bytes[i]);
    }
    if (d == DType::kFp32 || d == DType::kBf16 || d == DType::kFp16) {
      std::vector<float> f(v.size());
      half::Widen(f.data(), bytes.data(), int64_t(f.size()), d);
      for (size_t i = 0; i < v.size(); ++i) v[i] = f[i];
    }
    return v;
  }
  // Runs f(ops, pick) on both backends; pick(Pair&) gives that backend's tensor.
  template <typename F>
  void Run(F&& f) {
    const Status a = f(static_cast<Ops*>(&cpu_ops_), [](Pair& p) -> Tensor& { return p.c; });
    ASSERT_TRUE(a.ok()) << "cpu: " << a.ToString();
    const Status b = f(gpu_->ops(), [](Pair& p) -> Tensor& { return p.g; });
    ASSERT_TRUE(b.ok()) << "cuda: " << b.ToString();
    ASSERT_TRUE(gpu_->Synchronize().ok());
  }
  // |gpu - cpu| <= Tol (see the file comment); k is the longest reduction behind an element.
  // `abs` adds an absolute term where the GPU rounds an intermediate the CPU keeps in fp32 (the
  // call sites say which and derive it).
  void Expect(const Pair& p, int64_t k, const char* what, double extra_rel = 0, double abs = 0) {
    const std::vector<double> c = Get(&cpu_, p.c), g = Get(gpu_.get(), p.g);
    double amax = 1e-30;
    for (double x : c) amax = std::max(amax, std::fabs(x));
    const bool narrow = p.c.dtype() == DType::kBf16 || p.c.dtype() == DType::kFp16;
    const double rel = (narrow ? 2.0 / 256 : 0.0) + extra_rel;
    for (size_t i = 0; i < c.size(); ++i) {
      const double tol =
          rel * std::fabs(c[i]) + (double(k) * 0x1p-23 + rel * 0.01) * amax + abs + 1e-30;
      ASSERT_NEAR(g[i], c[i], tol) << what << " element " << i << " of " << c.size();
    }
  }
  bool bf16() const { return act() == DType::kBf16; }
  double MaxAbs(const Pair& p) {
    double m = 0;
    for (double x : Get(&cpu_, p.c)) m = std::max(m, std::fabs(x));
    return m;
  }
  void ExpectEqual(const Pair& p, const char* what) {
    EXPECT_EQ(Get(&cpu_, p.c), Get(gpu_.get(), p.g)) << what;
  }

  CpuDevice cpu_;
  CpuOps cpu_ops_;
  std::unique_ptr<CudaDevice> gpu_;
  std::mt19937_64 rng_{12345};
};

}  // namespace ptdp::runtime::cuda
