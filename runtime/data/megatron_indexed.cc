#include "runtime/data/megatron_indexed.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "runtime/data/token_file.h"

namespace ptdp::runtime {
namespace {

constexpr unsigned char kIdxMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr int64_t kIdxHeaderBytes = 34;          // magic, version, dtype code, S, D
constexpr int64_t kIdxChunk = int64_t(1) << 16;  // sequences (or tokens) read at a time

struct IndexDtype {
  const char* name;
  int bytes;
  bool is_signed;
  bool is_float;
};
// Megatron-Core's DType codes, 1 to 8.
const IndexDtype* DtypeOfCode(int code) {
  static const IndexDtype kTable[] = {{"uint8", 1, false, false}, {"int8", 1, true, false},
                                      {"int16", 2, true, false},  {"int32", 4, true, false},
                                      {"int64", 8, true, false},  {"float64", 8, true, true},
                                      {"float32", 4, true, true}, {"uint16", 2, false, false}};
  return code >= 1 && code <= 8 ? &kTable[code - 1] : nullptr;
}

// A little-endian integer of n bytes, sign-extended when `is_signed`.
int64_t IdxLe(const unsigned char* p, int n, bool is_signed) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  if (is_signed && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~uint64_t(0) << (8 * n);
  return static_cast<int64_t>(v);
}

// A file read at byte offsets; errors name it.
class ReadOnlyFile {
 public:
  ReadOnlyFile() = default;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ~ReadOnlyFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Open(const std::string& path) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd_ < 0 || ::fstat(fd_, &st) != 0) {
      return Status::NotFound("'" + path + "' cannot be opened: " + std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) return Status::Invalid("'" + path + "' is not a regular file");
    size_ = st.st_size;
    return Status::Ok();
  }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  Status ReadAt(int64_t offset, int64_t n, void* dst) const {
    auto* out = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, out, size_t(n), off_t(offset));
      if (got < 0 && errno == EINTR) continue;  // a signal (Slurm's, for one) is not a failure
      if (got <= 0) {
        return Status::IoError("'" + path_ + "': read failed at byte " + std::to_string(offset));
      }
      out += got;
      offset += got;
      n -= got;
    }
    return Status::Ok();
  }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

// The index's header and the offsets of its three arrays.
struct IndexLayout {
  const IndexDtype* dtype = nullptr;
  int code = 0;
  int64_t sequences = 0, documents = 0;
  int64_t lengths_at = 0, pointers_at = 0, documents_at = 0;
};

Result<IndexLayout> ReadIndexHeader(const ReadOnlyFile& idx) {
  auto bad = [&](const std::string& field, const std::string& why) {
    return Status::Invalid(idx.path() + ": " + field + ": " + why);
  };
  if (idx.size() < kIdxHeaderBytes) {
    return bad("header",
               "the file has " + std::to_string(idx.size()) + " bytes, fewer than the header's 34");
  }
  unsigned char h[kIdxHeaderBytes];
  PTDP_RETURN_IF_ERROR(idx.ReadAt(0, kIdxHeaderBytes, h));
  if (std::memcmp(h, kIdxMagic, sizeof(kIdxMagic)) != 0) {
    return bad("header", "no MMIDIDX magic: not a Megatron-LM index file");
  }
  if (const int64_t version = IdxLe(h + 9, 8, false); version != 1) {
    return bad("version", std::to_string(version) + ", only version 1 is read");
  }
  IndexLayout l;
  l.code = h[17];
  l.dtype = DtypeOfCode(l.code);
  if (l.dtype == nullptr) return bad("dtype", "code " + std::to_string(l.code) + " is not 1 to 8");
  if (l.dtype->is_float) {
    return bad("dtype", std::string(l.dtype->name) + " (code " + std::to_string(l.code) +
                            ") holds no token ids");
  }
  const uint64_t s = uint64_t(IdxLe(h + 18, 8, false)), d = uint64_t(IdxLe(h + 26, 8, false));
  const uint64_t body = uint64_t(idx.size() - kIdxHeaderBytes);
  // Bounded by the file before any product: no overflow below.
  if (s > body / 12 || d > body / 8 || 12 * s + 8 * d > body) {
    return bad("sequence and document counts",
               std::to_string(s) + " sequences and " + std::to_string(d) + " documents need " +
                   "more than the " + std::to_string(body) + " bytes after the header");
  }
  if (12 * s + 8 * d + s == body && s > 0) {
    return bad("modes", "the index has a mode per sequence (a multimodal dataset), not read");
  }
  if (12 * s + 8 * d != body) {
    return bad("size", std::to_string(body) + " bytes after the header, " + std::to_string(s) +
                           " sequences and " + std::to_string(d) + " documents take " +
                           std::to_string(12 * s + 8 * d));
  }
  if (d < 1) return bad("document_indices", "empty (it starts with 0)");
  l.sequences = int64_t(s);
  l.documents = int64_t(d);
  l.lengths_at = kIdxHeaderBytes;
  l.pointers_at = l.lengths_at + 4 * l.sequences;
  l.documents_at = l.pointers_at + 8 * l.sequences;
  return l;
}

// document_indices: 0 first, non-decreasing, the sequence count last.
Status CheckDocuments(const ReadOnlyFile& idx, const IndexLayout& l) {
  std::vector<unsigned char> buf;
  int64_t prev = 0;
  for (int64_t i = 0; i < l.documents; i += kIdxChunk) {
    const int64_t n = std::min(kIdxChunk, l.documents - i);
    buf.resize(size_t(8 * n));
    PTDP_RETURN_IF_ERROR(idx.ReadAt(l.documents_at + 8 * i, 8 * n, buf.data()));
    for (int64_t k = 0; k < n; ++k) {
      const int64_t v = IdxLe(&buf[size_t(8 * k)], 8, true);
      const bool ok = (i + k == 0) ? v == 0 : v >= prev;
      if (!ok || v > l.sequences) {
        return Status::Invalid(idx.path() + ": document_indices[" + std::to_string(i + k) +
                               "]: " + std::to_string(v) +
                               " (they run from 0 up to the sequence count, never down)");
      }
      prev = v;
    }
  }
  if (prev != l.sequences) {
    return Status::Invalid(idx.path() + ": document_indices: the last is " + std::to_string(prev) +
                           ", not the sequence count " + std::to_string(l.sequences));
  }
  return Status::Ok();
}

// Calls visit(sequence, byte offset in .bin, tokens) for every sequence in order, each checked to
// lie inside `bin_bytes`.
template <typename Visit>
Status ForEachSequence(const ReadOnlyFile& idx, const IndexLayout& l, int64_t bin_bytes,
                       Visit&& visit) {
  std::vector<unsigned char> lens, ptrs;
  const int64_t item = l.dtype->bytes;
  for (int64_t i = 0; i < l.sequences; i += kIdxChunk) {
    const int64_t n = std::min(kIdxChunk, l.sequences - i);
    lens.resize(size_t(4 * n));
    ptrs.resize(size_t(8 * n));
    PTDP_RETURN_IF_ERROR(idx.ReadAt(l.lengths_at + 4 * i, 4 * n, lens.data()));
    PTDP_RETURN_IF_ERROR(idx.ReadAt(l.pointers_at + 8 * i, 8 * n, ptrs.data()));
    for (int64_t k = 0; k < n; ++k) {
      const int64_t len = IdxLe(&lens[size_t(4 * k)], 4, true);
      const int64_t at = IdxLe(&ptrs[size_t(8 * k)], 8, true);
      if (len < 0 || at < 0 || at > bin_bytes || len > (bin_bytes - at) / item) {
        return Status::Invalid(idx.path() + ": sequence " + std::to_string(i + k) + ": " +
                               std::to_string(len) + " tokens at byte " + std::to_string(at) +
                               " do not lie inside the .bin's " + std::to_string(bin_bytes) +
                               " bytes");
      }
      PTDP_RETURN_IF_ERROR(visit(i + k, at, len));
    }
  }
  return Status::Ok();
}

template <typename T>
void AppendLe(std::string& s, T v) {
  for (size_t i = 0; i < sizeof(T); ++i)
    s.push_back(static_cast<char>((uint64_t(v) >> (8 * i)) & 0xff));
}

// The output under a temporary name, renamed into place by Commit; removed if never committed.
class AtomicOut {
 public:
  explicit AtomicOut(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {}
  ~AtomicOut() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  Status Open() {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0)
      return Status::IoError("'" + tmp_ + "' cannot be created: " + std::strerror(errno));
    return Status::Ok();
  }
  Status Write(const std::string& s) {
    size_t done = 0;
    while (done < s.size()) {
      const ssize_t w = ::write(fd_, s.data() + done, s.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return Status::IoError("'" + tmp_ + "': write failed: " + std::strerror(errno));
      done += size_t(w);
    }
    return Status::Ok();
  }
  Status Commit() {
    if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
      fd_ = -1;
      return Status::IoError("'" + tmp_ + "': fsync failed: " + std::strerror(errno));
    }
    fd_ = -1;
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      return Status::IoError("'" + path_ + "' cannot be written: " + std::strerror(errno));
    }
    committed_ = true;
    return Status::Ok();
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

Result<MegatronConversion> ConvertMegatronDataset(const std::string& prefix,
                                                  const std::string& out) {
  ReadOnlyFile idx, bin;
  PTDP_RETURN_IF_ERROR(idx.Open(prefix + ".idx"));
  PTDP_RETURN_IF_ERROR(bin.Open(prefix + ".bin"));
  PTDP_ASSIGN_OR_RETURN(const IndexLayout l, ReadIndexHeader(idx));
  PTDP_RETURN_IF_ERROR(CheckDocuments(idx, l));
  MegatronConversion c;
  c.dtype_code = l.code;
  c.sequences = l.sequences;
  c.documents = l.documents - 1;
  c.token_bytes = l.dtype->bytes <= 2 ? 2 : 4;
  // Pass 1: the count (the token file's header comes first) and every sequence's bounds.
  PTDP_RETURN_IF_ERROR(ForEachSequence(idx, l, bin.size(), [&](int64_t, int64_t, int64_t len) {
    c.tokens += len;  // each inside the .bin: the sum is at most its size
    return Status::Ok();
  }));
  if (c.tokens == 0) return Status::Invalid(bin.path() + ": the dataset holds no token");
  AtomicOut file(out);
  PTDP_RETURN_IF_ERROR(file.Open());
  std::string buf(kTokenMagic, sizeof(kTokenMagic));
  AppendLe<uint32_t>(buf, kTokenVersion);
  AppendLe<uint32_t>(buf, uint32_t(c.token_bytes));
  AppendLe<uint64_t>(buf, uint64_t(c.tokens));
  // Pass 2: the tokens, sequence after sequence, a chunk at a time.
  const IndexDtype& dt = *l.dtype;
  std::vector<unsigned char> raw;
  PTDP_RETURN_IF_ERROR(
      ForEachSequence(idx, l, bin.size(), [&](int64_t seq, int64_t at, int64_t len) -> Status {
        for (int64_t t0 = 0; t0 < len; t0 += kIdxChunk) {
          const int64_t n = std::min(kIdxChunk, len - t0);
          raw.resize(size_t(n * dt.bytes));
          PTDP_RETURN_IF_ERROR(bin.ReadAt(at + t0 * dt.bytes, n * dt.bytes, raw.data()));
          for (int64_t k = 0; k < n; ++k) {
            const int64_t v = IdxLe(&raw[size_t(k * dt.bytes)], dt.bytes, dt.is_signed);
            if (v < 0 || v > int64_t(UINT32_MAX)) {
              return Status::Invalid(bin.path() + ": sequence " + std::to_string(seq) + ", token " +
                                     std::to_string(t0 + k) + ": " + std::to_string(v) +
                                     " is not a token id (0 to 2^32 - 1)");
            }
            if (c.token_bytes == 2) {
              AppendLe<uint16_t>(buf, uint16_t(v));
            } else {
              AppendLe<uint32_t>(buf, uint32_t(v));
            }
          }
          if (buf.size() >= (size_t(1) << 22)) {
            PTDP_RETURN_IF_ERROR(file.Write(buf));
            buf.clear();
          }
        }
        return Status::Ok();
      }));
  PTDP_RETURN_IF_ERROR(file.Write(buf));
  PTDP_RETURN_IF_ERROR(file.Commit());
  return c;
}

Result<TokenFile> OpenMegatronTokens(const std::string& prefix, int64_t vocab) {
  ReadOnlyFile idx, bin;
  PTDP_RETURN_IF_ERROR(idx.Open(prefix + ".idx"));
  PTDP_RETURN_IF_ERROR(bin.Open(prefix + ".bin"));
  PTDP_ASSIGN_OR_RETURN(const IndexLayout l, ReadIndexHeader(idx));
  PTDP_RETURN_IF_ERROR(CheckDocuments(idx, l));
  // Read in place only when the sequences lie back to back from byte 0, in order: then the .bin's
  // first `tokens` items are the stream the conversion would write.
  int64_t tokens = 0;
  const int64_t item = l.dtype->bytes;
  PTDP_RETURN_IF_ERROR(
      ForEachSequence(idx, l, bin.size(), [&](int64_t seq, int64_t at, int64_t len) -> Status {
        if (at != tokens * item) {
          return Status::Invalid(idx.path() + ": sequence " + std::to_string(seq) +
                                 " starts at byte " + std::to_string(at) + ", not " +
                                 std::to_string(tokens * item) +
                                 ": its sequences are not back to back in the .bin, so it is "
                                 "not read in place (convert it: ptdp tokenize --megatron)");
        }
        tokens += len;
        return Status::Ok();
      }));
  if (tokens == 0) return Status::Invalid(bin.path() + ": the dataset holds no token");
  return TokenFile::FromStream(bin.path(), 0, tokens, int(item), l.dtype->is_signed, vocab);
}

}  // namespace ptdp::runtime
