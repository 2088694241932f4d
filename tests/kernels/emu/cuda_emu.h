// A CPU emulation of the small part of CUDA our kernels use, so that the kernels' logic (indexing,
// tiling, barriers, shuffles, atomics, online softmax) is tested on machines without a GPU. Each
// block runs alone, its threads as std::threads: __syncthreads is a block barrier, a warp shuffle
// an exchange through a per-warp barrier, __shared__ arrays are function statics (blocks never
// overlap), device memory is host memory. Force-included (-include) before everything else in the
// emulation build; emu_transform.py rewrites kernel<<<grid, block, smem, stream>>>(args) launches
// into emu::Launch calls. Not a performance model, and not a substitute for running on a GPU:
// warp-synchronous assumptions, memory-model races and launch limits are not checked.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

using std::max;
using std::min;

namespace emu {

struct BlockState {
  explicit BlockState(unsigned threads) : block(threads) {
    const unsigned warps_n = (threads + 31) / 32;
    for (unsigned w = 0; w < warps_n; ++w) {
      warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, threads - w * 32)));
    }
    exchange.resize(warps_n * 32);
  }
  std::barrier<> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<float> exchange;
  unsigned char* shared_dynamic_ptr = nullptr;  // the launch's dynamic shared memory
};

inline thread_local BlockState* tl_block = nullptr;
inline thread_local unsigned tl_linear = 0;

inline void SyncThreads() {
  tl_block->block.arrive_and_wait();
}

inline float ShflXor(float v, int offset) {
  const unsigned warp = tl_linear / 32, lane = tl_linear % 32;
  auto& bar = *tl_block->warps[warp];
  float* x = tl_block->exchange.data() + warp * 32;
  x[lane] = v;
  bar.arrive_and_wait();
  const float r = x[lane ^ static_cast<unsigned>(offset)];
  bar.arrive_and_wait();
  return r;
}

inline void* DynamicShared() {
  return tl_block->shared_dynamic_ptr;
}

template <typename T>
T AtomicAdd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v);
}

}  // namespace emu

// Built-in variables, per emulated thread.
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

namespace emu {

// Runs body() as every thread of every block of the grid, one block at a time. One OS thread per
// thread of a block, reused for every block; a grid barrier separates consecutive blocks (so the
// function-static __shared__ arrays are never used by two blocks at once).
template <typename F>
void Launch(dim3 grid, dim3 block, size_t shared_bytes, F&& body) {
  const unsigned threads = block.x * block.y * block.z;
  const unsigned blocks = grid.x * grid.y * grid.z;
  std::vector<std::unique_ptr<BlockState>> states;
  for (unsigned b = 0; b < blocks; ++b) states.push_back(std::make_unique<BlockState>(threads));
  std::vector<unsigned char> shared(shared_bytes);
  std::barrier<> between_blocks(threads);
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (unsigned b = 0; b < blocks; ++b) {
        BlockState& state = *states[b];
        state.shared_dynamic_ptr = shared.data();
        tl_block = &state;
        tl_linear = t;
        threadIdx = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
        blockIdx = uint3{b % grid.x, (b / grid.x) % grid.y, b / (grid.x * grid.y)};
        blockDim = block;
        gridDim = grid;
        body();
        // An exited thread no longer takes part in the block's barriers (as on the GPU).
        state.warps[t / 32]->arrive_and_drop();
        state.block.arrive_and_drop();
        between_blocks.arrive_and_wait();
      }
    });
  }
  for (auto& th : pool) th.join();
}

template <typename T>
cudaError_t Malloc(T** p, size_t bytes) {
  *p = static_cast<T*>(std::malloc(bytes));
  return cudaSuccess;
}
inline cudaError_t Free(void* p) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t Memcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t Memset(void* d, int v, size_t n) {
  std::memset(d, v, n);
  return cudaSuccess;
}
inline cudaError_t MemsetAsync(void* d, int v, size_t n, cudaStream_t) {
  return Memset(d, v, n);
}
inline cudaError_t Success() {
  return cudaSuccess;
}
template <typename... A>
cudaError_t Ignore(A&&...) {
  return cudaSuccess;
}
inline cudaError_t DeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline const char* ErrorString(cudaError_t) {
  return "emulated CUDA error";
}

}  // namespace emu

inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}

#define cudaMalloc ::emu::Malloc
#define cudaFree ::emu::Free
#define cudaMemcpy ::emu::Memcpy
#define cudaMemset ::emu::Memset
#define cudaMemsetAsync ::emu::MemsetAsync
#define cudaDeviceSynchronize ::emu::Success
#define cudaGetLastError ::emu::Success
#define cudaFuncSetAttribute ::emu::Ignore
#define cudaGetDeviceCount ::emu::DeviceCount
#define cudaGetErrorString ::emu::ErrorString
#define __syncthreads ::emu::SyncThreads
#define __shfl_xor_sync(mask, v, o) ::emu::ShflXor((v), (o))
#define atomicAdd ::emu::AtomicAdd

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)
