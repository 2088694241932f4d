#include "runtime/checkpoint/store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "runtime/checkpoint/safetensors.h"

namespace ptdp::runtime {
namespace fs = std::filesystem;
namespace {

std::string Errno() {
  return std::strerror(errno);
}

std::string Numbered(const char* prefix, int64_t step) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s-%08lld", prefix, static_cast<long long>(step));
  return buf;
}

}  // namespace

std::string StepDirName(int64_t step) {
  return Numbered("step", step);
}
std::string TmpDirName(int64_t step) {
  return Numbered("tmp", step);
}

SyncedFile::~SyncedFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status SyncedFile::Open(const std::string& path) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return Status::IoError(path + ": cannot create: " + Errno());
  bytes_ = 0;
  sum_ = StreamChecksum(ChecksumKind::kCrc32c);
  return Status::Ok();
}

Status SyncedFile::Write(const void* data, size_t n) {
  // In blocks that stay in cache between the checksum and the write: memory is read once.
  constexpr size_t kBlock = size_t(1) << 20;
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t block = std::min(n, kBlock);
    sum_.Update(p, block);
    size_t left = block;
    while (left > 0) {
      const ssize_t w = ::write(fd_, p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return Status::IoError(path_ + ": write failed: " + Errno());
      p += w;
      left -= static_cast<size_t>(w);
      bytes_ += w;
    }
    n -= block;
  }
  return Status::Ok();
}

Status SyncedFile::Close() {
  if (::fsync(fd_) != 0) return Status::IoError(path_ + ": fsync failed: " + Errno());
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Status::IoError(path_ + ": close failed: " + Errno());
  return Status::Ok();
}

Status MakeDirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return Status::IoError(path + ": cannot create folder: " + ec.message());
  return Status::Ok();
}

Status FsyncDir(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::IoError(path + ": cannot open folder: " + Errno());
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Status::IoError(path + ": fsync failed: " + Errno());
  return Status::Ok();
}

Status RemoveTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) return Status::IoError(path + ": cannot remove: " + ec.message());
  return Status::Ok();
}

Result<std::vector<int64_t>> ListCheckpointSteps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return Status::NotFound(dir + ": cannot list: " + ec.message());
  for (const auto& e : it) {
    const std::string n = e.path().filename().string();
    // At least 8 digits (StepDirName pads to 8; later steps take more), at most 15 (step < 2^50).
    if (n.size() < 13 || n.size() > 20 || n.compare(0, 5, "step-") != 0) continue;
    if (!std::all_of(n.begin() + 5, n.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    steps.push_back(std::stoll(n.substr(5)));
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

Result<Manifest> ReadManifest(const std::string& ckpt_dir) {
  const std::string path = ckpt_dir + "/manifest.json";
  PTDP_ASSIGN_OR_RETURN(Json j, ReadJsonFile(path, kMaxManifestBytes));
  return ManifestFromJson(j, path);
}

namespace {

// A regular file of the manifest's size opened for reading; the fd is the caller's to close.
Result<int> OpenChecked(const std::string& path, const CkptFile& f) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::NotFound(path + ": missing (" + Errno() + ")");
  if (!S_ISREG(st.st_mode)) return Status::Invalid(path + ": not a regular file");
  if (st.st_size != f.bytes) {
    return Status::Invalid(path + ": " + std::to_string(st.st_size) + " bytes, the manifest says " +
                           std::to_string(f.bytes) + " (truncated or replaced)");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError(path + ": cannot open: " + Errno());
  return fd;
}

Status CheckSum(const std::string& path, const CkptFile& f, const StreamChecksum& sum) {
  if (sum.value() == f.checksum) return Status::Ok();
  const char* kind = ChecksumKeyName(f.checksum_kind);
  return Status::Invalid(path + ": checksum mismatch (" + kind + " " +
                         ChecksumHex(f.checksum_kind, sum.value()) + ", the manifest says " +
                         ChecksumHex(f.checksum_kind, f.checksum) + "): the file is corrupt");
}

}  // namespace

MappedFile::~MappedFile() {
  if (addr_ != nullptr) ::munmap(addr_, static_cast<size_t>(size_));
}

Result<std::unique_ptr<MappedFile>> MapVerifiedFile(const std::string& ckpt_dir,
                                                    const CkptFile& f) {
  const std::string path = ckpt_dir + "/" + f.name;
  PTDP_ASSIGN_OR_RETURN(const int fd, OpenChecked(path, f));
  auto m = std::make_unique<MappedFile>();
  m->size_ = f.bytes;
  if (f.bytes > 0) {
    int flags = MAP_PRIVATE;
#ifdef MAP_POPULATE
    flags |= MAP_POPULATE;  // the pages in one call rather than one fault per page
#endif
    void* addr = ::mmap(nullptr, static_cast<size_t>(f.bytes), PROT_READ, flags, fd, 0);
    if (addr == MAP_FAILED) {
      const std::string why = Errno();
      ::close(fd);
      return Status::IoError(path + ": cannot map: " + why);
    }
    m->addr_ = addr;
  }
  ::close(fd);
  StreamChecksum sum(f.checksum_kind);
  sum.Update(m->data(), static_cast<size_t>(m->size()));
  PTDP_RETURN_IF_ERROR(CheckSum(path, f, sum));
  return m;
}

Status VerifyFile(const std::string& ckpt_dir, const CkptFile& f) {
  const std::string path = ckpt_dir + "/" + f.name;
  PTDP_ASSIGN_OR_RETURN(const int fd, OpenChecked(path, f));
  // One block reused, small enough to stay in cache between the read and the checksum.
  std::vector<char> block(size_t(4) << 20);
  StreamChecksum sum(f.checksum_kind);
  int64_t at = 0;
  while (at < f.bytes) {
    const ssize_t r =
        ::read(fd, block.data(), static_cast<size_t>(std::min<int64_t>(f.bytes - at, 4 << 20)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ::close(fd);
      return Status::IoError(path + ": read failed at byte " + std::to_string(at));
    }
    sum.Update(block.data(), static_cast<size_t>(r));
    at += r;
  }
  ::close(fd);
  return CheckSum(path, f, sum);
}

Status VerifyCheckpoint(const std::string& ckpt_dir, const Manifest& m) {
  for (const auto& f : m.files) PTDP_RETURN_IF_ERROR(VerifyFile(ckpt_dir, f));
  return Status::Ok();
}

bool IsCheckpointFolder(const std::string& path) {
  std::error_code ec;
  const std::string base = fs::path(path).lexically_normal().filename().string();
  return fs::exists(path + "/manifest.json", ec) || base.rfind("step-", 0) == 0;
}

Result<int64_t> PickNewestCheckpoint(const std::string& dir, bool allow_none,
                                     const std::string& who) {
  auto steps = ListCheckpointSteps(dir);
  if (!steps.ok() || steps->empty()) {
    if (allow_none) return int64_t(0);
    return Status::NotFound("no checkpoint under '" + dir + "'");
  }
  std::string why;
  for (int64_t s : *steps) {
    const std::string ckpt = dir + "/" + StepDirName(s);
    auto m = ReadManifest(ckpt);
    Status v = m.ok() ? VerifyCheckpoint(ckpt, *m) : m.status();
    if (v.ok()) return s;
    std::printf("%s: skipping %s: %s\n", who.c_str(), ckpt.c_str(), v.message().c_str());
    if (why.empty()) why = v.message();
  }
  return Status::Invalid("no valid checkpoint under '" + dir + "' (newest: " + why + ")");
}

Result<std::string> ResolveCheckpoint(const std::string& path, const std::string& who) {
  if (IsCheckpointFolder(path)) {
    PTDP_ASSIGN_OR_RETURN(Manifest m, ReadManifest(path));
    PTDP_RETURN_IF_ERROR(VerifyCheckpoint(path, m));
    return path;
  }
  PTDP_ASSIGN_OR_RETURN(int64_t step, PickNewestCheckpoint(path, false, who));
  return path + "/" + StepDirName(step);
}

Status PublishCheckpoint(const std::string& dir, int64_t step, int keep) {
  const std::string tmp = dir + "/" + TmpDirName(step), dst = dir + "/" + StepDirName(step);
  const std::string aside = dir + "/replaced-" + StepDirName(step);
  std::error_code ec;
  const bool existed = fs::exists(dst, ec);
  if (existed) {
    PTDP_RETURN_IF_ERROR(RemoveTree(aside));
    fs::rename(dst, aside, ec);
    if (ec) return Status::IoError(dst + ": cannot move aside: " + ec.message());
  }
  fs::rename(tmp, dst, ec);
  if (ec) return Status::IoError(tmp + ": cannot rename to " + dst + ": " + ec.message());
  PTDP_RETURN_IF_ERROR(FsyncDir(dir));
  if (existed) PTDP_RETURN_IF_ERROR(RemoveTree(aside));
  PTDP_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListCheckpointSteps(dir));
  int kept = 1;  // the one just written
  for (int64_t s : steps) {
    if (s == step) continue;
    if (kept < keep) {
      ++kept;
      continue;
    }
    PTDP_RETURN_IF_ERROR(RemoveTree(dir + "/" + StepDirName(s)));
  }
  return FsyncDir(dir);
}

}  // namespace ptdp::runtime
