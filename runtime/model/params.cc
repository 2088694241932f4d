#include "runtime/model/params.h"

#include <algorithm>
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

int64_t FirstPaddingRow(const ParamTensor& p, int tp_rank, int64_t vocab) {
  const std::string key = InitKeyName(p.name);
  if (key != "embedding.word" && key != "output.weight") return -1;
  const int64_t rows = p.local_shape[0];
  const int64_t row0 = p.sharding == Sharding::kRows ? int64_t(tp_rank) * rows : 0;
  const int64_t first = std::max<int64_t>(0, vocab - row0);
  return first < rows ? first : -1;
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
                                      int pp_rank, int tp_rank, DType compute, ParamInit init) {
  ParamStore s;
  s.dev_ = dev;
  s.tp_rank_ = tp_rank;
  s.compute_ = compute;
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
  const bool half = compute != DType::kFp32;
  const MemTag master_tag = half ? MemTag::kOptimizer : MemTag::kWeights;
  PTDP_ASSIGN_OR_RETURN(s.master_, Tensor::Make(dev, s.total_, DType::kFp32, master_tag));
  if (half) {
    PTDP_ASSIGN_OR_RETURN(s.copy_, Tensor::Make(dev, s.total_, compute, MemTag::kWeights));
  }
  PTDP_ASSIGN_OR_RETURN(s.grads_, Tensor::Make(dev, s.total_, DType::kFp32, MemTag::kGrads));
  PTDP_ASSIGN_OR_RETURN(s.m_, Tensor::Make(dev, s.total_, DType::kFp32, MemTag::kOptimizer));
  PTDP_ASSIGN_OR_RETURN(s.v_, Tensor::Make(dev, s.total_, DType::kFp32, MemTag::kOptimizer));
  PTDP_RETURN_IF_ERROR(s.Initialise(m, init));
  return s;
}

Status ParamStore::Initialise(const ModelSpec& m, ParamInit init) {
  for (int i = 0; i < static_cast<int>(entries_.size()); ++i) {
    const int64_t first_row =
        init == ParamInit::kRandom ? 0 : FirstPaddingRow(entries_[i].spec, tp_rank_, m.vocab);
    if (first_row >= 0) PTDP_RETURN_IF_ERROR(InitialiseRows(m, i, first_row));
  }
  if (init == ParamInit::kRandom) PTDP_RETURN_IF_ERROR(RefreshComputeCopy());
  if (init == ParamInit::kWeightsLoadFollows) {
    PTDP_RETURN_IF_ERROR(dev_->ops()->Fill(m_.ref(), 0.0));
    PTDP_RETURN_IF_ERROR(dev_->ops()->Fill(v_.ref(), 0.0));
  }
  return ZeroGrads();  // Device::Alloc leaves memory unset
}

Status ParamStore::InitialiseRows(const ModelSpec& m, int i, int64_t first_row) {
  Ops* ops = dev_->ops();
  const ParamTensor& p = entries_[i].spec;
  const std::string& name = p.name;
  // 1-D tensors are one row of `cols`.
  const int64_t cols = p.local_shape.size() == 2 ? p.local_shape[1] : p.LocalElements();
  const int64_t begin = first_row * cols, count = Count(i) - begin;
  auto rows = [&](Tensor& arena) { return arena.slice(entries_[i].offset + begin, count); };
  const TensorRef w = rows(master_);
  // Adam's moments start at zero.
  PTDP_RETURN_IF_ERROR(ops->Fill(rows(m_), 0.0));
  PTDP_RETURN_IF_ERROR(ops->Fill(rows(v_), 0.0));
  if (EndsWith(name, ".bias")) return ops->Fill(w, 0.0);
  if (EndsWith(name, "ln1.weight") || EndsWith(name, "ln2.weight") || name == "final_ln.weight") {
    return ops->Fill(w, 1.0);
  }
  double std = 0.02;
  if (EndsWith(name, "attn.proj.weight") || EndsWith(name, "mlp.fc2.weight")) {
    std /= std::sqrt(2.0 * m.layers);
  }
  // Local element j sits at global (row0 + j / cols) * global_cols + col0 + j % cols.
  int64_t global_cols = cols, col0 = 0, row0 = first_row;
  if (p.sharding == Sharding::kRows) row0 += int64_t(tp_rank_) * (p.LocalElements() / cols);
  if (p.sharding == Sharding::kCols) {
    global_cols = p.global_shape[1];
    col0 = int64_t(tp_rank_) * cols;
  }
  const uint64_t key = kernels::HashKey(InitKeyName(name).c_str());
  return ops->FillNormal(w, key, cols, global_cols, col0, row0, 0.0, std);
}

ConstRef ParamStore::weight(int i) const {
  const Tensor& t = copy_.empty() ? master_ : copy_;
  const int64_t off = entries_[i].offset * DTypeBytes(t.dtype());
  return {static_cast<const char*>(t.data()) + off, t.dtype(), Count(i)};
}

TensorRef ParamStore::compute_copy(int i) {
  if (copy_.empty()) return {};
  return copy_.slice(entries_[i].offset, Count(i));
}

int ParamStore::Find(int chunk, const std::string& name) const {
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].chunk == chunk && entries_[i].spec.name == name) return static_cast<int>(i);
  }
  return -1;
}

Status ParamStore::RefreshComputeCopy() {
  if (copy_.empty()) return Status::Ok();
  return dev_->ops()->Cast(copy_.ref(), master_.cref());
}

Status ParamStore::ZeroGrads() {
  return dev_->ops()->Fill(grads_.ref(), 0.0);
}

std::vector<float> ParamStore::HostMaster(int i) {
  std::vector<float> out(static_cast<size_t>(Count(i)));
  dev_->Copy(out.data(), master(i).data, Count(i) * Bytes(sizeof(float)));
  return out;
}

}  // namespace ptdp::runtime
