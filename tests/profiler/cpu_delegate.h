// A profiler backend that hands every call to the cpu backend, for tests that change one of its
// behaviours (a kernel that fails, or runs another kernel, at some shapes): derive, override that
// method, and call cpu() for the rest. The optional timings no such test needs (backward GEMM
// tables, cross-entropy, GeLU) stay at the interface's "not measured", keeping the tests fast.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "profiler/backend.h"

namespace ptdp::profiler::testing {

class CpuDelegate : public ProfileBackend {
 public:
  CpuDelegate() : cpu_(MakeCpuBackend()) {}
  std::string kind() const override { return cpu_->kind(); }
  std::string device_name() const override { return cpu_->device_name(); }
  std::string gemm_dtype() const override { return cpu_->gemm_dtype(); }
  Precision precision() const override { return cpu_->precision(); }
  Result<double> MemoryCapacityBytes(int r) override { return cpu_->MemoryCapacityBytes(r); }
  Result<double> WorkspaceBytes() override { return cpu_->WorkspaceBytes(); }
  Result<double> TimeGemm(int64_t m, int64_t n, int64_t k, const TimingOptions& t) override {
    return cpu_->TimeGemm(m, n, k, t);
  }
  Result<double> StreamAddBandwidth(Bytes b, const TimingOptions& t) override {
    return cpu_->StreamAddBandwidth(b, t);
  }
  Result<double> GeluBandwidth(Bytes b, const TimingOptions& t) override {
    return cpu_->GeluBandwidth(b, t);
  }
  Result<double> TimeAttention(int64_t b, int64_t s, int64_t h, int64_t d, double p,
                               const TimingOptions& t) override {
    return cpu_->TimeAttention(b, s, h, d, p, t);
  }
  Result<double> TimeAttentionBackward(int64_t b, int64_t s, int64_t h, int64_t d, double p,
                                       const TimingOptions& t) override {
    return cpu_->TimeAttentionBackward(b, s, h, d, p, t);
  }
  std::string attention_kind(double p) const override { return cpu_->attention_kind(p); }
  Result<double> KernelLaunchSeconds(const TimingOptions& t) override {
    return cpu_->KernelLaunchSeconds(t);
  }
  Result<void*> Alloc(Bytes b) override { return cpu_->Alloc(b); }
  void Free(void* p) override { cpu_->Free(p); }
  Status Synchronize() override { return cpu_->Synchronize(); }
  Result<std::unique_ptr<runtime::Communicator>> MakeDataComm(const std::vector<int>& r) override {
    return cpu_->MakeDataComm(r);
  }

 protected:
  ProfileBackend& cpu() { return *cpu_; }
  const ProfileBackend& cpu() const { return *cpu_; }

 private:
  std::unique_ptr<ProfileBackend> cpu_;
};

}  // namespace ptdp::profiler::testing
