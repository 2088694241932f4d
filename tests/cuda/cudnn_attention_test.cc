// CudaOps' bf16 attention on cuDNN's fused SDPA against kernels/cuda's attention (the reference
// path, itself checked against the CPU in ops_test.cc), label gpu: every test GTEST_SKIP()s when
// no CUDA device is visible, so it reports SKIPPED, never passed. On a GPU the cuDNN path must
// run: a build without cuDNN, or cuDNN refusing these shapes, fails here rather than passing on
// the fallback.
//
// Tolerances. Both paths read the same bf16 q, k, v, accumulate in fp32 and round the output once
// to bf16 (2^-9 relative each); cuDNN also rounds the probabilities to bf16 for the P V product
// on tensor cores, moving each output, a convex combination of v rows, by at most 2^-9 max|v|.
// So out: |c - r| <= 2^-7 |r| + 2^-7 max|v|. lse is fp32 on both (summation order and exp
// approximations only): 2^-10 (1 + |lse|). The gradients pass through more bf16 roundings of P
// and dS on tensor cores: 2^-6 of the element plus 2^-6 of the largest element of dq, dk or dv.
// With dropout (p > 0) the masks are cuDNN's own, so there is no reference to compare with;
// instead: the same key gives the same output bit for bit, another key another output, and the
// backward uses the forward's mask: out = A v is linear in v with A the dropped, rescaled
// probabilities, and dv = A^T dout, so <dout, out> = <dv, v>; another key's mask breaks it.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "runtime/backend/device.h"
#include "runtime/backend/half.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cudnn_attention.h"

namespace ptdp::runtime::cuda {
namespace {

struct Shape {
  int64_t b, s, h, d;
};

// One attention problem on the device: inputs, and the outputs of the last call.
struct Problem {
  AttentionShape a;
  Tensor qkv, out, lse, dout, dqkv;
};

class CudnnAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
    ASSERT_TRUE(CudnnAttentionBuilt()) << "this build has no cuDNN: the GPU test cannot pass";
    auto dev = CudaDevice::Create(0);
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    gpu_ = std::move(*dev);
    ops_ = dynamic_cast<CudaOps*>(gpu_->ops());
    ASSERT_NE(ops_, nullptr);
  }

  Tensor Alloc(int64_t n, DType t) {
    auto r = Tensor::Make(gpu_.get(), n, t, MemTag::kWorkspace);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : Tensor();
  }
  Tensor RandBf16(int64_t n) {
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> f(static_cast<size_t>(n));
    for (float& x : f) x = u(rng_);
    std::vector<uint16_t> bits(f.size());
    half::Narrow(bits.data(), f.data(), n, DType::kBf16);
    Tensor t = Alloc(n, DType::kBf16);
    gpu_->Copy(t.data(), bits.data(), t.bytes());
    return t;
  }
  std::vector<float> Get(const Tensor& t) {
    std::vector<char> bytes(static_cast<size_t>(t.bytes()));
    gpu_->Copy(bytes.data(), t.data(), t.bytes());
    std::vector<float> f(static_cast<size_t>(t.count()));
    half::Widen(f.data(), bytes.data(), t.count(), t.dtype());
    return f;
  }

  Problem Make(const Shape& sh) {
    Problem p;
    p.a.b = sh.b, p.a.s = sh.s, p.a.heads_local = sh.h, p.a.head_dim = sh.d;
    p.a.heads_total = sh.h;
    const int64_t rows = sh.b * sh.s, hd = sh.h * sh.d;
    p.qkv = RandBf16(rows * 3 * hd);
    p.dout = RandBf16(rows * hd);
    p.out = Alloc(rows * hd, DType::kBf16);
    p.dqkv = Alloc(rows * 3 * hd, DType::kBf16);
    p.lse = Alloc(sh.b * sh.h * sh.s, DType::kFp32);
    return p;
  }
  // Forward then backward on `path`; true when cuDNN ran both.
  bool Run(Problem& pr, AttentionPath path, double p, uint64_t key) {
    ops_->set_attention_path(path);
    AttentionStash st;
    st.lse = pr.lse.ref();
    st.out = pr.out.cref();
    st.dropout_key = key;
    Status s = ops_->AttentionForward(pr.out.ref(), &st, pr.qkv.cref(), pr.a, {p, key, 0});
    EXPECT_TRUE(s.ok()) << s.ToString();
    const bool fwd = ops_->last_attention_used_cudnn();
    s = ops_->AttentionBackward(pr.dqkv.ref(), pr.dout.cref(), pr.qkv.cref(), st, pr.a, p);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(gpu_->Synchronize().ok());
    return fwd && ops_->last_attention_used_cudnn();
  }

  std::unique_ptr<CudaDevice> gpu_;
  CudaOps* ops_ = nullptr;
  std::mt19937_64 rng_{2024};
};

double MaxAbs(const std::vector<float>& v, int64_t part = -1, int64_t d = 0) {
  double m = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (part < 0 || int64_t(i) / d % 3 == part) m = std::max(m, std::fabs(double(v[i])));
  }
  return m;
}

TEST_F(CudnnAttentionTest, MatchesReferenceWithoutDropout) {
  for (const Shape& sh : {Shape{2, 128, 2, 64}, Shape{1, 512, 3, 128}, Shape{1, 1024, 2, 64},
                          Shape{2, 256, 2, 128}}) {
    SCOPED_TRACE("b=" + std::to_string(sh.b) + " s=" + std::to_string(sh.s) +
                 " heads=" + std::to_string(sh.h) + " D=" + std::to_string(sh.d));
    Problem pr = Make(sh);
    Run(pr, AttentionPath::kReference, 0, 0);
    const std::vector<float> out_r = Get(pr.out), lse_r = Get(pr.lse), dqkv_r = Get(pr.dqkv);
    ASSERT_TRUE(Run(pr, AttentionPath::kCudnn, 0, 0)) << "cuDNN did not run (see stderr)";
    const std::vector<float> out_c = Get(pr.out), lse_c = Get(pr.lse), dqkv_c = Get(pr.dqkv);
    const double vmax = MaxAbs(Get(pr.qkv), 2, sh.d);
    for (size_t i = 0; i < out_r.size(); ++i) {
      ASSERT_NEAR(out_c[i], out_r[i], 0x1p-7 * (std::fabs(out_r[i]) + vmax)) << "out " << i;
    }
    for (size_t i = 0; i < lse_r.size(); ++i) {
      ASSERT_NEAR(lse_c[i], lse_r[i], 0x1p-10 * (1 + std::fabs(lse_r[i]))) << "lse " << i;
    }
    const double gmax[3] = {MaxAbs(dqkv_r, 0, sh.d), MaxAbs(dqkv_r, 1, sh.d),
                            MaxAbs(dqkv_r, 2, sh.d)};
    for (size_t i = 0; i < dqkv_r.size(); ++i) {
      const int64_t part = int64_t(i) / sh.d % 3;  // 0 dq, 1 dk, 2 dv
      ASSERT_NEAR(dqkv_c[i], dqkv_r[i], 0x1p-6 * (std::fabs(dqkv_r[i]) + gmax[part]))
          << "dqkv element " << i << " (part " << part << ")";
    }
  }
}

// Per (sequence, head): <dout, out> - <dv, v>, and the scale its rounding errors are measured
// against (the root sum of squares of the terms of <dout, out>).
struct Gap {
  double gap, scale;
};
std::vector<Gap> Adjoint(const std::vector<float>& dout, const std::vector<float>& out,
                         const std::vector<float>& dqkv, const std::vector<float>& qkv,
                         const AttentionShape& a) {
  const int64_t h = a.heads_local, d = a.head_dim;
  std::vector<Gap> g(static_cast<size_t>(a.b * h), Gap{0, 0});
  for (int64_t row = 0; row < a.b * a.s; ++row) {
    for (int64_t hh = 0; hh < h; ++hh) {
      Gap& x = g[static_cast<size_t>(row / a.s * h + hh)];
      for (int64_t e = 0; e < d; ++e) {
        const size_t o = static_cast<size_t>((row * h + hh) * d + e);
        const size_t v = static_cast<size_t>(((row * h + hh) * 3 + 2) * d + e);
        const double t = double(dout[o]) * out[o];
        x.gap += t - double(dqkv[v]) * qkv[v];
        x.scale += t * t;
      }
    }
  }
  for (Gap& x : g) x.scale = std::sqrt(x.scale);
  return g;
}

TEST_F(CudnnAttentionTest, DropoutIsDeterministicAndForwardMatchesBackward) {
  const double p = 0.1;
  Problem pr = Make(Shape{2, 256, 2, 64});
  ASSERT_TRUE(Run(pr, AttentionPath::kCudnn, p, 77)) << "cuDNN did not run (see stderr)";
  const std::vector<float> out1 = Get(pr.out), dqkv1 = Get(pr.dqkv);
  ASSERT_TRUE(Run(pr, AttentionPath::kCudnn, p, 77));
  EXPECT_EQ(Get(pr.out), out1) << "same key, different output";
  const std::vector<float> dout = Get(pr.dout), qkv = Get(pr.qkv);
  // Rounding moves the two inner products by a few bf16 units of the terms' root sum of squares;
  // another mask moves them by about half that root sum itself, at random.
  for (const Gap& x : Adjoint(dout, out1, dqkv1, qkv, pr.a)) {
    EXPECT_LE(std::fabs(x.gap), 0x1p-5 * x.scale) << "the backward did not use the forward's mask";
  }
  ASSERT_TRUE(Run(pr, AttentionPath::kCudnn, p, 78));
  EXPECT_NE(Get(pr.out), out1) << "another key, the same output";
  // The forward of key 78 against the backward of key 77 must break the identity somewhere.
  double worst = 0;
  for (const Gap& x : Adjoint(dout, Get(pr.out), dqkv1, qkv, pr.a)) {
    worst = std::max(worst, std::fabs(x.gap) / x.scale);
  }
  EXPECT_GT(worst, 0x1p-5) << "the adjoint check cannot tell two masks apart";
}

// cuDNN takes the profile's shape (b=4 s=2048 heads=16 D=128); both rates are printed for the
// log (a figure, not a test: speed lives in `ptdp profile` and bench/gpu, never in a timed test).
TEST_F(CudnnAttentionTest, RunsAtTheProfileShape) {
  Problem pr = Make(Shape{4, 2048, 16, 128});
  auto time = [&](AttentionPath path) {
    Run(pr, path, 0, 0);  // builds cuDNN's graphs, warms up
    const auto t0 = std::chrono::steady_clock::now();
    const int iters = 5;
    for (int i = 0; i < iters; ++i) Run(pr, path, 0, 0);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  };
  const double ref = time(AttentionPath::kReference), cudnn = time(AttentionPath::kCudnn);
  ASSERT_TRUE(ops_->last_attention_used_cudnn());
  // Forward + backward: 7 GEMMs of 2 b s^2 heads D FLOPs, half of each (causal).
  const double flops = 7.0 * 4 * 2048.0 * 2048 * 16 * 128;
  std::printf(
      "attention fwd+bwd b=4 s=2048 heads=16 D=128: kernels/cuda %.2f ms (%.1f TFLOP/s), "
      "cuDNN %.2f ms (%.1f TFLOP/s)\n",
      ref * 1e3, flops / ref / 1e12, cudnn * 1e3, flops / cudnn / 1e12);
}

}  // namespace
}  // namespace ptdp::runtime::cuda
