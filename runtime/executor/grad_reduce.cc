// The gradient reductions of kReduceGrads: the tied embedding's all-reduce between the first and
// last stage, and the data-parallel sum over the flat fp32 gradient arena in buckets, either all at
// kReduceGrads (blocking) or, with TrainOptions::overlap_grad_reduce, started per chunk as soon as
// the instruction that completes the chunk's gradients has run, so that the reduction runs under
// the rest of the rank's backward (Megatron-LM's --overlap-grad-reduce), and waited for at
// kReduceGrads.
//
// The same arithmetic either way: every element is summed by one data-parallel all-reduce of the
// same values. The tied embedding's gradient is first summed with its other copy (as without
// overlap), so its buckets are held back from the early start and reduced at kReduceGrads after
// the embedding all-reduce. Buckets are cut at the same multiples of bucket_elements; a bucket
// that straddles two chunks or the tied tensor is split there, which changes message sizes, not
// any element's summands. With two data-parallel ranks the sum a + b is the same in any order, so
// the result is bit-identical to the blocking path; with more, the library's non-blocking
// algorithm may add the summands in another order (docs/runtime.md).
#include "runtime/executor/grad_reduce.h"

#include <algorithm>

#include "runtime/executor/trainer.h"
#include "runtime/executor/trainer_state.h"

namespace ptdp::runtime {
namespace {

bool WritesGradients(Op op) {
  return op == Op::kBackward || op == Op::kBackwardInput || op == Op::kBackwardWeight;
}

}  // namespace

std::vector<int> LastGradientInstr(const std::vector<Instr>& instrs, int chunks) {
  std::vector<int> last(static_cast<size_t>(chunks), -1);
  for (size_t i = 0; i < instrs.size(); ++i) {
    if (!WritesGradients(instrs[i].op)) continue;
    const int c = instrs[i].chunk;
    PTDP_CHECK_MSG(c >= 0 && c < chunks, "instruction " + std::to_string(i) + " has chunk " +
                                             std::to_string(c) + " of " + std::to_string(chunks));
    last[static_cast<size_t>(c)] = static_cast<int>(i);
  }
  return last;
}

std::vector<ElementRange> GradBuckets(ElementRange range, int64_t bucket,
                                      const std::vector<ElementRange>& held) {
  PTDP_CHECK(bucket >= 1);
  std::vector<ElementRange> pieces = {range};
  for (const ElementRange& h : held) {
    std::vector<ElementRange> kept;
    for (const ElementRange& p : pieces) {
      if (h.end <= p.begin || h.begin >= p.end) {
        kept.push_back(p);
        continue;
      }
      if (p.begin < h.begin) kept.push_back({p.begin, h.begin});
      if (h.end < p.end) kept.push_back({h.end, p.end});
    }
    pieces = std::move(kept);
  }
  std::sort(pieces.begin(), pieces.end(),
            [](const ElementRange& a, const ElementRange& b) { return a.begin < b.begin; });
  std::vector<ElementRange> out;
  for (const ElementRange& p : pieces) {
    for (int64_t b = p.begin; b < p.end;) {
      const int64_t next = std::min(p.end, (b / bucket + 1) * bucket);
      out.push_back({b, next});
      b = next;
    }
  }
  return out;
}

int Trainer::TiedGradIndex() const {
  if (emb_ == nullptr || !model_.tied_embeddings) return -1;
  int i = params_->Find(0, "embedding.word");
  if (i < 0) i = params_->Find(cfg_.vp - 1, "output.word_copy");
  PTDP_CHECK(i >= 0);
  return i;
}

ElementRange Trainer::EntryRange(int i) const {
  const ParamEntry& e = params_->entries()[static_cast<size_t>(i)];
  return {e.offset, e.offset + e.spec.LocalElements()};
}

// The arena is laid out chunk after chunk (runtime/model/params.cc), so a chunk's gradients are
// one range.
ElementRange Trainer::ChunkGradRange(int chunk) const {
  ElementRange r{-1, -1};
  for (int i = 0; i < static_cast<int>(params_->entries().size()); ++i) {
    if (params_->entries()[static_cast<size_t>(i)].chunk != chunk) continue;
    const ElementRange e = EntryRange(i);
    PTDP_CHECK_MSG(r.end < 0 || r.end == e.begin, "chunk gradients not contiguous");
    if (r.begin < 0) r.begin = e.begin;
    r.end = e.end;
  }
  return r.begin < 0 ? ElementRange{} : r;
}

void Trainer::PlanGradReduce() {
  const std::vector<Instr>& instrs = program_.ranks[static_cast<size_t>(coord_.pp)].instrs;
  chunk_grads_final_at_.assign(instrs.size(), -1);
  if (!opts_.overlap_grad_reduce || dp_->size() == 1) return;  // nothing to start
  const std::vector<int> last = LastGradientInstr(instrs, cfg_.vp);
  for (int c = 0; c < cfg_.vp; ++c) {
    if (last[static_cast<size_t>(c)] >= 0) chunk_grads_final_at_[last[static_cast<size_t>(c)]] = c;
  }
}

// Called after instruction `i` of the rank's Program: starts the data-parallel all-reduce of the
// chunk whose gradients it completed, if any. The Program is the same on every data-parallel rank
// of a pipeline rank, so every member of dp_ starts the same buckets in the same order (NCCL
// requires it; MPI's non-blocking collectives too).
Status Trainer::StartChunkGradReduce(size_t i) {
  if (i >= chunk_grads_final_at_.size() || chunk_grads_final_at_[i] < 0) return Status::Ok();
  const int chunk = chunk_grads_final_at_[i];
  std::vector<ElementRange> held;
  if (const int tied = TiedGradIndex(); tied >= 0) held.push_back(EntryRange(tied));
  float* arena = static_cast<float*>(params_->all_grads().data);
  for (const ElementRange& b : GradBuckets(ChunkGradRange(chunk), BucketElements(), held)) {
    auto gb = std::make_unique<GradBucket>();
    PTDP_ASSIGN_OR_RETURN(gb->req,
                          dp_->AllReduceSumAsync(arena + b.begin, b.count(), DType::kFp32));
    gb->elements = b.count();
    grad_buckets_.push_back(std::move(gb));
  }
  return Status::Ok();
}

// At an instruction boundary: MPI progresses a non-blocking collective only inside MPI calls, so
// each boundary Tests the buckets in flight (cheap) and drops the completed ones.
Status Trainer::PollGradReduce() {
  for (size_t i = 0; i < grad_buckets_.size();) {
    PTDP_ASSIGN_OR_RETURN(const bool done, grad_buckets_[i]->req->Test());
    if (done) {
      grad_buckets_.erase(grad_buckets_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  return Status::Ok();
}

int64_t Trainer::GradElementsInFlight() const {
  int64_t n = 0;
  for (const auto& b : grad_buckets_) n += b->elements;
  return n;
}

Status Trainer::ReduceGrads() {
  PTDP_RETURN_IF_ERROR(WaitSends());
  // The tied word embedding: its first-stage and last-stage copies get the sum of both gradients.
  const int tied = TiedGradIndex();
  if (tied >= 0) {
    const TensorRef g = params_->grad(tied);
    PTDP_RETURN_IF_ERROR(emb_->AllReduceSum(g.data, g.count, g.dtype));
  }
  // Data parallelism: sum (the loss is already normalised by the global batch) in buckets over the
  // flat gradient arena; with the overlap, only what was held back (the tied tensor), then the wait
  // for the buckets started during the backward.
  if (dp_->size() > 1) {
    const bool overlapped = opts_.overlap_grad_reduce;
    const ElementRange whole{0, params_->size()};
    const ElementRange now = overlapped ? (tied >= 0 ? EntryRange(tied) : ElementRange{}) : whole;
    float* arena = static_cast<float*>(params_->all_grads().data);
    for (const ElementRange& b : GradBuckets(now, BucketElements())) {
      PTDP_RETURN_IF_ERROR(dp_->AllReduceSum(arena + b.begin, b.count(), DType::kFp32));
    }
  }
  for (auto& b : grad_buckets_) PTDP_RETURN_IF_ERROR(b->req->Wait());
  grad_buckets_.clear();
  return Status::Ok();
}

}  // namespace ptdp::runtime
