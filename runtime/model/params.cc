#include "runtime/model/params.h"

#include <cmath>

#include "kernels/reference/ops.h"

namespace ptdp::runtime {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string InitKeyName(const std::string& name) {
  return name == "output.word_copy" ? "embedding.word" : name;
}

double InitialValue(const std::string& name, int layers, int64_t index) {
  if (EndsWith(name, ".bias")) return 0.0;
  if (EndsWith(name, "ln1.weight") || EndsWith(name, "ln2.weight") || name == "final_ln.weight") {
    return 1.0;
  }
  double std = 0.02;
  if (EndsWith(name, "attn.proj.weight") || EndsWith(name, "mlp.fc2.weight")) {
    std /= std::sqrt(2.0 * layers);
  }
  const std::string key = InitKeyName(name);
  return std *
         kernels::NormalFromCounter(kernels::HashKey(key.c_str()), static_cast<uint64_t>(index));
}

int64_t ParamStore::GlobalIndex(const ParamTensor& p, int tp_rank, int64_t i) {
  switch (p.sharding) {
    case Sharding::kReplicated:
      return i;
    case Sharding::kRows:
      return int64_t(tp_rank) * p.LocalElements() + i;  // contiguous row block
    case Sharding::kCols: {
      const int64_t cl = p.local_shape[1], cg = p.global_shape[1];
      return (i / cl) * cg + int64_t(tp_rank) * cl + i % cl;
    }
  }
  return i;
}

Result<ParamStore> ParamStore::Create(Device* dev, const ModelSpec& m, const ParallelConfig& c,
                                      int pp_rank, int tp_rank) {
  ParamStore s;
  s.tp_rank_ = tp_rank;
  for (int chunk = 0; chunk < c.vp; ++chunk) {
    for (auto& p : ChunkParameters(m, c, pp_rank, chunk)) {
      ParamEntry e;
      e.spec = std::move(p);
      e.chunk = chunk;
      e.offset = s.total_;
      s.total_ += e.spec.LocalElements();
      s.entries_.push_back(std::move(e));
    }
  }
  PTDP_ASSIGN_OR_RETURN(s.params_, Buffer<float>::Make(dev, s.total_, MemTag::kWeights));
  PTDP_ASSIGN_OR_RETURN(s.grads_, Buffer<float>::Make(dev, s.total_, MemTag::kGrads));
  PTDP_ASSIGN_OR_RETURN(s.m_, Buffer<float>::Make(dev, s.total_, MemTag::kOptimizer));
  PTDP_ASSIGN_OR_RETURN(s.v_, Buffer<float>::Make(dev, s.total_, MemTag::kOptimizer));
  for (size_t k = 0; k < s.entries_.size(); ++k) {
    const ParamEntry& e = s.entries_[k];
    float* p = s.params_.data() + e.offset;
    const int64_t n = e.spec.LocalElements();
    for (int64_t i = 0; i < n; ++i) {
      p[i] =
          static_cast<float>(InitialValue(e.spec.name, m.layers, GlobalIndex(e.spec, tp_rank, i)));
    }
  }
  return s;
}

int ParamStore::Find(int chunk, const std::string& name) const {
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].chunk == chunk && entries_[i].spec.name == name) return static_cast<int>(i);
  }
  return -1;
}

void ParamStore::ZeroGrads() {
  std::fill(grads_.data(), grads_.data() + total_, 0.0f);
}

}  // namespace ptdp::runtime
