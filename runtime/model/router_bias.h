// RouterBiases: the routers' expert biases of one rank's mixture layers, DeepSeek-V3's
// auxiliary-loss-free load balancing (model.moe_router_expert_bias; Wang et al. 2024, "Auxiliary-
// Loss-Free Load Balancing Strategy for Mixture-of-Experts"; Megatron-Core's
// --moe-router-enable-expert-bias). Each mixture layer has a bias [E] that is added to the
// sigmoid scores for the choice of the top k alone (kernels/reference/moe.h MoeRouterTopK), is not
// trained by the gradient, and moves after each step by the rate, up for the experts the step's
// global batch gave fewer tokens than the mean and down for those it gave more (sign(mean -
// count), 0 at the mean), as Megatron-Core's get_updated_expert_bias does in fp32.
//
// The counts are the backward's (LayerWeights::expert_tokens: once per microbatch, whatever the
// recomputation), every tensor rank's alike (the choices are gathered over the tensor group), and
// summed over the data-parallel group with its context ranks, whose microbatches together are the
// global batch: so the biases are the same in every layout, as a buffer replicated on every rank
// of a stage. Checkpoints keep them in the manifest (runtime/checkpoint/manifest.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/model.h"
#include "runtime/backend/device.h"
#include "runtime/comm/communicator.h"

namespace ptdp::runtime {

class RouterBiases {
 public:
  // Zero biases for the mixture layers among `layers` (global indices; dense layers are skipped),
  // each [E] of `wide` (fp32 in training, as Megatron-Core keeps them; fp64 in the
  // finite-difference tests) on `dev`, tagged weights (core/ledger.h RouterBiasBytes). An empty
  // set for a model without the bias.
  static Result<RouterBiases> Create(Device* dev, const ModelSpec& m,
                                     const std::vector<int>& layers, DType wide);
  RouterBiases() = default;
  bool empty() const { return layers_.empty(); }
  const std::vector<int>& layers() const { return layers_; }
  // Layer `layer`'s bias on the device and its token counters on the host (an empty view and
  // nullptr for a layer this set lacks).
  ConstRef bias(int layer) const;
  int64_t* tokens(int layer);
  // Collective over `dp` (the stage's d cp ranks; nullptr: one rank): the step's counts summed,
  // every bias moved, the counters zeroed.
  Status Update(Communicator* dp);
  // Layer `layer`'s values (fp32 values as doubles, exact), and setting them (a checkpoint load).
  std::vector<double> Values(int layer) const;
  Status SetValues(int layer, const std::vector<double>& values);

 private:
  int Index(int layer) const;
  Status UploadAll();
  Device* dev_ = nullptr;
  int64_t experts_ = 0;
  double rate_ = 0;
  DType wide_ = DType::kFp32;
  std::vector<int> layers_;
  std::vector<std::vector<double>> values_;   // per layer, as `wide_` holds them
  std::vector<std::vector<int64_t>> counts_;  // per layer, this step's tokens per expert
  Tensor device_;                             // [layers][E] of wide_
};

}  // namespace ptdp::runtime
