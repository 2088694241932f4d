// The CPU backend of `ptdp profile`: it times the reference kernels the CPU runtime runs
// (kernels/reference: Eigen fp32 GEMM through MatmulForward, GeLU, Add; causal attention through
// CpuOps' fused form; the optimizer step through CpuOps' SumSquaresMany and AdamWMany) on host
// memory.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/reference/ops.h"
#include "profiler/backend.h"
#include "runtime/backend/cpu_ops.h"

namespace ptdp::profiler {
namespace {

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(colon + 1);
        const auto first = name.find_first_not_of(" \t");
        return first == std::string::npos ? "unknown CPU" : name.substr(first);
      }
    }
  }
  return "unknown CPU";
}

Status NoSync() {
  return Status::Ok();
}

// Deterministic, non-trivial data (avoids denormals and all-zero shortcuts).
void FillPattern(std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f + 0.001f * static_cast<float>(i % 997);
}

// fp32 host vectors as the runtime's tensor views.
runtime::TensorRef Ref(std::vector<float>& v) {
  return {v.data(), DType::kFp32, int64_t(v.size())};
}
runtime::ConstRef Const(const std::vector<float>& v) {
  return {v.data(), DType::kFp32, int64_t(v.size())};
}

// Any fixed key: what the mask costs does not depend on which elements it drops.
constexpr uint64_t kAttentionDropoutKey = 5;

// One fp32 causal attention problem through CpuOps' fused form (AttentionStash::fused, the
// layouts' default), as training runs it: the forward writes the output and the softmax's
// log-sum-exp, the backward rebuilds the probabilities from it, and with dropout both regenerate
// the mask from the counter generator under the same key.
class CpuAttention {
 public:
  CpuAttention(int64_t b, int64_t s, int64_t heads, int64_t d, double dropout)
      : qkv_(b * s * heads * 3 * d),
        out_(b * s * heads * d),
        dout_(out_.size()),
        dqkv_(qkv_.size()),
        lse_(b * heads * s) {
    shape_.b = b, shape_.s = s, shape_.heads_local = heads, shape_.heads_total = heads;
    shape_.head_dim = d;
    drop_ = {dropout, dropout > 0 ? kAttentionDropoutKey : 0, 0};
    FillPattern(qkv_);
    FillPattern(dout_);
  }
  Status Forward() {
    runtime::AttentionStash st = Stash();
    return ops_.AttentionForward(Ref(out_), &st, Const(qkv_), shape_, drop_);
  }
  Status Backward() {
    return ops_.AttentionBackward(Ref(dqkv_), Const(dout_), Const(qkv_), Stash(), shape_, drop_.p);
  }

 private:
  runtime::AttentionStash Stash() {
    runtime::AttentionStash st;
    st.lse = Ref(lse_);
    st.dropout_key = drop_.key;
    st.out = Const(out_);
    return st;
  }

  runtime::CpuOps ops_;
  runtime::AttentionShape shape_;
  runtime::DropoutSpec drop_;
  std::vector<float> qkv_, out_, dout_, dqkv_, lse_;
};

class CpuBackend final : public ProfileBackend {
 public:
  CpuBackend() : model_(CpuModelName()) {}
  std::string kind() const override { return "cpu"; }
  std::string device_name() const override { return model_; }
  std::string gemm_dtype() const override { return "fp32"; }
  Precision precision() const override { return Precision::kFp32; }

  Result<double> MemoryCapacityBytes(int ranks_per_node) override {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0)
      return Status::Internal("cpu profile: sysconf cannot tell the memory size");
    return static_cast<double>(pages) * static_cast<double>(page) / std::max(ranks_per_node, 1);
  }
  Result<double> WorkspaceBytes() override { return 0.0; }

  Result<double> TimeGemm(int64_t m, int64_t n, int64_t k, const TimingOptions& t) override {
    // MatmulForward: out[m][n] = x[m][k] w[n][k]^T, the runtime's nn.Linear layout.
    std::vector<float> x(m * k), w(n * k), out(m * n);
    FillPattern(x);
    FillPattern(w);
    return MedianSeconds(
        [&] {
          kernels::MatmulForward<float>(out.data(), x.data(), w.data(), nullptr, m, k, n);
          return Status::Ok();
        },
        NoSync, t);
  }

  // The backward GEMMs as CpuOps runs them (kernels::MatmulBackward with only dx, or only dW).
  Result<double> TimeGemmBackwardData(int64_t m, int64_t n, int64_t k,
                                      const TimingOptions& t) override {
    std::vector<float> dy(m * n), w(n * k), dx(m * k);
    FillPattern(dy);
    FillPattern(w);
    return MedianSeconds(
        [&] {
          kernels::MatmulBackward<float>(dx.data(), nullptr, nullptr, dy.data(), nullptr, w.data(),
                                         m, k, n);
          return Status::Ok();
        },
        NoSync, t);
  }
  Result<double> TimeGemmBackwardWeight(int64_t m, int64_t n, int64_t k,
                                        const TimingOptions& t) override {
    std::vector<float> dy(m * n), x(m * k), dw(n * k);
    FillPattern(dy);
    FillPattern(x);
    return MedianSeconds(
        [&] {
          kernels::MatmulBackward<float>(nullptr, dw.data(), nullptr, dy.data(), x.data(), nullptr,
                                         m, k, n);
          return Status::Ok();
        },
        NoSync, t);
  }

  Result<double> StreamAddBandwidth(Bytes bytes, const TimingOptions& t) override {
    const int64_t count = bytes / 4;
    std::vector<float> a(count), b(count), c(count);
    FillPattern(a);
    FillPattern(b);
    PTDP_ASSIGN_OR_RETURN(Seconds s, MedianSeconds(
                                         [&] {
                                           kernels::Add<float>(c.data(), a.data(), b.data(), count);
                                           return Status::Ok();
                                         },
                                         NoSync, t));
    return 3.0 * count * 4 / s;
  }

  Result<double> GeluBandwidth(Bytes bytes, const TimingOptions& t) override {
    const int64_t count = bytes / 4;
    std::vector<float> x(count), y(count);
    FillPattern(x);
    PTDP_ASSIGN_OR_RETURN(Seconds s, MedianSeconds(
                                         [&] {
                                           kernels::GeluForward<float>(y.data(), x.data(), count);
                                           return Status::Ok();
                                         },
                                         NoSync, t));
    return 2.0 * count * 4 / s;
  }

  // CpuOps' GeLU: kernels::GeluForward on the fc1 output (LinearForward with a GeLU output), and
  // kernels::GeluBackward (CpuOps::GeluBackward; the CPU does not fuse it into fc2's GEMM).
  Result<double> TimeGelu(int64_t count, bool backward, const TimingOptions& t) override {
    std::vector<float> x(count), dy(count), out(count);
    FillPattern(x);
    FillPattern(dy);
    return MedianSeconds(
        [&] {
          if (backward) {
            kernels::GeluBackward<float>(out.data(), x.data(), dy.data(), count);
          } else {
            kernels::GeluForward<float>(out.data(), x.data(), count);
          }
          return Status::Ok();
        },
        NoSync, t);
  }

  // The CPU trainer's step per parameter (runtime/executor/optimizer_step.cc, fp32 without loss
  // scaling): SumSquaresMany over the gradients for the global norm, then AdamWMany (weight
  // decay on, as for the 2-D tensors that hold nearly every parameter), clipped: the update then
  // reads a scaled copy of the gradients, as in every step of bench/calibrate's runs (gradient
  // norms 1.7 to 3.9 against clip_grad 1).
  Result<double> TimeOptimizerStep(int64_t params, const TimingOptions& t) override {
    std::vector<float> weight(params), grad(params), m(params), v(params);
    FillPattern(weight);
    FillPattern(grad);
    FillPattern(m);
    FillPattern(v);
    double sum_squares = 0;
    const runtime::TensorRef acc{&sum_squares, DType::kFp64, 1};
    const runtime::ConstRef grads[] = {Const(grad)};
    const runtime::AdamWTensor tensor{
        Ref(weight), runtime::TensorRef{}, Const(grad), Ref(m), Ref(v), 0.1};
    runtime::AdamWHyper h;
    h.lr = 1e-4;
    h.grad_scale = 0.5;  // a clipping coefficient
    runtime::CpuOps ops;
    return MedianSeconds(
        [&]() -> Status {
          sum_squares = 0;
          PTDP_RETURN_IF_ERROR(ops.SumSquaresMany(acc, grads));
          return ops.AdamWMany({&tensor, 1}, h);
        },
        NoSync, t);
  }

  Result<double> TimeCrossEntropy(int64_t n, int64_t v, const TimingOptions& t) override {
    std::vector<float> logits(n * v), dlogits(n * v), row_max(n), row_sum(n), target_logit(n),
        loss(n), dloss(n, 1.0f / float(n));
    std::vector<int32_t> targets(n);
    FillPattern(logits);
    for (int64_t i = 0; i < n; ++i) targets[i] = int32_t((i * 7919) % v);
    return MedianSeconds(
        [&] {
          kernels::CrossEntropyLocalStats<float>(row_max.data(), row_sum.data(),
                                                 target_logit.data(), logits.data(), targets.data(),
                                                 n, v, 0, v);
          kernels::CrossEntropyLoss<float>(loss.data(), row_max.data(), row_sum.data(),
                                           target_logit.data(), n);
          kernels::CrossEntropyBackward<float>(dlogits.data(), logits.data(), row_max.data(),
                                               row_sum.data(), targets.data(), dloss.data(), n, v,
                                               0, v);
          return Status::Ok();
        },
        NoSync, t);
  }
  // Attention as CpuOps runs the fused form (CpuAttention above).
  Result<double> TimeAttention(int64_t b, int64_t s, int64_t heads, int64_t d, double dropout,
                               const TimingOptions& t) override {
    CpuAttention att(b, s, heads, d, dropout);
    return MedianSeconds([&] { return att.Forward(); }, NoSync, t);
  }
  Result<double> TimeAttentionBackward(int64_t b, int64_t s, int64_t heads, int64_t d,
                                       double dropout, const TimingOptions& t) override {
    CpuAttention att(b, s, heads, d, dropout);
    PTDP_RETURN_IF_ERROR(att.Forward());  // the log-sum-exp the backward reads
    return MedianSeconds([&] { return att.Backward(); }, NoSync, t);
  }
  std::string attention_kind(double dropout) const override {
    char p[32];
    std::snprintf(p, sizeof(p), "%g", dropout);
    return "reference causal attention as CpuOps' fused form (s x s probabilities as scratch, "
           "log-sum-exp kept; backward rebuilds them), fp32, " +
           (dropout > 0 ? "attention dropout " + std::string(p) +
                              " (mask regenerated from the counter generator, forward and backward)"
                        : std::string("no dropout"));
  }
  Result<double> KernelLaunchSeconds(const TimingOptions& t) override {
    float a = 1, b = 2, c = 0;
    TimingOptions tiny = t;
    tiny.max_iters = 100000;
    return MedianSeconds(
        [&] {
          kernels::Add<float>(&c, &a, &b, 1);
          return Status::Ok();
        },
        NoSync, tiny);
  }

  Result<void*> Alloc(Bytes bytes) override {
    void* p = std::calloc(static_cast<size_t>(std::max<Bytes>(bytes, 1)), 1);
    if (p == nullptr)
      return Status::DoesNotFit("cpu profile: cannot allocate " + std::to_string(bytes) + " bytes");
    return p;
  }
  void Free(void* p) override { std::free(p); }
  Status Synchronize() override { return Status::Ok(); }
  Result<std::unique_ptr<runtime::Communicator>> MakeDataComm(const std::vector<int>&) override {
    return std::unique_ptr<runtime::Communicator>();
  }

 private:
  std::string model_;
};

}  // namespace

std::unique_ptr<ProfileBackend> MakeCpuBackend() {
  return std::make_unique<CpuBackend>();
}

Result<std::unique_ptr<ProfileBackend>> MakeBackend(const std::string& kind) {
  if (kind == "cpu") return MakeCpuBackend();
  if (kind == "cuda") return MakeCudaBackend();
  return Status::Invalid("--backend: \"" + kind + "\" is not cpu or cuda");
}

}  // namespace ptdp::profiler
