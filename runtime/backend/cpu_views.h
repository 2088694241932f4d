// The CPU backend's views of device tensors in the compute type (runtime/backend/cpu_ops.h): what
// every CpuOps file reads and writes through. Internal to runtime/backend.
#pragma once

#include <type_traits>
#include <vector>

#include "core/status.h"
#include "runtime/backend/half.h"
#include "runtime/backend/ops.h"

namespace ptdp::runtime::cpu_views {

// A read view in the compute type T: the tensor itself for fp32 (T float) and fp64 (T double), a
// widened copy of a 16-bit tensor.
template <typename T>
class In {
 public:
  explicit In(ConstRef r) {
    if (r.data == nullptr) return;
    if constexpr (std::is_same_v<T, double>) {
      PTDP_CHECK_MSG(r.dtype == DType::kFp64, "cpu ops: an fp64 op got a narrower tensor");
      p_ = static_cast<const double*>(r.data);
    } else if (r.dtype == DType::kFp32) {
      p_ = static_cast<const float*>(r.data);
    } else {
      PTDP_CHECK_MSG(r.dtype == DType::kBf16 || r.dtype == DType::kFp16,
                     "cpu ops: a float op got a non-float tensor");
      tmp_.resize(static_cast<size_t>(r.count));
      half::Widen(tmp_.data(), r.data, r.count, r.dtype);
      p_ = tmp_.data();
    }
  }
  const T* get() const { return p_; }

 private:
  const T* p_ = nullptr;
  std::vector<T> tmp_;
};

// A write view: the tensor itself, or a float copy (loaded when `load`) rounded into the 16-bit
// tensor when the view goes out of scope (the op's one rounding of that output).
template <typename T>
class Out {
 public:
  Out(TensorRef r, bool load) : r_(r) {
    if (r.data == nullptr) return;
    if constexpr (std::is_same_v<T, double>) {
      PTDP_CHECK_MSG(r.dtype == DType::kFp64, "cpu ops: an fp64 op got a narrower tensor");
      p_ = static_cast<double*>(r.data);
    } else if (r.dtype == DType::kFp32) {
      p_ = static_cast<float*>(r.data);
    } else {
      PTDP_CHECK_MSG(r.dtype == DType::kBf16 || r.dtype == DType::kFp16,
                     "cpu ops: a float op got a non-float tensor");
      tmp_.resize(static_cast<size_t>(r.count));
      if (load) half::Widen(tmp_.data(), r.data, r.count, r.dtype);
      p_ = tmp_.data();
    }
  }
  ~Out() {
    if constexpr (std::is_same_v<T, float>) {
      if (!tmp_.empty()) half::Narrow(r_.data, tmp_.data(), r_.count, r_.dtype);
    }
  }
  Out(const Out&) = delete;
  Out& operator=(const Out&) = delete;
  T* get() { return p_; }

 private:
  TensorRef r_;
  T* p_ = nullptr;
  std::vector<T> tmp_;
};

// Runs f(T{}) with T = double for fp64 tensors, float for everything else.
template <typename F>
Status Dispatch(DType t, F&& f) {
  if (t == DType::kFp64) return f(double{});
  return f(float{});
}

}  // namespace ptdp::runtime::cpu_views
