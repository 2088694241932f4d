#include "runtime/backend/registry.h"

#include "runtime/backend/guard_device.h"
#if PTDP_HAVE_CUDA_BACKEND
#include "runtime/backend/cuda_backend.h"
#endif

namespace ptdp::runtime {

Result<std::unique_ptr<Device>> CreateDevice(const std::string& backend) {
  if (backend == "cpu") return std::unique_ptr<Device>(std::make_unique<CpuDevice>());
  if (backend == "cpu-guard") return std::unique_ptr<Device>(std::make_unique<GuardDevice>());
  if (backend == "cuda") {
#if PTDP_HAVE_CUDA_BACKEND
    return CreateCudaBackendDevice();
#else
    return Status::Invalid(
        "--backend: 'cuda' is not available in this build (configure with PTDP_WITH_CUDA and "
        "MPI; use cpu)");
#endif
  }
  return Status::Invalid("--backend: unknown backend '" + backend + "' (cpu, cuda)");
}

DType ComputeDType(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return DType::kFp32;
    case Precision::kBf16:
    case Precision::kFp8:  // bf16 outside the FP8 GEMMs; the trainer refuses fp8 plans (Setup)
      return DType::kBf16;
    case Precision::kFp16:
      return DType::kFp16;
  }
  return DType::kFp32;
}

}  // namespace ptdp::runtime
