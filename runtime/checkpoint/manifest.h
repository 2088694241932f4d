// The checkpoint manifest (DIR/step-NNNNNNNN/manifest.json, docs/checkpoints.md): what was saved,
// from which model and layout, where the token stream and the optimizer stand, and an index from
// every global tensor to the pieces of it the files hold. Read as untrusted input: core/json.h's
// bounded parser, every key checked, every size range- and overflow-checked.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/model.h"
#include "core/parallel.h"
#include "runtime/checkpoint/checksum.h"
#include "runtime/optim/optimizer.h"

namespace ptdp::runtime {

inline constexpr int kCheckpointVersion = 1;
inline constexpr char kCheckpointFormat[] = "ptdp-checkpoint";
inline constexpr int64_t kMaxManifestBytes = int64_t(64) << 20;

// One file of the checkpoint with its size and checksum (checksum.h): CRC32C under the key
// "crc32c" (8 hex digits) since 2026-11-27, FNV-1a 64 under "fnv1a64" (16) before; both are read.
struct CkptFile {
  std::string name;  // relative to the checkpoint folder, no '/'
  int64_t bytes = 0;
  ChecksumKind checksum_kind = ChecksumKind::kCrc32c;
  uint64_t checksum = 0;
};

// A block of a global tensor held by one file: rows/cols starting at `offset` (1-D tensors have
// one dimension). In the file its parameter values are under the tensor's name, its Adam moments
// under "<name>#adam_m" and "<name>#adam_v", each of shape `shape`.
struct CkptPiece {
  std::string file;
  std::vector<int64_t> offset, shape;
};

struct CkptTensor {
  std::vector<int64_t> shape;  // global shape in the writing layout (vocabulary rows padded)
  std::vector<CkptPiece> pieces;
};

struct Manifest {
  int version = kCheckpointVersion;
  int64_t step = 0;  // iterations completed; training resumes at step + 1
  ModelSpec model;
  ParallelConfig layout;  // the writer's (for information: any layout may load it)
  // The token stream: iteration k's batch is a function of (seed, k, global_batch) and the
  // training data (runtime/data/token_set.h), checked on resume by its token count (all its
  // parts'; a blend's weights are not recorded); dropout masks depend on (k, sequence) only.
  uint64_t data_seed = 0;
  int64_t token_count = 0;
  // The training data's parts and weights (TokenSet::Signature); empty in checkpoints written
  // before 2026-11-30, which recorded the token count alone.
  std::string data_parts;
  OptimizerConfig optim;
  int64_t adam_steps = 0;  // steps Adam has taken (bias correction): step - skipped
  // fp16 dynamic loss scaling (runtime/optim/loss_scaler.h).
  double loss_scale = 1;
  int64_t clean_steps = 0;
  int64_t skipped_steps = 0;
  std::vector<CkptFile> files;
  std::map<std::string, CkptTensor> tensors;
  // The routers' expert biases (model.moe_router_expert_bias): global mixture layer -> its E
  // values (fp32 values, exact as JSON doubles). Every mixture layer's with the bias, none
  // without; replicated on every rank of a stage, so no pieces.
  std::map<int, std::vector<double>> router_expert_bias;
};

OrderedJson ManifestToJson(const Manifest& m);
// `source` names the manifest file in errors.
Result<Manifest> ManifestFromJson(const Json& j, const std::string& source);

}  // namespace ptdp::runtime
