// The CUDA backend of `ptdp profile` (built only with PTDP_WITH_CUDA): bf16 GEMMs through cuBLAS
// with fp32 accumulation in the nn.Linear layout the runtime uses (out = x W^T, a "TN" GEMM),
// bf16 streaming and GeLU kernels, attention's two batched GEMMs, an empty kernel for the launch
// cost, and NCCL for the collectives. One GPU per rank: rank i on its node uses device i % count.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "profiler/backend.h"
#include "profiler/cuda_kernels.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/group.h"
#include "runtime/cuda/nccl_communicator.h"

#define PTDP_CUBLAS_RETURN(expr)                                                                   \
  do {                                                                                             \
    const cublasStatus_t _ptdp_st = (expr);                                                        \
    if (_ptdp_st != CUBLAS_STATUS_SUCCESS) {                                                       \
      return Status::Internal(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": rank " + \
                              std::to_string(runtime::cuda::WorldRankForMessages()) +              \
                              ": " #expr " failed: " + cublasGetStatusName(_ptdp_st) + " (" +      \
                              cublasGetStatusString(_ptdp_st) + ")");                              \
    }                                                                                              \
  } while (0)

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

class CudaBackend final : public ProfileBackend {
 public:
  ~CudaBackend() override {
    if (handle_ != nullptr) cublasDestroy(handle_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status Init() {
    int count = 0;
    PTDP_CUDA_RETURN(cudaGetDeviceCount(&count));
    if (count == 0) return Status::NotFound("--backend cuda: no CUDA device is visible");
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
    PTDP_CUBLAS_RETURN(cublasCreate(&handle_));
    PTDP_CUBLAS_RETURN(cublasSetStream(handle_, stream_));
    PTDP_RETURN_IF_ERROR(workspace_.Allocate(kCublasWorkspaceBytes));
    PTDP_CUBLAS_RETURN(cublasSetWorkspace(handle_, workspace_.get(), kCublasWorkspaceBytes));
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
  TrainingPrecision precision() const override { return TrainingPrecision::kMixed; }
  Result<double> MemoryCapacityBytes(int) override { return total_bytes_; }
  Result<double> WorkspaceBytes() override { return workspace_bytes_; }

  // out[m][n] = x[m][k] W[n][k]^T, row-major; in column-major terms out^T = W x^T: op(W) = T.
  Status Gemm(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t m,
              int64_t n, int64_t k) {
    const float alpha = 1.0f, beta = 0.0f;
    PTDP_CUBLAS_RETURN(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k),
                                    &alpha, w, CUDA_R_16BF, int(k), x, CUDA_R_16BF, int(k), &beta,
                                    out, CUDA_R_16BF, int(n), CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
    return Status::Ok();
  }

  Result<double> TimeGemm(int64_t m, int64_t n, int64_t k, const TimingOptions& t) override {
    DeviceArray x, w, out;
    PTDP_RETURN_IF_ERROR(x.Allocate(size_t(m) * k * 2));
    PTDP_RETURN_IF_ERROR(w.Allocate(size_t(n) * k * 2));
    PTDP_RETURN_IF_ERROR(out.Allocate(size_t(m) * n * 2));
    PTDP_CUDA_RETURN(LaunchFill(x.bf16(), 0.5f, m * k, stream_));
    PTDP_CUDA_RETURN(LaunchFill(w.bf16(), 0.25f, n * k, stream_));
    return MedianSeconds([&] { return Gemm(out.bf16(), x.bf16(), w.bf16(), m, n, k); },
                         [&] { return Sync(); }, t);
  }

  Result<double> StreamAddBandwidth(Bytes bytes, const TimingOptions& t) override {
    const int64_t count = bytes / 2;
    DeviceArray a, b, c;
    PTDP_RETURN_IF_ERROR(a.Allocate(size_t(bytes)));
    PTDP_RETURN_IF_ERROR(b.Allocate(size_t(bytes)));
    PTDP_RETURN_IF_ERROR(c.Allocate(size_t(bytes)));
    PTDP_CUDA_RETURN(LaunchFill(a.bf16(), 1.0f, count, stream_));
    PTDP_CUDA_RETURN(LaunchFill(b.bf16(), 2.0f, count, stream_));
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
    const int64_t count = bytes / 2;
    DeviceArray x, y;
    PTDP_RETURN_IF_ERROR(x.Allocate(size_t(bytes)));
    PTDP_RETURN_IF_ERROR(y.Allocate(size_t(bytes)));
    PTDP_CUDA_RETURN(LaunchFill(x.bf16(), 0.5f, count, stream_));
    PTDP_ASSIGN_OR_RETURN(Seconds s,
                          MedianSeconds(
                              [&]() -> Status {
                                PTDP_CUDA_RETURN(LaunchGelu(y.bf16(), x.bf16(), count, stream_));
                                return Status::Ok();
                              },
                              [&] { return Sync(); }, t));
    return 2.0 * count * 2 / s;
  }

  // The two batched GEMMs of attention per (batch, head): S = Q K^T [s][s] and O = P V [s][d].
  Result<double> TimeAttention(int64_t b, int64_t s, int64_t heads, int64_t d,
                               const TimingOptions& t) override {
    const int64_t batch = b * heads;
    DeviceArray q, kk, v, p, o;
    PTDP_RETURN_IF_ERROR(q.Allocate(size_t(batch) * s * d * 2));
    PTDP_RETURN_IF_ERROR(kk.Allocate(size_t(batch) * s * d * 2));
    PTDP_RETURN_IF_ERROR(v.Allocate(size_t(batch) * s * d * 2));
    PTDP_RETURN_IF_ERROR(p.Allocate(size_t(batch) * s * s * 2));
    PTDP_RETURN_IF_ERROR(o.Allocate(size_t(batch) * s * d * 2));
    PTDP_CUDA_RETURN(LaunchFill(q.bf16(), 0.01f, batch * s * d, stream_));
    PTDP_CUDA_RETURN(LaunchFill(kk.bf16(), 0.01f, batch * s * d, stream_));
    PTDP_CUDA_RETURN(LaunchFill(v.bf16(), 0.01f, batch * s * d, stream_));
    const float alpha = 1.0f, beta = 0.0f;
    auto op = [&]() -> Status {
      // S^T (col-major s x s) = K Q^T: op(K) = T over K's col-major d x s view.
      PTDP_CUBLAS_RETURN(cublasGemmStridedBatchedEx(
          handle_, CUBLAS_OP_T, CUBLAS_OP_N, int(s), int(s), int(d), &alpha, kk.get(), CUDA_R_16BF,
          int(d), s * d, q.get(), CUDA_R_16BF, int(d), s * d, &beta, p.get(), CUDA_R_16BF, int(s),
          s * s, int(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      // O^T (col-major d x s) = V^T P^T.
      PTDP_CUBLAS_RETURN(cublasGemmStridedBatchedEx(
          handle_, CUBLAS_OP_N, CUBLAS_OP_N, int(d), int(s), int(s), &alpha, v.get(), CUDA_R_16BF,
          int(d), s * d, p.get(), CUDA_R_16BF, int(s), s * s, &beta, o.get(), CUDA_R_16BF, int(d),
          s * d, int(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return Status::Ok();
    };
    return MedianSeconds(
        op, [&] { return Sync(); }, t);
  }
  std::string attention_kind() const override {
    return "the two attention GEMMs (Q K^T and P V, strided-batched cuBLAS bf16, full s x s, no "
           "softmax): not the fused kernel";
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
  cublasHandle_t handle_ = nullptr;
  DeviceArray workspace_;
};

}  // namespace

Result<std::unique_ptr<ProfileBackend>> MakeCudaBackend() {
  auto b = std::make_unique<CudaBackend>();
  PTDP_RETURN_IF_ERROR(b->Init());
  return std::unique_ptr<ProfileBackend>(std::move(b));
}

}  // namespace ptdp::profiler
