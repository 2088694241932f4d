#include "runtime/model/router_bias.h"

#include <cmath>
#include <string>

namespace ptdp::runtime {

Result<RouterBiases> RouterBiases::Create(Device* dev, const ModelSpec& m,
                                          const std::vector<int>& layers, DType wide) {
  RouterBiases b;
  if (!m.moe_router_expert_bias) return b;
  if (wide != DType::kFp32 && wide != DType::kFp64) {
    return Status::Internal("router biases: wide dtype must be fp32 or fp64");
  }
  b.dev_ = dev;
  b.experts_ = m.moe_experts;
  b.rate_ = m.moe_router_bias_rate;
  b.wide_ = wide;
  for (int l : layers) {
    if (m.IsMoeLayer(l)) b.layers_.push_back(l);
  }
  if (b.layers_.empty()) return b;
  const size_t n = b.layers_.size();
  b.values_.assign(n, std::vector<double>(size_t(b.experts_), 0.0));
  b.counts_.assign(n, std::vector<int64_t>(size_t(b.experts_), 0));
  PTDP_ASSIGN_OR_RETURN(b.device_,
                        Tensor::Make(dev, int64_t(n) * b.experts_, wide, MemTag::kWeights));
  PTDP_RETURN_IF_ERROR(b.UploadAll());
  return b;
}

int RouterBiases::Index(int layer) const {
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i] == layer) return int(i);
  }
  return -1;
}

ConstRef RouterBiases::bias(int layer) const {
  const int i = Index(layer);
  if (i < 0) return {};
  const Bytes at = Bytes(i) * experts_ * DTypeBytes(wide_);
  return {static_cast<const char*>(device_.data()) + at, wide_, experts_};
}

int64_t* RouterBiases::tokens(int layer) {
  const int i = Index(layer);
  return i < 0 ? nullptr : counts_[size_t(i)].data();
}

Status RouterBiases::UploadAll() {
  const size_t total = values_.size() * size_t(experts_);
  if (wide_ == DType::kFp64) {
    std::vector<double> host;
    host.reserve(total);
    for (const auto& v : values_) host.insert(host.end(), v.begin(), v.end());
    dev_->Copy(device_.data(), host.data(), device_.bytes());
  } else {
    std::vector<float> host;
    host.reserve(total);
    for (const auto& v : values_) {
      for (double x : v) host.push_back(float(x));
    }
    dev_->Copy(device_.data(), host.data(), device_.bytes());
  }
  return Status::Ok();
}

Status RouterBiases::Update(Communicator* dp) {
  if (layers_.empty()) return Status::Ok();
  // Counts below 2^53 travel exactly as doubles; the sum runs on the device memory the data
  // group's communicator takes (NCCL's on a GPU).
  std::vector<double> host;
  for (auto& c : counts_) {
    for (int64_t& x : c) {
      host.push_back(double(x));
      x = 0;
    }
  }
  if (dp != nullptr && dp->size() > 1) {
    PTDP_ASSIGN_OR_RETURN(
        Tensor sums, Tensor::Make(dev_, int64_t(host.size()), DType::kFp64, MemTag::kWorkspace));
    dev_->Copy(sums.data(), host.data(), sums.bytes());
    PTDP_RETURN_IF_ERROR(dp->AllReduceSum(sums.data(), sums.count(), DType::kFp64));
    dev_->Copy(host.data(), sums.data(), sums.bytes());
  }
  // sign(mean - count), compared as total - E count (integers, no rounding), then the bias plus
  // that times the rate in the bias's type: fp32 as Megatron-Core's expert_bias + sign * rate.
  const float rate32 = float(rate_);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const double* count = host.data() + i * size_t(experts_);
    double total = 0;
    for (int64_t e = 0; e < experts_; ++e) total += count[e];
    for (int64_t e = 0; e < experts_; ++e) {
      const double offset = total - double(experts_) * count[e];
      const int sign = offset > 0 ? 1 : offset < 0 ? -1 : 0;
      double& b = values_[i][size_t(e)];
      if (wide_ == DType::kFp32) {
        b = double(float(b) + float(sign) * rate32);
      } else {
        b += sign * rate_;
      }
    }
  }
  return UploadAll();
}

std::vector<double> RouterBiases::Values(int layer) const {
  const int i = Index(layer);
  return i < 0 ? std::vector<double>{} : values_[size_t(i)];
}

Status RouterBiases::SetValues(int layer, const std::vector<double>& values) {
  const int i = Index(layer);
  if (i < 0 || int64_t(values.size()) != experts_) {
    return Status::Internal("router biases: layer " + std::to_string(layer) + " not held, or " +
                            std::to_string(values.size()) + " values for " +
                            std::to_string(experts_) + " experts");
  }
  values_[size_t(i)] = values;
  if (wide_ == DType::kFp32) {
    for (double& x : values_[size_t(i)]) x = double(float(x));
  }
  return UploadAll();
}

}  // namespace ptdp::runtime
