// The checkpoint folder on disk (docs/checkpoints.md): DIR/step-NNNNNNNN/{manifest.json,
// pp<P>-tp<T>.safetensors}. A save writes DIR/tmp-NNNNNNNN, fsyncs every file and the folder,
// renames it to step-NNNNNNNN and fsyncs DIR, so a crash at any point leaves either the complete
// new checkpoint or none (a tmp- folder, which the loader never reads); only then are old ones
// pruned. POSIX only: one host or a shared file system that honours rename and fsync.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/checkpoint/checksum.h"
#include "runtime/checkpoint/manifest.h"

namespace ptdp::runtime {

std::string StepDirName(int64_t step);  // "step-00000042"
std::string TmpDirName(int64_t step);   // "tmp-00000042"

// A file written sequentially, its size and checksum kept as it goes; Close fsyncs it.
class SyncedFile {
 public:
  SyncedFile() = default;
  SyncedFile(const SyncedFile&) = delete;
  SyncedFile& operator=(const SyncedFile&) = delete;
  ~SyncedFile();
  Status Open(const std::string& path);
  Status Write(const void* data, size_t n);
  Status Close();
  int64_t bytes() const { return bytes_; }
  ChecksumKind checksum_kind() const { return sum_.kind(); }
  uint64_t checksum() const { return sum_.value(); }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t bytes_ = 0;
  StreamChecksum sum_{ChecksumKind::kCrc32c};
};

// A checkpoint file mapped read-only (the page cache's pages themselves: no copy, no zeroed
// buffer), its size and checksum checked against the manifest.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
  const char* data() const { return static_cast<const char*>(addr_); }
  int64_t size() const { return size_; }

 private:
  friend Result<std::unique_ptr<MappedFile>> MapVerifiedFile(const std::string&, const CkptFile&);
  void* addr_ = nullptr;
  int64_t size_ = 0;
};

Status MakeDirs(const std::string& path);
Status FsyncDir(const std::string& path);
// Removes a folder and what it holds (no error when it does not exist).
Status RemoveTree(const std::string& path);

// The steps of DIR's step-NNNNNNNN folders (8 to 15 digits), newest first (tmp- and other names
// ignored).
Result<std::vector<int64_t>> ListCheckpointSteps(const std::string& dir);

// Reads and checks ckpt_dir/manifest.json.
Result<Manifest> ReadManifest(const std::string& ckpt_dir);
// ckpt_dir/f.name mapped whole, refused unless its size and checksum are the manifest's; errors
// name the file. The file must not change while mapped (published checkpoints never do).
Result<std::unique_ptr<MappedFile>> MapVerifiedFile(const std::string& ckpt_dir, const CkptFile& f);
// Whether ckpt_dir/f.name has the manifest's size and checksum, read in blocks.
Status VerifyFile(const std::string& ckpt_dir, const CkptFile& f);
// Whether every file of the manifest is there with its size and checksum (reads them all).
Status VerifyCheckpoint(const std::string& ckpt_dir, const Manifest& m);

// Whether `path` names one checkpoint (it holds manifest.json or is called step-...) rather than a
// folder of them.
bool IsCheckpointFolder(const std::string& path);
// The step of the newest checkpoint under `dir` that verifies; 0 when there is none and
// `allow_none`. Each one skipped is printed as "<who>: skipping <folder>: <reason>".
Result<int64_t> PickNewestCheckpoint(const std::string& dir, bool allow_none,
                                     const std::string& who);
// `path` itself when it is one checkpoint, else the newest valid one under it; verified either way.
Result<std::string> ResolveCheckpoint(const std::string& path, const std::string& who);

// Renames DIR/tmp-N to DIR/step-N (an existing step-N from an abandoned run is moved aside first
// and removed after), fsyncs DIR, then removes all but the newest `keep` step folders (never the
// one just written).
Status PublishCheckpoint(const std::string& dir, int64_t step, int keep);

}  // namespace ptdp::runtime
