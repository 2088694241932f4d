// The optimizer step, on the device through Ops (the gradient reductions before it:
// grad_reduce.cc): fp16's non-finite check and unscaling, the global norm (each tensor counted
// once), clipping and AdamW (which refreshes the 16-bit compute copy). Only scalars (sum of
// squares, non-finite flag) reach the host. With the distributed optimizer each data rank does
// all of it on its shard of the arena alone (the gradients it holds summed) and the updated
// weights are then all-gathered over the data-parallel group.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/comm/agree.h"
#include "runtime/executor/grad_reduce.h"
#include "runtime/executor/trainer.h"

namespace ptdp::runtime {

// Whether every gradient on every rank is finite (fp16's overflow check, agreed over the world).
Result<bool> Trainer::GradientsFinite() {
  Ops* ops = dev_->ops();
  if (opts_.inject_overflow_step > 0 && last_step_ == opts_.inject_overflow_step &&
      world_->rank() == 0 && params_->size() > 0) {
    TensorRef first = params_->all_grads();
    first.count = 1;  // tests: one gradient element overflows
    PTDP_RETURN_IF_ERROR(ops->Fill(first, std::numeric_limits<double>::infinity()));
  }
  PTDP_RETURN_IF_ERROR(ops->Fill(scratch_scalar_.ref(), 0.0));
  for (TensorRef g : StepGrads())
    PTDP_RETURN_IF_ERROR(ops->FlagNonFinite(scratch_scalar_.ref(), g));
  double flag = 0;
  dev_->Copy(&flag, scratch_scalar_.data(), sizeof(double));
  PTDP_ASSIGN_OR_RETURN(std::vector<double> all, AllGatherDoubles(*world_, {flag}));
  for (double f : all) {
    if (f != 0) return false;
  }
  return true;
}

// The gradients this rank's step reads: its shards' (distributed optimizer), else all of them.
std::vector<ElementRange> Trainer::StepRanges() const {
  if (params_->sharded()) return params_->owned();
  return {ElementRange{0, params_->size()}};
}

std::vector<TensorRef> Trainer::StepGrads() {
  std::vector<TensorRef> out;
  for (const ElementRange& r : StepRanges()) {
    if (r.count() > 0) out.push_back(params_->grads_of(r));
  }
  return out;
}

// Sum of squares of the gradients, a tensor counted once over the world: tensor-replicated ones on
// tensor rank 0 only, the tied copy never, and (gradients being equal after the all-reduce) data
// rank 0 only (with ep > 1 an expert's on the first of its replicas, the members of ep_ in data
// ranks 0 to ep - 1), or with the distributed optimizer each data rank its shard. Summed in rank
// order, identical on every rank.
Result<double> Trainer::GradNormSquared() {
  Ops* ops = dev_->ops();
  PTDP_RETURN_IF_ERROR(ops->Fill(scratch_scalar_.ref(), 0.0));
  if (coord_.dp < cfg_.ep || params_->sharded()) {
    const std::vector<ElementRange> ranges = StepRanges();
    std::vector<ConstRef> counted;  // one multi-tensor call (one launch on CUDA)
    for (int i = 0; i < static_cast<int>(params_->entries().size()); ++i) {
      const ParamTensor& p = params_->entries()[i].spec;
      if (p.tied_copy) continue;
      if (p.sharding == Sharding::kReplicated && coord_.tp != 0) continue;
      if (!params_->sharded() && !p.expert && coord_.dp != 0) continue;
      for (const ElementRange& mine : ranges) {
        const ElementRange r = Intersect(params_->range(i), mine);
        if (r.count() > 0) counted.push_back(params_->grads_of(r));
      }
    }
    PTDP_RETURN_IF_ERROR(ops->SumSquaresMany(scratch_scalar_.ref(), counted));
  }
  double local = 0;
  dev_->Copy(&local, scratch_scalar_.data(), sizeof(double));
  PTDP_ASSIGN_OR_RETURN(std::vector<double> all, AllGatherDoubles(*world_, {local}));
  double total = 0;
  for (double v : all) total += v;
  return total;
}

Status Trainer::ApplyAdamW(int64_t step, double clip_coef) {
  Ops* ops = dev_->ops();
  const OptimizerConfig& o = opts_.optim;
  AdamWHyper h;
  h.grad_scale = clip_coef;  // clipping inside the update (one pass over the gradients fewer)
  h.lr = last_lr_;
  h.beta1 = o.beta1;
  h.beta2 = o.beta2;
  h.eps = o.eps;
  h.step = step - scaler_->skipped_steps();  // Adam's bias correction counts the steps taken
  std::vector<AdamWTensor> tensors;          // every tensor in one multi-tensor call
  tensors.reserve(params_->entries().size());
  for (const ElementRange& mine : StepRanges()) {
    for (int i = 0; i < static_cast<int>(params_->entries().size()); ++i) {
      const ParamTensor& p = params_->entries()[i].spec;
      const ElementRange r = Intersect(params_->range(i), mine);  // its part in the shard
      if (r.count() == 0) continue;
      tensors.push_back({params_->state(StateKind::kMaster, r), params_->compute_copy_of(r),
                         params_->grads_of(r), params_->state(StateKind::kAdamM, r),
                         params_->state(StateKind::kAdamV, r),
                         p.global_shape.size() == 2 ? o.weight_decay : 0.0});
    }
  }
  PTDP_RETURN_IF_ERROR(ops->AdamWMany(tensors, h));
  return params_->sharded() ? GatherUpdatedWeights() : Status::Ok();
}

// Each region's updated shards over its group, in place: the dense parameters' over dp_ (bucket
// by bucket with --overlap-param-gather), the experts' over edp_ (at once: the expert layers wait
// for them in the first microbatch's forward either way).
Status Trainer::GatherUpdatedWeights() {
  const TensorRef w = params_->all_weights();
  char* base = static_cast<char*>(w.data);
  const Bytes per = DTypeBytes(w.dtype);
  const std::vector<StateRegion>& regions = params_->regions();
  if (regions.size() > 1) {
    const StateRegion& x = regions[1];
    PTDP_CHECK(edp_ != nullptr && edp_->size() == x.count && edp_->rank() == x.rank);
    PTDP_RETURN_IF_ERROR(edp_->AllGather(base + x.ShardOf(x.rank).begin * per, base + x.begin * per,
                                         x.shard, w.dtype));
  }
  const StateRegion& dense = regions[0];
  if (!opts_.overlap_param_gather) {
    return dp_->AllGather(base + dense.ShardOf(dense.rank).begin * per, base, dense.shard, w.dtype);
  }
  // Chunk by chunk in the gradient reduction's buckets (the arenas share their layout), each
  // bucket's pieces from the ranks whose shards hold them; the padding is never read.
  weight_gathers_.clear();
  weight_gathers_.resize(static_cast<size_t>(cfg_.vp));
  for (int c = 0; c < cfg_.vp; ++c) {
    for (const ElementRange& b : GradBuckets(ChunkGradRange(c), BucketElements())) {
      for (const auto& [r, owner] : params_->ShardPieces(b)) {
        PTDP_ASSIGN_OR_RETURN(auto req,
                              dp_->BroadcastAsync(base + r.begin * per, r.count(), w.dtype, owner));
        weight_gathers_[static_cast<size_t>(c)].push_back(std::move(req));
      }
    }
  }
  return Status::Ok();
}

Status Trainer::WaitForWeights(int chunk) {
  for (size_t c = 0; c < weight_gathers_.size(); ++c) {
    if (chunk >= 0 && static_cast<int>(c) != chunk) continue;
    for (auto& req : weight_gathers_[c]) PTDP_RETURN_IF_ERROR(req->Wait());
    weight_gathers_[c].clear();
  }
  return Status::Ok();
}

Status Trainer::OptimizerStep(int64_t step) {
  last_step_ = step;
  last_lr_ = LearningRate(opts_.optim, step);
  last_loss_scale_ = scaler_->scale();
  if (scaler_->dynamic()) {
    PTDP_ASSIGN_OR_RETURN(bool finite, GradientsFinite());
    if (!scaler_->Update(!finite)) {
      last_grad_norm_ = std::numeric_limits<double>::quiet_NaN();
      return Status::Ok();  // skipped: parameters and Adam state unchanged
    }
    if (last_loss_scale_ != 1.0) {
      for (TensorRef g : StepGrads()) {
        PTDP_RETURN_IF_ERROR(dev_->ops()->Scale(g, 1.0 / last_loss_scale_));
      }
    }
  }
  PTDP_ASSIGN_OR_RETURN(const double sq, GradNormSquared());
  last_grad_norm_ = std::sqrt(sq);
  return ApplyAdamW(step, ClipCoefficient(opts_.optim, last_grad_norm_));
}

}  // namespace ptdp::runtime
