// The profiler's own CUDA kernels: a bf16 streaming add in 16-byte packs (memory bandwidth), an
// empty kernel (launch cost) and a normal fill; the model's kernels come from kernels/cuda and
// runtime/cuda. Only profiler sources built with CUDA include this header.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ptdp::profiler {

// c[i] = a[i] + b[i].
cudaError_t LaunchStreamAdd(__nv_bfloat16* c, const __nv_bfloat16* a, const __nv_bfloat16* b,
                            int64_t count, cudaStream_t stream);
// An empty kernel of one block: the fixed cost of a launch.
cudaError_t LaunchEmpty(cudaStream_t stream);
// x[i] = scale * StandardNormal(key, i) (profiler/normal_fill.h): operands a training step's
// GEMMs would see, not constants (why: normal_fill.h).
cudaError_t LaunchFillNormal(__nv_bfloat16* x, float scale, uint64_t key, int64_t count,
                             cudaStream_t stream);

}  // namespace ptdp::profiler
