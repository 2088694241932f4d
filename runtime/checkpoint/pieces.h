// How a layout's parameters map onto checkpoint pieces and back: which rank writes which block of
// which global tensor (the save), and how one rank's local tensor is assembled from whatever
// blocks another layout wrote (the load, i.e. resharding). Layout-independent because every
// tensor is addressed by its global name and global element coordinates, the same addressing
// runtime/model/params.h's initialisation uses.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/shapes.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/checkpoint/store.h"

namespace ptdp::runtime {

// The three fp32 arrays saved per parameter: master weights, Adam m, Adam v; the key suffix of
// each in the safetensors files.
inline constexpr int kStateKinds = 3;
inline constexpr std::array<const char*, kStateKinds> kStateSuffix = {"", "#adam_m", "#adam_v"};

// The file pipeline rank `pp`, tensor rank `tp` of data rank `ep_rank` writes: data rank 0's, and
// with expert parallelism (layout.ep > 1) each other member of the first expert-parallel group's,
// "-epQ" added, which holds its experts alone.
std::string ShardFileName(int pp, int tp, int ep_rank = 0);
// Whether tensor rank `tp_rank` of expert-parallel rank `ep_rank` writes its piece of `p`: not the
// tied copy (it equals the embedding), a tensor replicated over the tensor ranks only from tensor
// rank 0, and on ep ranks other than 0 the experts alone (the dense tensors are ep rank 0's).
bool IsSavedBy(const ParamTensor& p, int tp_rank, int ep_rank = 0);
// Where tensor rank `tp_rank`'s block of `p` starts in the global tensor.
std::vector<int64_t> BlockOffset(const ParamTensor& p, int tp_rank);
// Adds the pieces that (pp, tp, ep_rank) writes to m->tensors (file ShardFileName(pp, tp,
// ep_rank)).
void AddPiecesOf(const ModelSpec& model, const ParallelConfig& c, int pp, int tp, Manifest* m,
                 int ep_rank = 0);

// The verified files of one checkpoint, mapped (and checksummed) on first use.
class ShardCache {
 public:
  ShardCache(std::string dir, const Manifest* m) : dir_(std::move(dir)), m_(m) {}
  struct Shard {
    std::unique_ptr<MappedFile> file;
    StHeader header;
  };
  Result<const Shard*> Get(const std::string& file);
  // Whether Get has read and verified `file`.
  bool Verified(const std::string& file) const { return shards_.count(file) > 0; }

 private:
  std::string dir_;
  const Manifest* m_;
  std::map<std::string, std::unique_ptr<Shard>> shards_;
};

// Fills out[k] (the local block of `p` on tensor rank `tp_rank`, kind k) from the checkpoint,
// reading only the files whose pieces overlap the block.
// Rows at or beyond `real_rows` (vocabulary padding, which depends on t) may be absent and are then
// left as they were; any other element not covered by a piece is an error.
Status AssembleLocal(const Manifest& m, ShardCache& cache, const ParamTensor& p, int tp_rank,
                     int64_t real_rows, std::array<std::vector<float>, kStateKinds>& out);

}  // namespace ptdp::runtime
