#include "runtime/model/params.h"

#include <algorithm>
#include <cmath>

#include "core/ledger.h"
#include "kernels/reference/ops.h"

namespace ptdp::runtime {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string InitKeyName(const std::string& name) {
  return name == "output.word_copy" || name == "mtp.embedding_copy" ? "embedding.word" : name;
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
                                      int pp_rank, int tp_rank, DType compute, ParamInit init,
                                      OptimizerShard shard, int ep_rank) {
  PTDP_CHECK_MSG(
      shard.count >= 1 && shard.rank >= 0 && shard.rank < shard.count,
      "optimizer shard " + std::to_string(shard.rank) + " of " + std::to_string(shard.count));
  PTDP_CHECK_MSG(shard.expert_count >= 1 && shard.expert_rank >= 0 &&
                     shard.expert_rank < shard.expert_count &&
                     (c.ep > 1 || shard.expert_count == 1),
                 "expert optimizer shard " + std::to_string(shard.expert_rank) + " of " +
                     std::to_string(shard.expert_count));
  ParamStore s;
  s.dev_ = dev;
  s.tp_rank_ = tp_rank;
  s.compute_ = compute;
  s.shard_ = shard;
  for (int chunk = 0; chunk < c.vp; ++chunk) {
    for (auto& p : ChunkParameters(m, c, pp_rank, chunk, ep_rank)) {
      ParamEntry e;
      e.spec = std::move(p);
      e.chunk = chunk;
      s.entries_.push_back(std::move(e));
    }
  }
  s.LayOut(c.ep > 1);
  const int64_t padded = s.padded_total_;
  const bool half = compute != DType::kFp32;
  if (half) {
    PTDP_ASSIGN_OR_RETURN(s.master_,
                          Tensor::Make(dev, s.state_total_, DType::kFp32, MemTag::kOptimizer));
    PTDP_ASSIGN_OR_RETURN(s.copy_, Tensor::Make(dev, padded, compute, MemTag::kWeights));
  } else {
    PTDP_ASSIGN_OR_RETURN(s.master_, Tensor::Make(dev, padded, DType::kFp32, MemTag::kWeights));
  }
  PTDP_ASSIGN_OR_RETURN(s.grads_, Tensor::Make(dev, padded, DType::kFp32, MemTag::kGrads));
  PTDP_ASSIGN_OR_RETURN(s.m_, Tensor::Make(dev, s.state_total_, DType::kFp32, MemTag::kOptimizer));
  PTDP_ASSIGN_OR_RETURN(s.v_, Tensor::Make(dev, s.state_total_, DType::kFp32, MemTag::kOptimizer));
  PTDP_RETURN_IF_ERROR(s.Initialise(m, init));
  return s;
}

// The ledger's split (core/ledger.h OptimizerShards): each region S whole elements of state per
// rank of its group, its part of the weight and gradient arenas padded to count * S. The experts
// apart (layout.ep > 1: their gradients are summed and their state sharded over another group
// than the dense parameters'), each region is one contiguous range of the arenas, in the entries'
// order within it: a chunk's dense parameters stay one range (Trainer::ChunkGradRange).
void ParamStore::LayOut(bool experts_apart) {
  int64_t dense = 0, experts = 0;
  for (const ParamEntry& e : entries_) {
    (experts_apart && e.spec.expert ? experts : dense) += e.spec.LocalElements();
  }
  total_ = dense + experts;
  StateRegion d;
  d.elements = dense;
  d.count = shard_.count;
  d.rank = shard_.rank;
  d.shard = OptimizerShardElements(dense, d.count);
  regions_ = {d};
  if (experts_apart) {
    StateRegion x;
    x.begin = d.padded();
    x.elements = experts;
    x.count = shard_.expert_count;
    x.rank = shard_.expert_rank;
    x.shard = OptimizerShardElements(experts, x.count);
    x.state_begin = d.shard;
    regions_.push_back(x);
  }
  int64_t at[2] = {0, regions_.back().begin};
  for (ParamEntry& e : entries_) {
    int64_t& next = at[experts_apart && e.spec.expert ? 1 : 0];
    e.offset = next;
    next += e.spec.LocalElements();
  }
  padded_total_ = regions_.back().begin + regions_.back().padded();
  state_total_ = regions_.back().state_begin + regions_.back().shard;
}

const StateRegion& ParamStore::RegionOf(int64_t at) const {
  for (const StateRegion& r : regions_) {
    if (at >= r.begin && at < r.begin + r.padded()) return r;
  }
  PTDP_CHECK_MSG(false, "arena element " + std::to_string(at) + " is in no region");
  return regions_.front();
}

// A sharded master (16-bit training with the distributed optimizer) is drawn whole into the
// gradient arena, which holds no gradients yet; the owned part is copied into the shard and the
// compute copy cast from the whole (at once for kRandom, after the load otherwise). A sharded
// store's moments start at zero in every init (a load overwrites them), not at fresh memory.
Status ParamStore::Initialise(const ModelSpec& m, ParamInit init) {
  Ops* ops = dev_->ops();
  // Everything is written again (also a kLoadFollows store whose load found nothing).
  master_in_grads_ = false;
  const bool master_whole = HoldsWhole(StateKind::kMaster);
  if (!master_whole) {
    PTDP_RETURN_IF_ERROR(ZeroGrads());
    master_in_grads_ = true;
  } else {
    for (const StateRegion& r : regions_) {  // the padding, which the all-gathers carry
      const int64_t pad = r.padded() - r.elements;
      if (pad > 0) PTDP_RETURN_IF_ERROR(ops->Fill(master_.slice(r.begin + r.elements, pad), 0.0));
    }
  }
  Tensor& weights = master_whole ? master_ : grads_;
  for (int i = 0; i < static_cast<int>(entries_.size()); ++i) {
    const int64_t first_row =
        init == ParamInit::kRandom ? 0 : FirstPaddingRow(entries_[i].spec, tp_rank_, m.vocab);
    if (first_row >= 0) PTDP_RETURN_IF_ERROR(InitialiseRows(m, i, first_row, weights));
  }
  if (!master_whole) {
    for (const StateRegion& r : regions_) {
      dev_->Copy(master_.slice(r.state_begin, r.shard).data,
                 grads_.slice(r.ShardOf(r.rank).begin, r.shard).data,
                 r.shard * Bytes(sizeof(float)));
    }
  }
  if (sharded() || init == ParamInit::kWeightsLoadFollows) {
    PTDP_RETURN_IF_ERROR(ops->Fill(m_.ref(), 0.0));
    PTDP_RETURN_IF_ERROR(ops->Fill(v_.ref(), 0.0));
  }
  if (init == ParamInit::kRandom) PTDP_RETURN_IF_ERROR(RefreshComputeCopy());
  return master_in_grads_ ? Status::Ok() : ZeroGrads();  // Device::Alloc leaves memory unset
}

Status ParamStore::InitialiseRows(const ModelSpec& m, int i, int64_t first_row, Tensor& weights) {
  Ops* ops = dev_->ops();
  const ParamTensor& p = entries_[i].spec;
  const std::string& name = p.name;
  // 1-D tensors are one row of `cols`.
  const int64_t cols = p.local_shape.size() == 2 ? p.local_shape[1] : p.LocalElements();
  const int64_t begin = first_row * cols, count = Count(i) - begin;
  auto rows = [&](Tensor& arena) { return arena.slice(entries_[i].offset + begin, count); };
  const TensorRef w = rows(weights);
  // Adam's moments start at zero.
  if (HoldsWhole(StateKind::kAdamM)) {
    PTDP_RETURN_IF_ERROR(ops->Fill(rows(m_), 0.0));
    PTDP_RETURN_IF_ERROR(ops->Fill(rows(v_), 0.0));
  }
  if (EndsWith(name, ".bias")) return ops->Fill(w, 0.0);
  if (EndsWith(name, "ln1.weight") || EndsWith(name, "ln2.weight") || name == "final_ln.weight") {
    // LayerNorm1P stores the offset from 1 (Megatron-Core initialises it to zeros).
    return ops->Fill(w, m.layernorm_1p ? 0.0 : 1.0);
  }
  double std = 0.02;
  // The output Linears of a layer's branches (an expert's fc2 too, as Megatron-Core's
  // output_layer_init_method scales them).
  if (EndsWith(name, "attn.proj.weight") || EndsWith(name, "mlp.fc2.weight") ||
      (EndsWith(name, ".fc2.weight") && name.find(".moe.expert") != std::string::npos)) {
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
  if (i < 0) return {};
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
  if (master_in_grads_) {  // a sharded master, whole in the gradient arena
    PTDP_RETURN_IF_ERROR(dev_->ops()->Cast(copy_.ref(), grads_.cref()));
    master_in_grads_ = false;
    return ZeroGrads();
  }
  if (copy_.empty()) return Status::Ok();
  PTDP_CHECK_MSG(HoldsWhole(StateKind::kMaster), "a sharded master is not whole here");
  return dev_->ops()->Cast(copy_.ref(), master_.cref());
}

Status ParamStore::ZeroGrads() {
  PTDP_CHECK_MSG(!master_in_grads_, "the gradient arena holds the masters a load is writing");
  gathered_ = -1;
  return dev_->ops()->Fill(grads_.ref(), 0.0);
}

std::vector<float> ParamStore::HostMaster(int i) {
  std::vector<float> out(static_cast<size_t>(Count(i)));
  dev_->Copy(out.data(), master(i).data, Count(i) * Bytes(sizeof(float)));
  return out;
}

std::vector<ElementRange> ParamStore::owned() const {
  std::vector<ElementRange> out;
  for (const StateRegion& r : regions_) out.push_back(r.owned());
  return out;
}

std::vector<ParamStore::ShardPiece> ParamStore::ShardPieces(ElementRange r) const {
  std::vector<ShardPiece> out;
  if (r.count() == 0) return out;
  const StateRegion& g = RegionOf(r.begin);
  PTDP_CHECK_MSG(r.end <= g.begin + g.padded(), "elements [" + std::to_string(r.begin) + ", " +
                                                    std::to_string(r.end) + ") span two regions");
  for (int64_t at = r.begin; at < r.end;) {
    const int owner = static_cast<int>((at - g.begin) / g.shard);
    const int64_t end = std::min(r.end, g.ShardOf(owner).end);
    out.push_back({{at, end}, owner});
    at = end;
  }
  return out;
}

bool ParamStore::HoldsWhole(StateKind k) const {
  return !sharded() || (k == StateKind::kMaster && copy_.empty());
}

Tensor& ParamStore::StateBuffer(StateKind k) {
  switch (k) {
    case StateKind::kMaster:
      return master_;
    case StateKind::kAdamM:
      return m_;
    case StateKind::kAdamV:
      return v_;
  }
  return master_;
}

TensorRef ParamStore::state(StateKind k, ElementRange r) {
  if (HoldsWhole(k)) return StateBuffer(k).slice(r.begin, r.count());
  const StateRegion& g = RegionOf(r.begin);
  const int64_t first = g.ShardOf(g.rank).begin;
  PTDP_CHECK_MSG(r.begin >= first && r.end <= first + g.shard,
                 "elements [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                     ") outside this rank's optimizer shard");
  return StateBuffer(k).slice(g.state_begin + r.begin - first, r.count());
}

TensorRef ParamStore::whole(int i, StateKind k) {
  if (HoldsWhole(k)) return StateBuffer(k).slice(entries_[i].offset, Count(i));
  PTDP_CHECK_MSG(gathered_ == static_cast<int>(k) || (k == StateKind::kMaster && master_in_grads_),
                 "a sharded optimizer state read whole without GatherWhole");
  return grads_.slice(entries_[i].offset, Count(i));
}

Status ParamStore::GatherWhole(StateKind k, Communicator* dp, Communicator* edp) {
  if (HoldsWhole(k)) return Status::Ok();
  PTDP_CHECK(!master_in_grads_);
  for (size_t i = 0; i < regions_.size(); ++i) {
    const StateRegion& r = regions_[i];
    const TensorRef mine = StateBuffer(k).slice(r.state_begin, r.shard);
    const TensorRef whole = grads_.slice(r.begin, r.padded());
    Communicator* group = i == 0 ? dp : edp;
    if (r.count == 1 && group == nullptr) {  // a region held whole: no group needed
      dev_->Copy(whole.data, mine.data, r.shard * Bytes(sizeof(float)));
      continue;
    }
    PTDP_CHECK(group != nullptr && group->size() == r.count && group->rank() == r.rank);
    PTDP_RETURN_IF_ERROR(group->AllGather(mine.data, whole.data, r.shard, DType::kFp32));
  }
  gathered_ = static_cast<int>(k);
  return Status::Ok();
}

Status ParamStore::EndGather() {
  if (gathered_ < 0) return Status::Ok();
  return ZeroGrads();
}

void ParamStore::ReadCurrent(int i, StateKind k, float* host) {
  const Bytes f = sizeof(float);
  if (HoldsWhole(k) || gathered_ == static_cast<int>(k) ||
      (k == StateKind::kMaster && master_in_grads_)) {
    dev_->Copy(host, whole(i, k).data, Count(i) * f);
    return;
  }
  const ElementRange e = range(i);
  for (const ElementRange& mine : owned()) {
    const ElementRange o = Intersect(e, mine);
    if (o.count() > 0) dev_->Copy(host + (o.begin - e.begin), state(k, o).data, o.count() * f);
  }
}

Status ParamStore::SetWhole(int i, StateKind k, const float* host) {
  const Bytes f = sizeof(float);
  if (HoldsWhole(k)) {
    dev_->Copy(whole(i, k).data, host, Count(i) * f);
    return Status::Ok();
  }
  PTDP_CHECK_MSG(gathered_ < 0, "SetWhole while the gradient arena holds a gathered state");
  const ElementRange e = range(i);
  for (const ElementRange& mine : owned()) {
    const ElementRange o = Intersect(e, mine);
    if (o.count() > 0) dev_->Copy(state(k, o).data, host + (o.begin - e.begin), o.count() * f);
  }
  if (k == StateKind::kMaster) {
    if (!master_in_grads_) PTDP_RETURN_IF_ERROR(ZeroGrads());  // the padding stays zero
    dev_->Copy(grads_.slice(e.begin, e.count()).data, host, e.count() * f);
    master_in_grads_ = true;
  }
  return Status::Ok();
}

}  // namespace ptdp::runtime
