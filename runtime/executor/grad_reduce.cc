// The gradient reductions of kReduceGrads: the tied embedding's all-reduce between the first and
// last stage, and the data-parallel sum over the flat fp32 gradient arena in buckets (with the
// distributed optimizer, each bucket's pieces reduced to their shards' owners; blocking, one
// reduce-scatter at kReduceGrads), either all at kReduceGrads (blocking) or, with
// TrainOptions::overlap_grad_reduce, started during the backward and waited for at kReduceGrads
// (Megatron-LM's --overlap-grad-reduce): inside the instruction that completes a chunk's
// gradients for the step, each bucket starts as soon as every parameter it covers has its final
// gradient (after the head's and each layer's backward, or each deferred weight GEMM of a split
// backward), so the last layers' buckets run under the earlier layers' backward; what is left
// starts when the instruction ends.
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

#include <string_view>

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
  if (emb_ == nullptr || !(model_.tied_embeddings || model_.mtp_layers > 0)) return -1;
  int i = params_->Find(0, "embedding.word");
  // The head's copy: the output matrix's (which the prediction depths read too), or the
  // prediction depths' embedding (core/shapes.h AppendHead: never both).
  if (i < 0) i = params_->Find(cfg_.vp - 1, "output.word_copy");
  if (i < 0) i = params_->Find(cfg_.vp - 1, "mtp.embedding_copy");
  PTDP_CHECK(i >= 0);
  return i;
}

ElementRange Trainer::EntryRange(int i) const {
  const ParamEntry& e = params_->entries()[static_cast<size_t>(i)];
  return {e.offset, e.offset + e.spec.LocalElements()};
}

// The arena is laid out chunk after chunk (runtime/model/params.cc), so a chunk's gradients are
// one range. With ep > 1 the experts are apart, after every chunk's dense parameters, and reduced
// over their own group (ExpertGradRanges): the range is the chunk's dense parameters.
ElementRange Trainer::ChunkGradRange(int chunk) const {
  ElementRange r{-1, -1};
  for (int i = 0; i < static_cast<int>(params_->entries().size()); ++i) {
    const ParamEntry& entry = params_->entries()[static_cast<size_t>(i)];
    if (entry.chunk != chunk || (cfg_.ep > 1 && entry.spec.expert)) continue;
    const ElementRange e = EntryRange(i);
    PTDP_CHECK_MSG(r.end < 0 || r.end == e.begin, "chunk gradients not contiguous");
    if (r.begin < 0) r.begin = e.begin;
    r.end = e.end;
  }
  return r.begin < 0 ? ElementRange{} : r;
}

// With ep > 1 the experts' gradients differ between the members of ep_: they are held out of dp_'s
// buckets and summed over edp_ alone (ReduceGrads), as Megatron-Core reduces expert parameters
// over the expert data-parallel group. Adjacent entries merged (a layer's experts are one range).
std::vector<ElementRange> Trainer::ExpertGradRanges() const {
  std::vector<ElementRange> out;
  if (cfg_.ep <= 1) return out;
  for (int i = 0; i < static_cast<int>(params_->entries().size()); ++i) {
    if (!params_->entries()[static_cast<size_t>(i)].spec.expert) continue;
    const ElementRange r = EntryRange(i);
    if (!out.empty() && out.back().end == r.begin) {
      out.back().end = r.end;
    } else {
      out.push_back(r);
    }
  }
  return out;
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

// Before instruction `i` of the rank's Program: if it completes a chunk's gradients for the step,
// the chunk's buckets, for the backward to start as the pieces it writes become final. The Program
// is the same on every data-parallel rank of a pipeline rank, and so are the layer loop and the
// weight-gradient queue, so every member of dp_ starts the same buckets in the same order (NCCL
// requires it; MPI's non-blocking collectives too).
void Trainer::BeginChunkGradReduce(size_t i) {
  early_chunk_ = -1;
  unstarted_grad_buckets_.clear();
  buckets_started_early_ = 0;
  if (i >= chunk_grads_final_at_.size() || chunk_grads_final_at_[i] < 0) return;
  early_chunk_ = chunk_grads_final_at_[i];
  std::vector<ElementRange> held = ExpertGradRanges();
  if (const int tied = TiedGradIndex(); tied >= 0) held.push_back(EntryRange(tied));
  unstarted_grad_buckets_ = GradBuckets(ChunkGradRange(early_chunk_), BucketElements(), held);
}

// Starts one bucket's data-parallel sum: an all-reduce, or with the distributed optimizer a
// reduce of each piece of it to the data rank whose shard holds the piece (the shard is
// contiguous over the arena, not a part of every bucket: docs/design-notes-runtime.md), which
// leaves every owner its shard's sums, as the reduce-scatter does.
Status Trainer::StartGradBucket(ElementRange bucket) {
  float* arena = static_cast<float*>(params_->all_grads().data);
  // (elements, owner; -1: every rank)
  std::vector<ParamStore::ShardPiece> pieces = {{bucket, -1}};
  if (params_->sharded()) pieces = params_->ShardPieces(bucket);
  for (const auto& [r, owner] : pieces) {
    auto gb = std::make_unique<GradBucket>();
    if (owner < 0) {
      PTDP_ASSIGN_OR_RETURN(gb->req,
                            dp_->AllReduceSumAsync(arena + r.begin, r.count(), DType::kFp32));
    } else {
      PTDP_ASSIGN_OR_RETURN(gb->req,
                            dp_->ReduceSumAsync(arena + r.begin, r.count(), DType::kFp32, owner));
    }
    gb->elements = r.count();
    grad_buckets_.push_back(std::move(gb));
  }
  return Status::Ok();
}

// Starts, the highest first (Megatron-LM's reverse parameter order: the backward's order), every
// bucket not yet started that overlaps none of the `pending` arena ranges (gradients the
// instruction has still to write), then Tests the buckets in flight: a boundary inside the
// instruction.
Status Trainer::StartReadyGradBuckets(const std::vector<ElementRange>& pending) {
  if (early_chunk_ < 0) return Status::Ok();
  const bool early = std::any_of(pending.begin(), pending.end(),
                                 [](const ElementRange& r) { return r.count() > 0; });
  std::vector<ElementRange> waiting;
  for (auto b = unstarted_grad_buckets_.rbegin(); b != unstarted_grad_buckets_.rend(); ++b) {
    const bool written = std::any_of(pending.begin(), pending.end(), [&](const ElementRange& p) {
      return p.begin < b->end && b->begin < p.end;
    });
    if (written) {
      waiting.insert(waiting.begin(), *b);
      continue;
    }
    PTDP_RETURN_IF_ERROR(StartGradBucket(*b));
    if (early) ++buckets_started_early_;
  }
  unstarted_grad_buckets_ = std::move(waiting);
  return early ? PollGradReduce() : Status::Ok();
}

// Called by the backward of `chunk` when the parameters whose names start with `piece_prefix` (the
// head's "final_ln.", a layer's "layerN.") have their gradients for the microbatch written. In the
// chunk's last gradient instruction of the step (a whole backward) those are final, and so is
// everything after them in the arena: the arena holds a chunk's embedding, its layers in order and
// its head (runtime/model/params.cc), the reverse of the order the backward writes them in. What
// lies before the piece is still to be written.
Status Trainer::ChunkGradsFinalFrom(int chunk, const std::string& piece_prefix) {
  if (chunk != early_chunk_) return Status::Ok();
  const ElementRange whole = ChunkGradRange(chunk);
  int64_t begin = whole.end;
  for (int i = 0; i < static_cast<int>(params_->entries().size()); ++i) {
    const ParamEntry& e = params_->entries()[static_cast<size_t>(i)];
    if (e.chunk == chunk && e.spec.name.rfind(piece_prefix, 0) == 0) {
      begin = std::min(begin, e.offset);
    }
  }
  PTDP_CHECK_MSG(begin < whole.end,
                 "no parameter " + piece_prefix + "* in chunk " + std::to_string(chunk));
  return StartReadyGradBuckets({{whole.begin, begin}});
}

// The weight half of a split backward. In the chunk's last gradient instruction of the step every
// other gradient of the chunk is final already (each input half precedes its weight half), so
// what is still to be written is what the queued GEMMs write: they run one at a time, each
// followed by the start of the buckets no GEMM left in the queue writes. The same GEMMs in the same
// order either way.
Status Trainer::RunWeightGrads(const LayerCtx& c, int chunk, WeightGradQueue* queue) {
  if (chunk != early_chunk_) return RunDeferredWeightGrads(c, queue);
  const float* arena = static_cast<const float*>(params_->all_grads().data);
  const auto range = [&](TensorRef r) {
    const int64_t begin = static_cast<const float*>(r.data) - arena;
    return ElementRange{begin, begin + r.count};
  };
  for (size_t k = 0; k < queue->size(); ++k) {
    WeightGradQueue one;
    one.push_back(std::move((*queue)[k]));
    PTDP_RETURN_IF_ERROR(RunDeferredWeightGrads(c, &one));
    std::vector<ElementRange> pending;
    for (size_t j = k + 1; j < queue->size(); ++j) {
      for (TensorRef r : {(*queue)[j].dw, (*queue)[j].dbias}) {
        if (!r.empty()) pending.push_back(range(r));
      }
    }
    PTDP_RETURN_IF_ERROR(StartReadyGradBuckets(pending));
  }
  queue->clear();
  return Status::Ok();
}

// After instruction `i`: the buckets of its chunk not started inside it (those that hold the
// pieces it wrote last, and all of them for an instruction that reports no pieces).
Status Trainer::StartChunkGradReduce(size_t i) {
  if (i >= chunk_grads_final_at_.size() || chunk_grads_final_at_[i] < 0) return Status::Ok();
  PTDP_CHECK(early_chunk_ == chunk_grads_final_at_[i]);
  PTDP_RETURN_IF_ERROR(StartReadyGradBuckets({}));
  PTDP_CHECK(unstarted_grad_buckets_.empty());
  early_chunk_ = -1;
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

namespace {
// Whether each tensor rank holds only a part of p's gradient: a replicated tensor that acts on the
// rank's own rows under sequence parallelism (but the position embedding, whose gradient comes
// from the gathered rows), the QK norm's weights, which act on the rank's own heads, or a shared
// expert's gate, whose gradient each rank takes from its own features.
bool GradIsPartialOverTensorGroup(const ParamTensor& p, bool sequence_parallel, bool mla) {
  if (p.sharding != Sharding::kReplicated) return false;
  const auto ends_with = [&](std::string_view tail) {
    return p.name.size() >= tail.size() &&
           p.name.compare(p.name.size() - tail.size(), tail.size(), tail) == 0;
  };
  // (Multi-latent attention's query latent norm is also attn.q_norm.weight, but on the latent's
  // rows, summed over the tensor group before it (runtime/model/mla.h): a LayerNorm's case.)
  if (!mla && (ends_with("attn.q_norm.weight") || ends_with("attn.k_norm.weight"))) return true;
  // The shared expert's gate: each tensor rank's gradient is from its own fs / t features.
  if (ends_with("moe.shared.gate.weight")) return true;
  return sequence_parallel && p.name != "embedding.position";
}
}  // namespace

// A tensor rank that computes only a part of a replicated tensor's gradient (under sequence
// parallelism the LayerNorms' and the row-parallel projections' biases, from its own rows; the QK
// norm's weights, from its own heads) has it summed over the tensor group here, once per step, as
// Megatron-Core's finalize_model_grads does, after the data-parallel reduction (sums over the two
// groups commute), so that buckets started during the backward need not wait for it. With the
// distributed optimizer only the rank's shard of them is summed (the tensor ranks of a data rank
// own the same arena range: their arenas are alike).
Status Trainer::SumTensorPartialGrads() {
  if (tp_->size() == 1) return Status::Ok();
  for (const ElementRange& mine : StepRanges()) {
    for (int i = 0; i < static_cast<int>(params_->entries().size()); ++i) {
      const ParamTensor& p = params_->entries()[static_cast<size_t>(i)].spec;
      if (!GradIsPartialOverTensorGroup(p, cfg_.sequence_parallel, model_.IsMla())) continue;
      const TensorRef g = params_->grads_of(Intersect(params_->range(i), mine));
      if (g.count > 0) PTDP_RETURN_IF_ERROR(tp_->AllReduceSum(g.data, g.count, g.dtype));
    }
  }
  return Status::Ok();
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
  if (dp_->size() > 1 && params_->sharded() && opts_.overlap_grad_reduce) {
    // The held-back tied tensor's pieces to their owners; the rest was started in the backward.
    if (tied >= 0) {
      for (const ElementRange& b : GradBuckets(EntryRange(tied), BucketElements())) {
        PTDP_RETURN_IF_ERROR(StartGradBucket(b));
      }
    }
  } else if (dp_->size() > 1 && params_->sharded()) {
    // The distributed optimizer: each data rank needs the sum of its shard alone (a
    // reduce-scatter in place over the dense region of the padded arena, whose padding is zero).
    const StateRegion& r = params_->regions()[0];
    float* arena = static_cast<float*>(params_->all_grads().data);
    PTDP_RETURN_IF_ERROR(dp_->ReduceScatterSum(arena + r.begin, arena + r.ShardOf(r.rank).begin,
                                               r.shard, DType::kFp32));
  } else if (dp_->size() > 1) {
    const bool overlapped = opts_.overlap_grad_reduce;
    const ElementRange whole{0, params_->size()};
    const ElementRange now = overlapped ? (tied >= 0 ? EntryRange(tied) : ElementRange{}) : whole;
    float* arena = static_cast<float*>(params_->all_grads().data);
    for (const ElementRange& b : GradBuckets(now, BucketElements(), ExpertGradRanges())) {
      PTDP_RETURN_IF_ERROR(dp_->AllReduceSum(arena + b.begin, b.count(), DType::kFp32));
    }
  }
  for (auto& b : grad_buckets_) PTDP_RETURN_IF_ERROR(b->req->Wait());
  grad_buckets_.clear();
  float* arena = static_cast<float*>(params_->all_grads().data);
  if (edp_ != nullptr && edp_->size() > 1 && params_->sharded()) {
    // The experts' region (ep > 1) with the distributed optimizer: its shards' sums over the
    // expert data-parallel group, a reduce-scatter as the dense region's.
    const StateRegion& r = params_->regions()[1];
    PTDP_RETURN_IF_ERROR(edp_->ReduceScatterSum(arena + r.begin, arena + r.ShardOf(r.rank).begin,
                                                r.shard, DType::kFp32));
  } else if (edp_ != nullptr && edp_->size() > 1) {  // the experts' (ep > 1), over their replicas
    for (const ElementRange& r : ExpertGradRanges()) {
      for (const ElementRange& b : GradBuckets(r, BucketElements())) {
        PTDP_RETURN_IF_ERROR(edp_->AllReduceSum(arena + b.begin, b.count(), DType::kFp32));
      }
    }
  }
  return SumTensorPartialGrads();
}

}  // namespace ptdp::runtime
