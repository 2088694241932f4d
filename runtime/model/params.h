// ParamStore: the parameters one rank holds (every chunk of its pipeline rank, its tensor shard),
// their gradients and AdamW state, each in one flat arena so the data-parallel all-reduce can run
// over contiguous buckets. The tensor list comes from core/shapes.h StageParameters, the same list
// the planner counts.
//
// Initialisation: element i of a tensor is drawn from the counter-based generator keyed by the
// tensor's name at its GLOBAL element index (the index in the unsharded tensor), so every layout
// (t, p, d, v) starts from the same model. Weights: N(0, 0.02), attn.proj and mlp.fc2 weights
// N(0, 0.02 / sqrt(2 l)); LayerNorm weights 1; biases 0. The tied copy of the word embedding on the
// last stage draws from the key of "embedding.word", so both copies start equal.
#pragma once

#include <string>
#include <vector>

#include "core/model.h"
#include "core/parallel.h"
#include "core/shapes.h"
#include "runtime/backend/device.h"

namespace ptdp::runtime {

struct ParamEntry {
  ParamTensor spec;
  int chunk = 0;       // local model chunk
  int64_t offset = 0;  // in the arenas
};

class ParamStore {
 public:
  // Allocates (weights, grads, optimizer state) and initialises the parameters.
  static Result<ParamStore> Create(Device* dev, const ModelSpec& m, const ParallelConfig& c,
                                   int pp_rank, int tp_rank);
  const std::vector<ParamEntry>& entries() const { return entries_; }
  int64_t size() const { return total_; }
  // Index of `name` in `chunk`, or -1.
  int Find(int chunk, const std::string& name) const;
  float* param(int i) { return params_.data() + entries_[i].offset; }
  float* grad(int i) { return grads_.data() + entries_[i].offset; }
  float* adam_m(int i) { return m_.data() + entries_[i].offset; }
  float* adam_v(int i) { return v_.data() + entries_[i].offset; }
  float* all_params() { return params_.data(); }
  float* all_grads() { return grads_.data(); }
  void ZeroGrads();
  // Global element index of local element `i` of entry `e` on tensor rank `tp_rank` of `tp`.
  static int64_t GlobalIndex(const ParamTensor& p, int tp_rank, int64_t i);
  int tp_rank() const { return tp_rank_; }

 private:
  std::vector<ParamEntry> entries_;
  int64_t total_ = 0;
  int tp_rank_ = 0;
  Buffer<float> params_, grads_, m_, v_;
};

// The name whose generator initialises `name` (the tied copy uses the embedding's).
std::string InitKeyName(const std::string& name);
// Initial value of global element `index` of the tensor `name` in a model of `layers` layers.
double InitialValue(const std::string& name, int layers, int64_t index);

}  // namespace ptdp::runtime
