// The CUDA backend of `ptdp profile` (built only with PTDP_WITH_CUDA). It times what the CUDA
// runtime runs: bf16 GEMMs through the cuBLASLt wrapper (kernels/cublas LtGemm::LinearForward,
// fp32 accumulation, out = x W^T), the fused bias+GeLU of kernels/cuda and the causal attention
// forward and backward of CudaOps (cuDNN's fused SDPA for bf16), without and with attention
// dropout, and CudaOps' GeLU epilogues and bias gradient (profiler/epilogues.h); plus a bf16
// streaming add and an empty kernel (profiler/cuda_kernels.cu) for the memory bandwidth and the
// launch cost, and NCCL for the collectives. One GPU per rank: rank i on its node uses device i %
// count.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "kernels/cublas/gemm.h"
#include "kernels/cuda/ops.h"
#include "profiler/backend.h"
#include "profiler/cuda_kernels.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/group.h"
#include "runtime/cuda/nccl_communicator.h"
#include "runtime/cuda/ops_kernels.h"

namespace ptdp::profiler {
namespace {

constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

// Device memory freed with its owner.
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (p_ != nullptr) cudaFree(p_);
  }
  Status Allocate(size_t bytes) {
    PTDP_CUDA_RETURN(cudaMalloc(&p_, bytes));
    return Status::Ok();
  }
  __nv_bfloat16* bf16() const { return static_cast<__nv_bfloat16*>(p_); }
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

// Operand values (profiler/normal_fill.h says why not constants): activations and gradients
// standard normal, weights at the runtime's initialisation scale (GPT-2's 0.02,
// runtime/model/params.cc); a key per operand so that no two operands are the same tensor.
constexpr float kWeightStd = 0.02f;
constexpr uint64_t kKeyInput = 1, kKeyWeight = 2, kKeyGrad = 3, kKeyQkv = 4;
// The attention dropout's key (any fixed one: what the mask costs does not depend on it).
constexpr uint64_t kKeyDropout = 5;
constexpr uint64_t kKeyBias = 6;

// One attention problem (bf16 qkv, out, dout, dqkv; fp32 lse) run through CudaOps, with attention
// dropout `drop.p` (0: none) drawn inside the kernel as training draws it.
struct Attention {
  runtime::AttentionShape a;
  runtime::DropoutSpec drop;
  DeviceArray qkv, out, lse, dout, dqkv;

  static Result<std::unique_ptr<Attention>> Make(int64_t b, int64_t s, int64_t heads, int64_t d,
                                                 double dropout, cudaStream_t stream) {
    auto p = std::make_unique<Attention>();
    p->a.b = b, p->a.s = s, p->a.heads_local = heads, p->a.heads_total = heads, p->a.head_dim = d;
    p->drop = {dropout, dropout > 0 ? kKeyDropout : 0, 0};
    const int64_t rows = b * s, hd = heads * d;
    PTDP_RETURN_IF_ERROR(p->qkv.Allocate(size_t(rows * 3 * hd) * 2));
    PTDP_RETURN_IF_ERROR(p->dqkv.Allocate(size_t(rows * 3 * hd) * 2));
    PTDP_RETURN_IF_ERROR(p->out.Allocate(size_t(rows * hd) * 2));
    PTDP_RETURN_IF_ERROR(p->dout.Allocate(size_t(rows * hd) * 2));
    PTDP_RETURN_IF_ERROR(p->lse.Allocate(size_t(b * heads * s) * 4));
    PTDP_CUDA_RETURN(LaunchFillNormal(p->qkv.bf16(), 1.0f, kKeyQkv, rows * 3 * hd, stream));
    PTDP_CUDA_RETURN(LaunchFillNormal(p->dout.bf16(), 1.0f, kKeyGrad, rows * hd, stream));
    return p;
  }
  runtime::AttentionStash Stash() {
    runtime::AttentionStash st;
    st.lse = {lse.get(), DType::kFp32, a.b * a.heads_local * a.s};
    st.out = runtime::ConstRef(out.get(), DType::kBf16, a.b * a.s * a.heads_local * a.head_dim);
    st.dropout_key = drop.key;
    return st;
  }
  Status Forward(runtime::Ops* ops) {
    runtime::AttentionStash st = Stash();
    const int64_t n = a.b * a.s * a.heads_local * a.head_dim;
    return ops->AttentionForward({out.get(), DType::kBf16, n}, &st,
                                 runtime::ConstRef(qkv.get(), DType::kBf16, 3 * n), a, drop);
  }
  Status Backward(runtime::Ops* ops) {
    const int64_t n = a.b * a.s * a.heads_local * a.head_dim;
    return ops->AttentionBackward(
        {dqkv.get(), DType::kBf16, 3 * n}, runtime::ConstRef(dout.get(), DType::kBf16, n),
        runtime::ConstRef(qkv.get(), DType::kBf16, 3 * n), Stash(), a, drop.p);
  }
};

class CudaBackend final : public ProfileBackend {
 public:
  ~CudaBackend() override {
    ops_.reset();  // its stream-ordered frees, before the stream goes
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status Init() {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
      (void)cudaGetLastError();
      return Status::NotFound(std::string("--backend cuda: no usable CUDA device (") +
                              (err != cudaSuccess ? cudaGetErrorString(err) : "none visible") +
                              ")");
    }
    PTDP_ASSIGN_OR_RETURN(int local, runtime::cuda::LocalRankOnNode());
    device_ = local % count;
    PTDP_CUDA_RETURN(cudaSetDevice(device_));
    PTDP_CUDA_RETURN(cudaFree(nullptr));  // create the context
    cudaDeviceProp prop{};
    PTDP_CUDA_RETURN(cudaGetDeviceProperties(&prop, device_));
    name_ = prop.name;
    size_t free_before = 0, total = 0;
    PTDP_CUDA_RETURN(cudaMemGetInfo(&free_before, &total));
    total_bytes_ = static_cast<double>(total);
    PTDP_CUDA_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    PTDP_ASSIGN_OR_RETURN(lt_, cublas::LtGemm::Create(kCublasWorkspaceBytes));
    PTDP_ASSIGN_OR_RETURN(ops_, runtime::cuda::CudaOps::Create(stream_));
    // One small GEMM so that cuBLAS has loaded what it keeps on the device.
    PTDP_ASSIGN_OR_RETURN(Seconds unused, TimeGemm(256, 256, 256, TimingOptions{0, 1, 1}));
    (void)unused;
    size_t free_after = 0;
    PTDP_CUDA_RETURN(cudaMemGetInfo(&free_after, &total));
    workspace_bytes_ = free_before > free_after ? double(free_before - free_after) : 0.0;
    return Status::Ok();
  }

  std::string kind() const override { return "cuda"; }
  std::string device_name() const override { return name_; }
  std::string gemm_dtype() const override { return "bf16"; }
  Precision precision() const override { return Precision::kBf16; }
  Result<double> MemoryCapacityBytes(int) override { return total_bytes_; }
  Result<double> WorkspaceBytes() override { return workspace_bytes_; }

  Result<double> TimeGemm(int64_t m, int64_t n, int64_t k, const TimingOptions& t) override {
    DeviceArray x, w, out;
    PTDP_RETURN_IF_ERROR(x.Allocate(size_t(m) * k * 2));
    PTDP_RETURN_IF_ERROR(w.Allocate(size_t(n) * k * 2));
    PTDP_RETURN_IF_ERROR(out.Allocate(size_t(m) * n * 2));
    PTDP_CUDA_RETURN(LaunchFillNormal(x.bf16(), 1.0f, kKeyInput, m * k, stream_));
    PTDP_CUDA_RETURN(LaunchFillNormal(w.bf16(), kWeightStd, kKeyWeight, n * k, stream_));
    // out[m][n] = x[m][k] W[n][k]^T: the runtime's nn.Linear forward.
    return MedianSeconds(
        [&] {
          lt_->LinearForward<__nv_bfloat16>(out.bf16(), x.bf16(), w.bf16(), nullptr, m, k, n,
                                            stream_);
          return Status::Ok();
        },
        [&] { return Sync(); }, t);
  }

  // The backward GEMMs through CudaOps, as the layers run them: bf16 dy and W to bf16 dx; bf16 dy
  // and x accumulated into fp32 dW.
  Result<double> TimeGemmBackwardData(int64_t m, int64_t n, int64_t k,
                                      const TimingOptions& t) override {
    DeviceArray dy, w, dx;
    PTDP_RETURN_IF_ERROR(dy.Allocate(size_t(m) * n * 2));
    PTDP_RETURN_IF_ERROR(w.Allocate(size_t(n) * k * 2));
    PTDP_RETURN_IF_ERROR(dx.Allocate(size_t(m) * k * 2));
    PTDP_CUDA_RETURN(LaunchFillNormal(dy.bf16(), 1.0f, kKeyGrad, m * n, stream_));
    PTDP_CUDA_RETURN(LaunchFillNormal(w.bf16(), kWeightStd, kKeyWeight, n * k, stream_));
    return MedianSeconds(
        [&] {
          return ops_->LinearBackwardData({dx.bf16(), DType::kBf16, m * k},
                                          {dy.bf16(), DType::kBf16, m * n},
                                          {w.bf16(), DType::kBf16, n * k}, m, k, n);
        },
        [&] { return Sync(); }, t);
  }
  Result<double> TimeGemmBackwardWeight(int64_t m, int64_t n, int64_t k,
                                        const TimingOptions& t) override {
    DeviceArray dy, x, dw;
    PTDP_RETURN_IF_ERROR(dy.Allocate(size_t(m) * n * 2));
    PTDP_RETURN_IF_ERROR(x.Allocate(size_t(m) * k * 2));
    PTDP_RETURN_IF_ERROR(dw.Allocate(size_t(n) * k * 4));
    PTDP_CUDA_RETURN(LaunchFillNormal(dy.bf16(), 1.0f, kKeyGrad, m * n, stream_));
    PTDP_CUDA_RETURN(LaunchFillNormal(x.bf16(), 1.0f, kKeyInput, m * k, stream_));
    PTDP_CUDA_RETURN(cudaMemsetAsync(dw.get(), 0, size_t(n) * k * 4, stream_));
    return MedianSeconds(
        [&] {
          return ops_->LinearBackwardWeight({dw.get(), DType::kFp32, n * k}, {},
                                            {dy.bf16(), DType::kBf16, m * n},
                                            {x.bf16(), DType::kBf16, m * k}, m, k, n);
        },
        [&] { return Sync(); }, t);
  }

  // The GeLU epilogues through CudaOps, as the layers run them (bf16; CudaOps's own conditions
  // pick the epilogue, PTDP_GELU_EPILOGUE=0 the separate pass): forward, fc1's LinearForward with
  // its bias, writing the GeLU too and not; backward, fc2's LinearBackwardDataGelu and
  // LinearBackwardData. Each op is timed at the same shape on the same buffers.
  Result<EpilogueTimes> TimeGeluEpilogue(int64_t n, int64_t c, int64_t oc, bool backward,
                                         const TimingOptions& t) override {
    DeviceArray x, w, bias, out, gelu;  // backward: x is dout [n][oc], out dpre and gelu pre [n][c]
    const int64_t in = backward ? n * oc : n * c, outs = backward ? n * c : n * oc;
    PTDP_RETURN_IF_ERROR(x.Allocate(size_t(in) * 2));
    PTDP_RETURN_IF_ERROR(w.Allocate(size_t(oc) * c * 2));
    PTDP_RETURN_IF_ERROR(bias.Allocate(size_t(oc) * 2));
    PTDP_RETURN_IF_ERROR(out.Allocate(size_t(outs) * 2));
    PTDP_RETURN_IF_ERROR(gelu.Allocate(size_t(outs) * 2));
    PTDP_CUDA_RETURN(
        LaunchFillNormal(x.bf16(), 1.0f, backward ? kKeyGrad : kKeyInput, in, stream_));
    PTDP_CUDA_RETURN(LaunchFillNormal(w.bf16(), kWeightStd, kKeyWeight, oc * c, stream_));
    PTDP_CUDA_RETURN(LaunchFillNormal(bias.bf16(), kWeightStd, kKeyBias, oc, stream_));
    PTDP_CUDA_RETURN(LaunchFillNormal(gelu.bf16(), 1.0f, kKeyInput, outs, stream_));
    const runtime::ConstRef xr(x.get(), DType::kBf16, in), wr(w.get(), DType::kBf16, oc * c),
        br(bias.get(), DType::kBf16, oc), pre(gelu.get(), DType::kBf16, outs);
    const runtime::TensorRef outr{out.get(), DType::kBf16, outs},
        gelur{gelu.get(), DType::kBf16, outs};
    const auto op = [&](bool fused) -> Status {
      if (backward) {
        return fused ? ops_->LinearBackwardDataGelu(outr, xr, wr, pre, n, c, oc)
                     : ops_->LinearBackwardData(outr, xr, wr, n, c, oc);
      }
      return ops_->LinearForward(outr, fused ? gelur : runtime::TensorRef{}, xr, wr, br, n, c, oc);
    };
    EpilogueTimes times;
    PTDP_ASSIGN_OR_RETURN(times.fused,
                          MedianSeconds([&] { return op(true); }, [&] { return Sync(); }, t));
    PTDP_ASSIGN_OR_RETURN(times.plain,
                          MedianSeconds([&] { return op(false); }, [&] { return Sync(); }, t));
    return times;
  }

  // The bias gradient LinearBackwardWeight adds (runtime/cuda/bias_grad.cu), alone: bf16 dout
  // [n][oc] summed by column into an fp32 dbias.
  Result<double> TimeBiasGrad(int64_t n, int64_t oc, const TimingOptions& t) override {
    DeviceArray dout, dbias;
    PTDP_RETURN_IF_ERROR(dout.Allocate(size_t(n) * oc * 2));
    PTDP_RETURN_IF_ERROR(dbias.Allocate(size_t(oc) * 4));
    PTDP_CUDA_RETURN(LaunchFillNormal(dout.bf16(), 1.0f, kKeyGrad, n * oc, stream_));
    PTDP_CUDA_RETURN(cudaMemsetAsync(dbias.get(), 0, size_t(oc) * 4, stream_));
    return MedianSeconds(
        [&]() -> Status {
          PTDP_CUDA_RETURN(runtime::cuda::opk::BiasGradAccumulate(static_cast<float*>(dbias.get()),
                                                                  dout.bf16(), n, oc, stream_));
          return Status::Ok();
        },
        [&] { return Sync(); }, t);
  }

  Result<double> StreamAddBandwidth(Bytes bytes, const TimingOptions& t) override {
    const int64_t count = bytes / 2;
    DeviceArray a, b, c;
    PTDP_RETURN_IF_ERROR(a.Allocate(size_t(bytes)));
    PTDP_RETURN_IF_ERROR(b.Allocate(size_t(bytes)));
    PTDP_RETURN_IF_ERROR(c.Allocate(size_t(bytes)));
    PTDP_CUDA_RETURN(LaunchFillNormal(a.bf16(), 1.0f, kKeyInput, count, stream_));
    PTDP_CUDA_RETURN(LaunchFillNormal(b.bf16(), 1.0f, kKeyWeight, count, stream_));
    PTDP_ASSIGN_OR_RETURN(Seconds s, MedianSeconds(
                                         [&]() -> Status {
                                           PTDP_CUDA_RETURN(LaunchStreamAdd(
                                               c.bf16(), a.bf16(), b.bf16(), count, stream_));
                                           return Status::Ok();
                                         },
                                         [&] { return Sync(); }, t));
    return 3.0 * count * 2 / s;
  }

  Result<double> GeluBandwidth(Bytes bytes, const TimingOptions& t) override {
    // The GeLU kernel LinearForward's epilogue runs (runtime/cuda/ops_kernels.h: 16-byte packs).
    const int64_t cols = 4096;
    const int64_t rows = std::max<int64_t>(bytes / 2 / cols, 1);
    DeviceArray x, y;
    PTDP_RETURN_IF_ERROR(x.Allocate(size_t(rows * cols) * 2));
    PTDP_RETURN_IF_ERROR(y.Allocate(size_t(rows * cols) * 2));
    PTDP_CUDA_RETURN(LaunchFillNormal(x.bf16(), 1.0f, kKeyInput, rows * cols, stream_));
    PTDP_ASSIGN_OR_RETURN(Seconds s, MedianSeconds(
                                         [&]() -> Status {
                                           PTDP_CUDA_RETURN(runtime::cuda::opk::GeluForward(
                                               y.bf16(), x.bf16(), rows * cols, stream_));
                                           return Status::Ok();
                                         },
                                         [&] { return Sync(); }, t));
    return 2.0 * double(rows * cols) * 2 / s;
  }

  // The causal attention training runs, through CudaOps itself: bf16 on cuDNN's fused SDPA, or
  // kernels/cuda's kernel where the build has no cuDNN or cuDNN refuses the shape (CudaOps says
  // so on stderr, and attention_kind() names the path that ran); with `dropout`, the mask drawn
  // inside the kernel.
  Result<double> TimeAttention(int64_t b, int64_t s, int64_t heads, int64_t d, double dropout,
                               const TimingOptions& t) override {
    PTDP_ASSIGN_OR_RETURN(auto buf, Attention::Make(b, s, heads, d, dropout, stream_));
    // Once untimed: cuDNN builds its graphs (seconds) at the first call, and MedianSeconds sizes
    // its samples by its own first call.
    PTDP_RETURN_IF_ERROR(buf->Forward(ops_.get()));
    PTDP_RETURN_IF_ERROR(Sync());
    return MedianSeconds([&] { return buf->Forward(ops_.get()); }, [&] { return Sync(); }, t);
  }
  Result<double> TimeAttentionBackward(int64_t b, int64_t s, int64_t heads, int64_t d,
                                       double dropout, const TimingOptions& t) override {
    PTDP_ASSIGN_OR_RETURN(auto buf, Attention::Make(b, s, heads, d, dropout, stream_));
    PTDP_RETURN_IF_ERROR(buf->Forward(ops_.get()));  // the out and lse the backward reads
    PTDP_ASSIGN_OR_RETURN(Seconds sec, MedianSeconds([&] { return buf->Backward(ops_.get()); },
                                                     [&] { return Sync(); }, t));
    const bool cudnn = ops_->last_attention_used_cudnn();
    const std::string path =
        cudnn ? "cuDNN fused SDPA (flash attention, tensor cores) through CudaOps, bf16"
              : "kernels/cuda fused causal attention (online softmax) through CudaOps (cuDNN "
                "absent or refused), bf16";
    if (dropout == 0) {
      attention_kind_ = path + ", no dropout";
      no_dropout_cudnn_ = cudnn;
      return sec;
    }
    if (no_dropout_cudnn_.has_value() && cudnn != *no_dropout_cudnn_) {
      // Another kernel than the one without dropout: its rate says nothing of what dropout costs
      // that kernel, and the cost model would price cuDNN's attention with it.
      std::fprintf(stderr,
                   "ptdp profile: attention with dropout %g ran %s, without dropout %s (b=%lld "
                   "s=%lld heads=%lld d=%lld); attention_dropout_tflops not written\n",
                   dropout, cudnn ? "cuDNN" : "kernels/cuda", cudnn ? "kernels/cuda" : "cuDNN",
                   static_cast<long long>(b), static_cast<long long>(s),
                   static_cast<long long>(heads), static_cast<long long>(d));
      return 0.0;
    }
    char p[32];
    std::snprintf(p, sizeof(p), "%g", dropout);
    dropout_attention_kind_ = path + ", attention dropout " + p + " (mask drawn in the kernel)";
    return sec;
  }
  std::string attention_kind(double dropout) const override {
    return dropout > 0 ? dropout_attention_kind_ : attention_kind_;
  }

  Result<double> KernelLaunchSeconds(const TimingOptions& t) override {
    TimingOptions many = t;
    many.max_iters = 100000;
    return MedianSeconds(
        [&]() -> Status {
          PTDP_CUDA_RETURN(LaunchEmpty(stream_));
          return Status::Ok();
        },
        [&] { return Sync(); }, many);
  }

  Result<void*> Alloc(Bytes bytes) override {
    void* p = nullptr;
    PTDP_CUDA_RETURN(cudaMalloc(&p, size_t(std::max<Bytes>(bytes, 1))));
    PTDP_CUDA_RETURN(cudaMemset(p, 0, size_t(std::max<Bytes>(bytes, 1))));
    return p;
  }
  void Free(void* p) override {
    if (p != nullptr) cudaFree(p);
  }
  Status Synchronize() override {
    PTDP_CUDA_RETURN(cudaDeviceSynchronize());
    return Status::Ok();
  }
  Result<std::unique_ptr<runtime::Communicator>> MakeDataComm(
      const std::vector<int>& world_ranks) override {
    if (world_ranks.size() < 2) return std::unique_ptr<runtime::Communicator>();
    PTDP_ASSIGN_OR_RETURN(auto comm, runtime::cuda::NcclCommunicator::Create(world_ranks));
    comm->set_compute_stream(stream_);
    return std::unique_ptr<runtime::Communicator>(std::move(comm));
  }

 private:
  Status Sync() {
    PTDP_CUDA_RETURN(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  int device_ = 0;
  std::string name_;
  double total_bytes_ = 0;
  double workspace_bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cublas::LtGemm> lt_;
  std::unique_ptr<runtime::cuda::CudaOps> ops_;  // the attention, as training runs it
  std::string attention_kind_ = "not measured";
  std::string dropout_attention_kind_ = "not measured";
  std::optional<bool> no_dropout_cudnn_;  // the path the attention without dropout ran
};

}  // namespace

Result<std::unique_ptr<ProfileBackend>> MakeCudaBackend() {
  auto b = std::make_unique<CudaBackend>();
  PTDP_RETURN_IF_ERROR(b->Init());
  return std::unique_ptr<ProfileBackend>(std::move(b));
}

}  // namespace ptdp::profiler
