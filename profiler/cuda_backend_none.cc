// Built when PTDP_WITH_CUDA is OFF: the CUDA backend is not in this build.
#include "profiler/backend.h"

namespace ptdp::profiler {

Result<std::unique_ptr<ProfileBackend>> MakeCudaBackend() {
  return Status::NotFound(
      "--backend cuda: this ptdp was built without CUDA (configure with -DPTDP_WITH_CUDA=ON)");
}

}  // namespace ptdp::profiler
