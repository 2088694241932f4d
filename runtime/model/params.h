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

struct ParamEntry {
  ParamTensor spec;
  int chunk = 0;       // local model chunk
  int64_t offset = 0;  // in the arenas
};

class ParamStore {
 public:
  // Allocates the arenas for `compute` (fp32, bf16 or fp16) and initialises them as `init` says.
  static Result<ParamStore> Create(Device* dev, const ModelSpec& m, const ParallelConfig& c,
                                   int pp_rank, int tp_rank, DType compute,
                                   ParamInit init = ParamInit::kRandom);
  // The kRandom initialisation of every element (a kLoadFollows store whose load found nothing).
  Status InitialiseRandom(const ModelSpec& m) { return Initialise(m, ParamInit::kRandom); }
  const std::vector<ParamEntry>& entries() const { return entries_; }
  int64_t size() const { return total_; }
  DType compute_dtype() const { return compute_; }
  // Index of `name` in `chunk`, or -1.
  int Find(int chunk, const std::string& name) const;
  // What the layers read: the compute copy, or the fp32 master in fp32 training.
  ConstRef weight(int i) const;
  TensorRef master(int i) { return master_.slice(entries_[i].offset, Count(i)); }
  TensorRef grad(int i) { return grads_.slice(entries_[i].offset, Count(i)); }
  TensorRef adam_m(int i) { return m_.slice(entries_[i].offset, Count(i)); }
  TensorRef adam_v(int i) { return v_.slice(entries_[i].offset, Count(i)); }
  // The compute copy of entry i (empty in fp32 training).
  TensorRef compute_copy(int i);
  TensorRef all_grads() { return grads_.ref(); }
  Status ZeroGrads();
  // Casts the fp32 masters into the compute copy (after a checkpoint replaced the masters).
  Status RefreshComputeCopy();
  // Entry i's fp32 master values, copied to the host (dumps and comparisons; not in the step).
  std::vector<float> HostMaster(int i);
  // Global element index of local element `i` of entry `e` on tensor rank `tp_rank` of `tp`.
  static int64_t GlobalIndex(const ParamTensor& p, int tp_rank, int64_t i);
  int tp_rank() const { return tp_rank_; }

 private:
  int64_t Count(int i) const { return entries_[i].spec.LocalElements(); }
  Status Initialise(const ModelSpec& m, ParamInit init);
  // Entry i's local rows from `first_row` on: its initial weights, Adam's moments zero.
  Status InitialiseRows(const ModelSpec& m, int i, int64_t first_row);
  Device* dev_ = nullptr;
  std::vector<ParamEntry> entries_;
  int64_t total_ = 0;
  int tp_rank_ = 0;
  DType compute_ = DType::kFp32;
  Tensor master_, copy_, grads_, m_, v_;
};

// The name whose generator initialises `name` (the tied copy uses the embedding's).
std::string InitKeyName(const std::string& name);
// The first local row of `p` (on tensor rank `tp_rank`) that is vocabulary padding (global row at
// or beyond `vocab`), or -1 when it holds none (every tensor but the word embedding, its tied copy
// and the output layer).
int64_t FirstPaddingRow(const ParamTensor& p, int tp_rank, int64_t vocab);

}  // namespace ptdp::runtime
