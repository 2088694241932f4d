// A CPU emulation of the small part of CUDA our kernels use, so that the kernels' logic (indexing,
// tiling, barriers, shuffles, atomics, online softmax) is tested on machines without a GPU. Each
// block runs alone, its threads as fibers: __syncthreads is a block barrier, a warp shuffle
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
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

using std::max;
using std::min;

namespace emu {

// The emulated threads of a block are fibers (ucontext) on the calling OS thread, run round-robin:
// a fiber runs until it waits at a barrier or ends. One OS thread per emulated thread, as this
// emulation began, spent most of its time in the kernel (futex wake-ups and context switches at
// every barrier of 128 to 1024 threads on two cores: 38 s of system time against 13 s of user time
// for the whole suite, measured 2026-11-30).
class Barrier {
 public:
  explicit Barrier(unsigned expected) : expected_(expected) {}
  void ArriveAndWait();
  // An exited thread no longer takes part in the block's barriers (as on the GPU).
  void ArriveAndDrop() {
    --expected_;
    if (expected_ > 0 && arrived_ == expected_) Release();
  }

 private:
  void Release() {
    arrived_ = 0;
    ++generation_;
  }
  unsigned expected_, arrived_ = 0, generation_ = 0;
};

struct BlockState {
  explicit BlockState(unsigned threads) : block(threads) {
    const unsigned warps_n = (threads + 31) / 32;
    for (unsigned w = 0; w < warps_n; ++w) warps.emplace_back(std::min(32u, threads - w * 32));
    exchange.resize(warps_n * 32);
  }
  Barrier block;
  std::vector<Barrier> warps;
  std::vector<float> exchange;
  unsigned char* shared_dynamic_ptr = nullptr;  // the launch's dynamic shared memory
};

// The running fiber's block and linear thread index; set by the scheduler at every switch.
inline BlockState* tl_block = nullptr;
inline unsigned tl_linear = 0;

// The scheduler's side: the context it runs in and the running fiber's.
inline ucontext_t* scheduler_context = nullptr;
inline ucontext_t* running_context = nullptr;

// Back to the scheduler, which resumes this fiber after every other runnable one has had a turn.
inline void Yield() {
  swapcontext(running_context, scheduler_context);
}

inline void Barrier::ArriveAndWait() {
  const unsigned phase = generation_;
  if (++arrived_ == expected_) {
    Release();
    return;
  }
  while (generation_ == phase) Yield();
}

inline void SyncThreads() {
  tl_block->block.ArriveAndWait();
}

inline float ShflXor(float v, int offset) {
  const unsigned warp = tl_linear / 32, lane = tl_linear % 32;
  Barrier& bar = tl_block->warps[warp];
  float* x = tl_block->exchange.data() + warp * 32;
  x[lane] = v;
  bar.ArriveAndWait();
  const float r = x[lane ^ static_cast<unsigned>(offset)];
  bar.ArriveAndWait();
  return r;
}

inline void* DynamicShared() {
  return tl_block->shared_dynamic_ptr;
}

template <typename T>
T AtomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}

}  // namespace emu

// Built-in variables of the running fiber (set by the scheduler at every switch).
inline uint3 threadIdx;
inline uint3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;

namespace emu {

// What a fiber runs: the launch's body, then it leaves its block's barriers.
struct FiberJob {
  const std::function<void()>* body = nullptr;
  bool done = false;
};
inline FiberJob* running_job = nullptr;

inline void FiberMain() {
  FiberJob& job = *running_job;
  (*job.body)();
  tl_block->warps[tl_linear / 32].ArriveAndDrop();
  tl_block->block.ArriveAndDrop();
  job.done = true;
}  // returns to the scheduler through uc_link

// A fiber that runs FiberMain on `stack` and returns to `link`; apart from Launch so that its
// getcontext (which returns twice) leaves Launch's variables alone.
inline void MakeFiber(ucontext_t* fiber, char* stack, size_t stack_bytes, ucontext_t* link) {
  getcontext(fiber);
  fiber->uc_stack.ss_sp = stack;
  fiber->uc_stack.ss_size = stack_bytes;
  fiber->uc_link = link;
  makecontext(fiber, FiberMain, 0);
}

// Runs body() as every thread of every block of the grid, one block at a time (so the
// function-static __shared__ arrays are never used by two blocks at once), each block's threads
// as fibers on this OS thread.
template <typename F>
void Launch(dim3 grid, dim3 block, size_t shared_bytes, F&& body) {
  // Kernels keep small arrays in "registers": 64 KiB of stack each, allocated and never touched
  // beyond what a fiber uses.
  constexpr size_t kStack = 64 << 10;
  const unsigned threads = block.x * block.y * block.z;
  const unsigned blocks = grid.x * grid.y * grid.z;
  const std::function<void()> run = body;
  std::vector<unsigned char> shared(shared_bytes);
  std::unique_ptr<char[]> stacks(new char[kStack * threads]);
  std::vector<ucontext_t> contexts(threads);
  std::vector<FiberJob> jobs(threads);
  ucontext_t scheduler;
  for (unsigned b = 0; b < blocks; ++b) {
    BlockState state(threads);
    state.shared_dynamic_ptr = shared.data();
    for (unsigned t = 0; t < threads; ++t) {
      jobs[t] = FiberJob{&run, false};
      MakeFiber(&contexts[t], stacks.get() + kStack * t, kStack, &scheduler);
    }
    blockIdx = uint3{b % grid.x, (b / grid.x) % grid.y, b / (grid.x * grid.y)};
    blockDim = block;
    gridDim = grid;
    tl_block = &state;
    scheduler_context = &scheduler;
    for (unsigned left = threads; left > 0;) {
      left = 0;
      for (unsigned t = 0; t < threads; ++t) {
        if (jobs[t].done) continue;
        tl_linear = t;
        threadIdx = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
        running_context = &contexts[t];
        running_job = &jobs[t];
        swapcontext(&scheduler, &contexts[t]);
        if (!jobs[t].done) ++left;
      }
    }
  }
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
