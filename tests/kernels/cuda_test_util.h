// Helpers for the CUDA kernel tests: a fixture that skips without a device, device buffers,
// bf16 rounding on the host, and the normalised error NMSE = sum (got - want)^2 / sum want^2.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/check.h"

namespace ptdp::cuda_kernels::testing {

using bf16 = __nv_bfloat16;

// Every test of the GPU suite derives from this: SKIPPED (with the reason) when there is no
// CUDA device, so a CPU-only CI run reports them as skipped, never as passed.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount reports 0)";
  }
  void Sync() { PTDP_CUDA_CHECK(cudaDeviceSynchronize()); }
};

// A device array of n T's, filled from / read back to host vectors.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    PTDP_CUDA_CHECK(cudaMalloc(&ptr_, sizeof(T) * (n > 0 ? n : 1)));
    PTDP_CUDA_CHECK(cudaMemset(ptr_, 0, sizeof(T) * (n > 0 ? n : 1)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { Upload(host); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void Upload(const std::vector<T>& host) {
    PTDP_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), sizeof(T) * n_, cudaMemcpyHostToDevice));
  }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    PTDP_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, sizeof(T) * n_, cudaMemcpyDeviceToHost));
    return host;
  }
  T* get() { return ptr_; }
  const T* get() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

// Host conversions: the element type's value as a double, and a double stored in T.
inline double ToDouble(float v) {
  return v;
}
inline double ToDouble(bf16 v) {
  return static_cast<double>(__bfloat162float(v));
}
template <typename T>
T FromDouble(double v);
template <>
inline float FromDouble<float>(double v) {
  return static_cast<float>(v);
}
template <>
inline bf16 FromDouble<bf16>(double v) {
  return __float2bfloat16_rn(static_cast<float>(v));
}

// `values` stored in T, and the stored values back as doubles (the reference's exact inputs).
template <typename T>
std::vector<T> Store(const std::vector<double>& values) {
  std::vector<T> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = FromDouble<T>(values[i]);
  return out;
}
template <typename T>
std::vector<double> AsDouble(const std::vector<T>& values) {
  std::vector<double> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = ToDouble(values[i]);
  return out;
}

inline double Nmse(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return den > 0.0 ? num / den : num;
}

// True in the CPU emulation build (emu/cuda_emu.h), where every emulated thread is an OS thread:
// tests pick smaller problems there, still covering partial tiles and several blocks.
#ifdef PTDP_CUDA_EMULATION
inline constexpr bool kEmulated = true;
#else
inline constexpr bool kEmulated = false;
#endif
// `gpu` on a device, `emulated` in the emulation build.
inline constexpr int64_t SizeFor(int64_t gpu, int64_t emulated) {
  return kEmulated ? emulated : gpu;
}

// Per-op tolerances on the NMSE. fp32 kernels against the double reference: rounding of order
// 1e-7 relative (NMSE ~1e-14), so 1e-10 leaves room for accumulation order. A bf16 output adds
// one rounding with relative error up to 2^-9 (NMSE about (2^-9)^2 / 3 = 1.3e-6): 1e-5 for
// outputs rounded once, 1e-4 where bf16-rounded intermediates feed further arithmetic (attention
// backward uses the bf16 output in dout . out).
template <typename T>
constexpr double kTolOnce = std::is_same_v<T, float> ? 1e-10 : 1e-5;
template <typename T>
constexpr double kTolChained = std::is_same_v<T, float> ? 1e-10 : 1e-4;

}  // namespace ptdp::cuda_kernels::testing
