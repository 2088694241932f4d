// ProfileBackend: the measurements `ptdp profile` makes on one device, behind one interface so the
// sweep (profiler.h) is the same for the CPU (Eigen, reference kernels, host memory) and for CUDA
// (cuBLAS, CUDA kernels, device memory). Each timing is a median over repeats (timing.h).
//
// Backends are created through MakeBackend, the one registration point: the CUDA backend's source
// is compiled only when PTDP_WITH_CUDA is ON, and a build without it answers with a clear error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/hardware.h"
#include "core/status.h"
#include "core/units.h"
#include "profiler/timing.h"
#include "runtime/comm/communicator.h"

namespace ptdp::profiler {

// A Linear's op with the GeLU in its GEMM's epilogue (fused) and the same op without (plain).
struct EpilogueTimes {
  Seconds fused = 0, plain = 0;
};

class ProfileBackend {
 public:
  virtual ~ProfileBackend() = default;
  virtual std::string kind() const = 0;         // "cpu" | "cuda"
  virtual std::string device_name() const = 0;  // CPU model or GPU name, for sources
  virtual std::string gemm_dtype() const = 0;   // "fp32" (cpu) | "bf16" (cuda)
  virtual Precision precision() const = 0;      // the dtype its GEMMs and kernels run in
  // Memory one rank may use: device memory on a GPU; physical memory / ranks_per_node on a CPU.
  virtual Result<double> MemoryCapacityBytes(int ranks_per_node) = 0;
  // Bytes held by libraries and communicators (cuBLAS workspace, NCCL buffers); 0 on the CPU.
  virtual Result<double> WorkspaceBytes() = 0;
  // Seconds for C[m][n] = A[m][k] B[k][n] in gemm_dtype() with fp32 accumulation.
  virtual Result<double> TimeGemm(int64_t m, int64_t n, int64_t k, const TimingOptions& t) = 0;
  // Seconds of the backward GEMMs of that forward, m tokens, n output and k input features, as the
  // layers run them (Ops::LinearBackwardData: dx[m][k] = dy W; Ops::LinearBackwardWeight:
  // dW[n][k] += dy^T x into fp32). 0: this backend does not measure them.
  virtual Result<double> TimeGemmBackwardData(int64_t, int64_t, int64_t, const TimingOptions&) {
    return 0.0;
  }
  virtual Result<double> TimeGemmBackwardWeight(int64_t, int64_t, int64_t, const TimingOptions&) {
    return 0.0;
  }
  // Bytes per second of c[i] = a[i] + b[i] over three arrays of `bytes` each (3 `bytes` moved).
  virtual Result<double> StreamAddBandwidth(Bytes bytes, const TimingOptions& t) = 0;
  // Bytes per second of the GeLU forward kernel over `bytes` of input (read + write counted).
  virtual Result<double> GeluBandwidth(Bytes bytes, const TimingOptions& t) = 0;
  // Seconds of one causal attention forward, batch b, sequence s, `heads` heads of dim d, with
  // attention dropout of probability `dropout` drawn inside the op as training draws it (0: none).
  virtual Result<double> TimeAttention(int64_t b, int64_t s, int64_t heads, int64_t d,
                                       double dropout, const TimingOptions& t) = 0;
  // Seconds of that attention's backward (0: this backend does not measure it, or, with dropout,
  // its dropout attention ran another kernel than the one without, whose rate it would not be).
  virtual Result<double> TimeAttentionBackward(int64_t, int64_t, int64_t, int64_t, double,
                                               const TimingOptions&) {
    return 0.0;
  }
  // Seconds of the vocabulary-parallel cross-entropy over n rows of v logits, forward (row max,
  // sum of exponentials, loss) and backward together, as the runtime's Ops run it (0: this backend
  // does not measure it).
  virtual Result<double> TimeCrossEntropy(int64_t, int64_t, const TimingOptions&) { return 0.0; }
  // Seconds of the GeLU forward (y = GeLU(x)) or, with `backward`, of its backward (dx = dy
  // GeLU'(x)) over `count` elements, as the runtime's Ops run them (0: this backend does not time
  // them). The switch of memory_bound_GBps is per backend and follows it (report.cc): a backend
  // that answers (the cpu, whose GeLU the tanh bounds) gets memory_bound_GBps from the streaming
  // add and its GeLU priced by elements at these rates; one that does not (cuda, whose GeLU kernel
  // is byte-bound) keeps memory_bound_GBps from GeluBandwidth, so its profiles stay comparable.
  virtual Result<double> TimeGelu(int64_t, bool /*backward*/, const TimingOptions&) { return 0.0; }
  // Seconds of the whole optimizer step over `params` parameters in one tensor, as the runtime's
  // Ops run it per parameter (0: this backend does not time it). The cpu answers (CpuOps' sum of
  // squares for the gradient norm, then AdamW: bound by AdamW's square root and division, not by
  // its bytes), and its profile prices the step by parameters; cuda does not (its fused step is
  // byte-bound), so its step keeps its bytes at memory_bound_GBps and its profiles stay comparable.
  virtual Result<double> TimeOptimizerStep(int64_t, const TimingOptions&) { return 0.0; }
  // Seconds of a Linear's op at n tokens, c input and oc output features as the layers run it,
  // with the GeLU in its GEMM's epilogue and without: forward, LinearForward with its bias writing
  // the pre-activation and its GeLU (cuBLASLt GELU_AUX_BIAS) against the same LinearForward
  // without the GeLU output; backward, LinearBackwardDataGelu (the DGELU epilogue) against
  // LinearBackwardData. {0, 0}: this backend runs no GeLU epilogue (the cpu: CpuOps runs the GeLU
  // as a pass after its GEMM, timed by TimeGelu, and fuses no backward).
  virtual Result<EpilogueTimes> TimeGeluEpilogue(int64_t, int64_t, int64_t, bool /*backward*/,
                                                 const TimingOptions&) {
    return EpilogueTimes{};
  }
  // Seconds of a Linear's bias gradient, dbias[oc] (fp32) += the column sums of dout[n][oc], as
  // the runtime runs it (0: not timed: the cpu, whose bias sum runs inside its weight-gradient
  // GEMM's kernel, kernels::MatmulBackward, with no time of its own).
  virtual Result<double> TimeBiasGrad(int64_t, int64_t, const TimingOptions&) { return 0.0; }
  // Which attention implementation TimeAttention measured with that dropout, for the report.
  virtual std::string attention_kind(double dropout) const = 0;
  // Seconds of one tiny kernel (launch + completion, back to back), the fixed cost per op.
  virtual Result<double> KernelLaunchSeconds(const TimingOptions& t) = 0;

  // Buffers for collectives: host memory on the CPU, device memory on a GPU.
  virtual Result<void*> Alloc(Bytes bytes) = 0;
  virtual void Free(void* p) = 0;
  // Waits for every queued operation (device and communicator streams).
  virtual Status Synchronize() = 0;
  // The communicator that moves this backend's buffers over `world_ranks` (collective over them),
  // or nullptr when the host communicator does (the cpu backend).
  virtual Result<std::unique_ptr<runtime::Communicator>> MakeDataComm(
      const std::vector<int>& world_ranks) = 0;
};

// "cpu" or "cuda"; kInvalidArgument for another name, kNotFound when this build or machine has
// no such backend (no CUDA in the build, or no GPU), with a message saying which.
Result<std::unique_ptr<ProfileBackend>> MakeBackend(const std::string& kind);

// The two factories MakeBackend dispatches to (cuda_backend.cc or cuda_backend_none.cc).
std::unique_ptr<ProfileBackend> MakeCpuBackend();
Result<std::unique_ptr<ProfileBackend>> MakeCudaBackend();

}  // namespace ptdp::profiler
