// ParamStore: the parameters one rank holds (every chunk of its pipeline rank, its tensor shard),
// in flat arenas so the data-parallel all-reduce, the norm and the optimizer run over contiguous
// memory. The tensor list comes from core/shapes.h StageParameters, the same list the ledger
// counts, and the arenas are what core/ledger.h BytesPerParameter prices:
//   fp32:        master weights (tag weights: the layers read them), fp32 grads, Adam m and v;
//   bf16/fp16:   a 16-bit compute copy (tag weights: what the layers read), fp32 main grads, and
//                fp32 master weights + Adam m, v (tag optimizer). The optimizer step refreshes the
//                copy from the master.
//
// Initialisation (on the device, through Ops): element i of a tensor is drawn from the
// counter-based generator keyed by the tensor's name at its GLOBAL element index (the index in
// the unsharded tensor), so every layout (t, p, d, v) starts from the same model. Weights
// N(0, 0.02), attn.proj and mlp.fc2 weights N(0, 0.02 / sqrt(2 l)); LayerNorm weights 1; biases
// 0. The tied copy of the word embedding on the last stage draws from the key of "embedding.word".
// With ParamInit::kLoadFollows (a checkpoint load follows: a plan switch, --load) only what a load
// may leave unwritten is initialised so: drawing the normals is most of a new trainer's build
// (docs/checkpoints.md "Speed").
#pragma once

#include <string>
#include <vector>

#include "core/model.h"
#include "core/parallel.h"
#include "core/shapes.h"
#include "runtime/backend/device.h"
#include "runtime/comm/communicator.h"

namespace ptdp::runtime {

// What ParamStore::Create writes into the new arenas.
enum class ParamInit {
  kRandom,  // the initial model above, Adam's moments and the gradients zero
  // A checkpoint load follows and writes every element of the real vocabulary rows (the loader
  // refuses a checkpoint that leaves one uncovered: pieces.h AssembleLocal). Initialised as
  // kRandom does: the vocabulary padding rows (weights and moments; a checkpoint of a smaller t
  // lacks some) and the gradients. The rest keeps the device's fresh memory (NaN on the host
  // devices) until the load; the compute copy is the load's (RefreshComputeCopy).
  kLoadFollows,
  // A load of the weights alone follows (a Hugging Face folder, `ptdp train --init-from`): as
  // kLoadFollows, and Adam's moments zero everywhere (the folder has none). The loader writes
  // every element of the real vocabulary rows (LoadHfParams; one it missed stays NaN on the host
  // devices, which the first loss shows).
  kWeightsLoadFollows,
};

// A half-open range [begin, end) of elements of the flat arenas.
struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t count() const { return end - begin; }
  bool operator==(const ElementRange&) const = default;
};
// The elements in both (an empty range when none).
inline ElementRange Intersect(ElementRange a, ElementRange b) {
  const int64_t begin = a.begin > b.begin ? a.begin : b.begin;
  const int64_t end = a.end < b.end ? a.end : b.end;
  return begin < end ? ElementRange{begin, end} : ElementRange{begin, begin};
}

// The distributed optimizer's share of the optimizer state (core/ledger.h OptimizerShards): data
// rank `rank` of `count` keeps the state of arena elements [rank * S, (rank + 1) * S), S =
// ceil(elements / count), and the weight and gradient arenas are padded to count * S. With expert
// parallelism (layout.ep > 1) the experts are a region of their own after the dense parameters,
// sharded the same way over the expert data-parallel group: rank `expert_rank` of `expert_count`.
struct OptimizerShard {
  int count = 1;
  int rank = 0;
  int expert_count = 1;
  int expert_rank = 0;
};

// A region of the arenas whose optimizer state is sharded over one group: the dense parameters
// (all of them without expert parallelism), or the experts'. Its `elements` start at arena offset
// `begin` and are padded to count * shard; this rank keeps the state of shard `rank`, at
// `state_begin` in the state buffers.
struct StateRegion {
  int64_t begin = 0;
  int64_t elements = 0;
  int count = 1;
  int rank = 0;
  int64_t shard = 0;
  int64_t state_begin = 0;
  int64_t padded() const { return shard * count; }
  // Shard r's arena elements, padding included.
  ElementRange ShardOf(int r) const { return {begin + r * shard, begin + (r + 1) * shard}; }
  // The parameter elements whose state this rank keeps (padding excluded; may be empty).
  ElementRange owned() const {
    const int64_t b = rank * shard < elements ? rank * shard : elements;
    const int64_t e = (rank + 1) * shard < elements ? (rank + 1) * shard : elements;
    return {begin + b, begin + e};
  }
};

// The optimizer state of a parameter, in the checkpoint's order (runtime/checkpoint/pieces.h).
enum class StateKind { kMaster = 0, kAdamM = 1, kAdamV = 2 };

struct ParamEntry {
  ParamTensor spec;
  int chunk = 0;       // local model chunk
  int64_t offset = 0;  // in the arenas
};

class ParamStore {
 public:
  // Allocates the arenas for `compute` (fp32, bf16 or fp16) and initialises them as `init` says.
  // With shard.count > 1 (the distributed optimizer, over the data-parallel group) this rank keeps
  // the optimizer state of its shard alone: Adam's m and v, and in 16-bit training the fp32
  // master (in fp32 training the master is the weights, whole). A mixture of experts' store holds
  // expert-parallel rank ep_rank's experts (core/experts.h), each initialised as its global index;
  // with c.ep > 1 they follow the dense parameters in the arenas, a StateRegion of their own.
  static Result<ParamStore> Create(Device* dev, const ModelSpec& m, const ParallelConfig& c,
                                   int pp_rank, int tp_rank, DType compute,
                                   ParamInit init = ParamInit::kRandom, OptimizerShard shard = {},
                                   int ep_rank = 0);
  // The kRandom initialisation of every element (a kLoadFollows store whose load found nothing).
  Status InitialiseRandom(const ModelSpec& m) { return Initialise(m, ParamInit::kRandom); }
  const std::vector<ParamEntry>& entries() const { return entries_; }
  // Parameter elements. The arenas may be padded (the distributed optimizer), and with expert
  // parallelism the experts' region starts after the dense region's padding.
  int64_t size() const { return total_; }
  DType compute_dtype() const { return compute_; }
  // Index of `name` in `chunk`, or -1.
  int Find(int chunk, const std::string& name) const;
  // What the layers read: the compute copy, or the fp32 master in fp32 training. For i < 0 (Find
  // of a tensor the model lacks: a bias without linear_bias, RMSNorm's) both are empty views.
  ConstRef weight(int i) const;
  TensorRef grad(int i) { return i < 0 ? TensorRef{} : grads_.slice(entries_[i].offset, Count(i)); }
  // Entry i's state of one kind, whole: REQUIRES the kind is held whole (HoldsWhole) or was
  // gathered (GatherWhole).
  TensorRef whole(int i, StateKind k);
  TensorRef master(int i) { return whole(i, StateKind::kMaster); }
  TensorRef adam_m(int i) { return whole(i, StateKind::kAdamM); }
  TensorRef adam_v(int i) { return whole(i, StateKind::kAdamV); }
  // The compute copy of entry i (empty in fp32 training).
  TensorRef compute_copy(int i);
  // The whole gradient arena, padding included (what the data-parallel reduction reduces).
  TensorRef all_grads() { return grads_.ref(); }
  // Entry i's elements in the arenas, and views of arena ranges.
  ElementRange range(int i) const { return {entries_[i].offset, entries_[i].offset + Count(i)}; }
  TensorRef grads_of(ElementRange r) { return grads_.slice(r.begin, r.count()); }
  TensorRef compute_copy_of(ElementRange r) {
    return copy_.empty() ? TensorRef{} : copy_.slice(r.begin, r.count());
  }
  // The arena the layers read (the compute copy, or the fp32 master), padding included: what the
  // distributed optimizer's all-gather fills after the step.
  TensorRef all_weights() { return copy_.empty() ? master_.ref() : copy_.ref(); }
  Status ZeroGrads();
  // Casts the fp32 masters into the compute copy (after a load replaced them, through SetWhole).
  Status RefreshComputeCopy();
  // Entry i's fp32 master values, copied to the host (dumps and comparisons; not in the step).
  std::vector<float> HostMaster(int i);
  // Global element index of local element `i` of entry `e` on tensor rank `tp_rank` of `tp`.
  static int64_t GlobalIndex(const ParamTensor& p, int tp_rank, int64_t i);
  int tp_rank() const { return tp_rank_; }

  // The distributed optimizer's shard (docs/runtime.md "Distributed optimizer").
  bool sharded() const { return shard_.count > 1 || shard_.expert_count > 1; }
  const OptimizerShard& shard() const { return shard_; }
  // The dense region, then (layout.ep > 1) the experts'; one region without expert parallelism.
  const std::vector<StateRegion>& regions() const { return regions_; }
  // Each region's parameter elements whose state this rank keeps (every element when unsharded).
  std::vector<ElementRange> owned() const;
  // Whether kind k of every entry is on this rank (unsharded, or the fp32 training's master).
  bool HoldsWhole(StateKind k) const;
  // `r` (inside one region) cut at the shards' boundaries: each piece with the rank of the
  // region's group whose shard holds it.
  struct ShardPiece {
    ElementRange elements;
    int owner = 0;
  };
  std::vector<ShardPiece> ShardPieces(ElementRange r) const;
  // Kind k's state of the arena elements `r` (inside one region's owned(), or anywhere when held
  // whole).
  TensorRef state(StateKind k, ElementRange r);
  // Every rank's shard of kind k into the gradient arena (which holds no gradients between
  // steps), so that whole(i, k) reads it; EndGather zeroes the arena again. All members of `dp`
  // (the dense region's group) and `edp` (the experts', with layout.ep > 1) call it alike.
  // Nothing to do for a kind held whole.
  Status GatherWhole(StateKind k, Communicator* dp, Communicator* edp = nullptr);
  Status EndGather();
  // Entry i's values of kind k as this store holds them, into host[0, Count(i)): all of them for a
  // kind held whole or gathered, or a master a load is writing; else the owned part only (the
  // rest of `host` is left as it was).
  void ReadCurrent(int i, StateKind k, float* host);
  // Writes entry i's values of kind k from the host: the owned part of a sharded kind; a sharded
  // master is kept whole in the gradient arena as well, for RefreshComputeCopy (which the writer
  // calls after its last SetWhole, before any step).
  Status SetWhole(int i, StateKind k, const float* host);

 private:
  int64_t Count(int i) const { return entries_[i].spec.LocalElements(); }
  Status Initialise(const ModelSpec& m, ParamInit init);
  // Lays the entries out (the experts after the dense region's padding when `experts_apart`) and
  // sizes the regions.
  void LayOut(bool experts_apart);
  // The region whose padded range holds arena element `at`.
  const StateRegion& RegionOf(int64_t at) const;
  // Entry i's local rows from `first_row` on: its initial weights into `weights` (the entry's
  // slice of the master arena, or of the gradient arena for a sharded master), Adam's moments
  // zero when they are held whole.
  Status InitialiseRows(const ModelSpec& m, int i, int64_t first_row, Tensor& weights);
  Tensor& StateBuffer(StateKind k);
  Device* dev_ = nullptr;
  std::vector<ParamEntry> entries_;
  int64_t total_ = 0;
  int tp_rank_ = 0;
  DType compute_ = DType::kFp32;
  OptimizerShard shard_;
  std::vector<StateRegion> regions_;
  int64_t padded_total_ = 0;  // the arenas' elements
  int64_t state_total_ = 0;   // the state buffers' elements (the regions' shards)
  // The gradient arena holds a whole state kind (GatherWhole) or the whole masters a sharded
  // store's initialisation or load wrote (master_in_grads_), not gradients.
  int gathered_ = -1;
  bool master_in_grads_ = false;
  Tensor master_, copy_, grads_, m_, v_;
};

// The name whose generator initialises `name` (the tied copy uses the embedding's).
std::string InitKeyName(const std::string& name);
// The first local row of `p` (on tensor rank `tp_rank`) that is vocabulary padding (global row at
// or beyond `vocab`), or -1 when it holds none (every tensor but the word embedding, its tied copy
// and the output layer).
int64_t FirstPaddingRow(const ParamTensor& p, int tp_rank, int64_t vocab);

}  // namespace ptdp::runtime
