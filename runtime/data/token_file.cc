#include "runtime/data/token_file.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/json.h"

namespace ptdp::runtime {
namespace {

template <typename T>
void PutLe(std::string& s, T v) {
  for (size_t i = 0; i < sizeof(T); ++i)
    s.push_back(static_cast<char>((uint64_t(v) >> (8 * i)) & 0xff));
}
uint64_t GetLe(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::vector<uint32_t> ByteTokenize(const std::string& text) {
  std::vector<uint32_t> t(text.size());
  for (size_t i = 0; i < text.size(); ++i) t[i] = static_cast<unsigned char>(text[i]);
  return t;
}

Status WriteTokenFile(const std::string& path, const std::vector<uint32_t>& tokens) {
  uint32_t max_token = 0;
  for (uint32_t t : tokens) max_token = std::max(max_token, t);
  const uint32_t bytes = max_token < 65536 ? 2 : 4;
  std::string s(kTokenMagic, sizeof(kTokenMagic));
  PutLe<uint32_t>(s, kTokenVersion);
  PutLe<uint32_t>(s, bytes);
  PutLe<uint64_t>(s, tokens.size());
  s.reserve(s.size() + tokens.size() * bytes);
  for (uint32_t t : tokens) {
    if (bytes == 2) {
      PutLe<uint16_t>(s, static_cast<uint16_t>(t));
    } else {
      PutLe<uint32_t>(s, t);
    }
  }
  return WriteFileAtomic(path, s);
}

Result<TokenFile> TokenFile::Open(const std::string& path, int64_t vocab) {
  // A directory "opens" as an ifstream on Linux and then reads nothing; refuse it (and FIFOs,
  // devices) by name rather than report a misleading "bad magic".
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) {
    return Status::NotFound("data file '" + path + "' cannot be opened");
  }
  if (!std::filesystem::is_regular_file(st)) {
    return Status::Invalid("data file '" + path + "' is not a regular file");
  }
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return Status::NotFound("data file '" + path + "' cannot be opened");
  const int64_t size = static_cast<int64_t>(f.tellg());
  if (size < 0) return Status::IoError("data file '" + path + "': cannot determine its size");
  if (size < kTokenHeaderBytes) {
    return Status::IoError("data file '" + path + "' is truncated: " + std::to_string(size) +
                           " bytes, shorter than the 24-byte header");
  }
  unsigned char h[kTokenHeaderBytes];
  f.seekg(0);
  f.read(reinterpret_cast<char*>(h), kTokenHeaderBytes);
  if (!f || f.gcount() != kTokenHeaderBytes) {
    return Status::IoError("data file '" + path + "': cannot read the 24-byte header");
  }
  if (std::memcmp(h, kTokenMagic, sizeof(kTokenMagic)) != 0) {
    return Status::Invalid("data file '" + path + "': bad magic (not a ptdp token file)");
  }
  const uint64_t version = GetLe(h + 8, 4), bytes = GetLe(h + 12, 4), count = GetLe(h + 16, 8);
  if (version != kTokenVersion) {
    return Status::Invalid("data file '" + path + "': version " + std::to_string(version) +
                           " unsupported (expected 1)");
  }
  if (bytes != 2 && bytes != 4) {
    return Status::Invalid("data file '" + path + "': dtype " + std::to_string(bytes) +
                           " bytes per token unsupported (expected 2 or 4)");
  }
  // Compare in the payload's terms, with no multiplication that can wrap: a header claiming
  // 2^62 tokens must fail here, not pass a wrapped size and fail later as a short read.
  const uint64_t payload = static_cast<uint64_t>(size - kTokenHeaderBytes);
  if (payload % bytes != 0 || count != payload / bytes) {
    const std::string want = count <= (uint64_t(INT64_MAX) - kTokenHeaderBytes) / bytes
                                 ? std::to_string(kTokenHeaderBytes + count * bytes) + " bytes"
                                 : "more than 2^63 bytes";
    return Status::IoError("data file '" + path + "' is truncated or corrupt: header says " +
                           std::to_string(count) + " tokens (" + want + ") but the file has " +
                           std::to_string(size) + " bytes");
  }
  return FromStream(path, kTokenHeaderBytes, static_cast<int64_t>(count), static_cast<int>(bytes),
                    false, vocab);
}

Result<TokenFile> TokenFile::FromStream(const std::string& path, int64_t header_bytes,
                                        int64_t count, int bytes, bool is_signed, int64_t vocab) {
  TokenFile tf;
  tf.path_ = path;
  tf.header_ = header_bytes;
  tf.count_ = count;
  tf.bytes_ = bytes;
  tf.signed_ = is_signed;
  if (vocab > 0) {
    constexpr int64_t kChunk = 1 << 16;
    std::vector<int32_t> buf(kChunk);
    for (int64_t at = 0; at < tf.count_; at += kChunk) {
      const int64_t n = std::min(kChunk, tf.count_ - at);
      PTDP_RETURN_IF_ERROR(tf.Read(at, n, buf.data()));
      for (int64_t i = 0; i < n; ++i) {
        if (buf[i] < 0 || buf[i] >= vocab) {
          return Status::Invalid("data file '" + path + "': token " + std::to_string(at + i) +
                                 " is " + std::to_string(uint32_t(buf[i])) +
                                 ", beyond the model's vocabulary of " + std::to_string(vocab));
        }
      }
    }
  }
  return tf;
}

Status TokenFile::Read(int64_t begin, int64_t n, int32_t* out) const {
  if (begin < 0 || n < 0 || begin + n > count_) {
    return Status::Internal("token read [" + std::to_string(begin) + ", +" + std::to_string(n) +
                            ") outside the file's " + std::to_string(count_) + " tokens");
  }
  std::ifstream f(path_, std::ios::binary);
  if (!f) return Status::IoError("data file '" + path_ + "' cannot be reopened");
  f.seekg(header_ + begin * bytes_);
  std::vector<unsigned char> raw(static_cast<size_t>(n * bytes_));
  f.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
  if (!f || f.gcount() != static_cast<std::streamsize>(raw.size()))
    return Status::IoError("data file '" + path_ + "': short read");
  for (int64_t i = 0; i < n; ++i) {
    uint64_t v = GetLe(raw.data() + i * bytes_, bytes_);
    if (signed_ && bytes_ < 8 && (v >> (8 * bytes_ - 1)) != 0) v |= ~uint64_t(0) << (8 * bytes_);
    const auto token = static_cast<int64_t>(v);
    // A token id is below 2^31 (int32 here): a wider or negative value is no token, whatever the
    // vocabulary (a 4-byte unsigned one above it shows as negative to the vocabulary check).
    if (bytes_ == 8 && (token < 0 || token > INT32_MAX)) {
      return Status::Invalid("data file '" + path_ + "': token " + std::to_string(begin + i) +
                             " is " + std::to_string(token) + ", not a token id");
    }
    out[i] = static_cast<int32_t>(token);
  }
  return Status::Ok();
}

int64_t SequenceStart(uint64_t seed, int64_t step, int64_t global_batch, int64_t global_seq,
                      int64_t token_count, int64_t seq_len) {
  // SplitMix64 finaliser over the counter: stateless and identical on every rank.
  uint64_t z = seed * 0x9E3779B97F4A7C15ULL + uint64_t(step * global_batch + global_seq) + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  const uint64_t range = static_cast<uint64_t>(token_count - seq_len);  // starts 0 .. count-s-1
  return static_cast<int64_t>(z % range);
}

double UnigramEntropyNats(const std::vector<uint32_t>& tokens) {
  std::map<uint32_t, int64_t> n;
  for (uint32_t t : tokens) ++n[t];
  double h = 0;
  const double total = static_cast<double>(tokens.size());
  for (const auto& [t, c] : n) {
    const double p = c / total;
    h -= p * std::log(p);
  }
  return h;
}

}  // namespace ptdp::runtime
