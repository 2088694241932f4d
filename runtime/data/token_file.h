// Token files and deterministic batch sampling.
//
// Format (little-endian), docs/runtime.md:
//   offset 0   8 bytes  magic "PTDPTOK\0"
//   offset 8   uint32   version (1)
//   offset 12  uint32   bytes per token: 2 (uint16) or 4 (uint32)
//   offset 16  uint64   token count
//   offset 24  count tokens
// A file whose size differs from 24 + count * bytes is truncated (or corrupt) and is rejected.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace ptdp::runtime {

inline constexpr char kTokenMagic[8] = {'P', 'T', 'D', 'P', 'T', 'O', 'K', '\0'};
inline constexpr uint32_t kTokenVersion = 1;
inline constexpr int64_t kTokenHeaderBytes = 24;

// Writes tokens (uint16 when every token < 65536, else uint32) atomically.
Status WriteTokenFile(const std::string& path, const std::vector<uint32_t>& tokens);
// Byte-level tokenization: one token per byte (vocabulary 256).
std::vector<uint32_t> ByteTokenize(const std::string& text);

// An open token file: the header is read and checked on Open; tokens are read on demand, so each
// data-parallel rank reads only the sequences of its share of the batch.
class TokenFile {
 public:
  // Checks magic, version, dtype and that the size matches the count. When `vocab` > 0 every
  // token is also scanned and one >= vocab is an error naming its index.
  static Result<TokenFile> Open(const std::string& path, int64_t vocab);
  // Tokens stored without ptdp's header (Megatron-LM's PREFIX.bin: megatron_indexed.h): `count`
  // tokens of `bytes` (1, 2, 4 or 8; signed or not) little-endian from byte `header_bytes`, the
  // caller having checked that the file holds them. The vocabulary check as Open's.
  static Result<TokenFile> FromStream(const std::string& path, int64_t header_bytes, int64_t count,
                                      int bytes, bool is_signed, int64_t vocab);
  int64_t count() const { return count_; }
  int bytes_per_token() const { return bytes_; }
  // Reads tokens [begin, begin + n) as int32.
  Status Read(int64_t begin, int64_t n, int32_t* out) const;

 private:
  std::string path_;
  int64_t header_ = kTokenHeaderBytes;
  int64_t count_ = 0;
  int bytes_ = 2;
  bool signed_ = false;
};

// Deterministic sampling: sequence `global_seq` (0 .. B-1) of iteration `step` starts at a
// position drawn from a counter-based hash of (seed, step * B + global_seq), uniform over
// [0, count - seq_len - 1]; it holds seq_len + 1 tokens (inputs and the shifted targets).
// Every layout draws the same global batch; data-parallel rank d reads sequences
// [d B/dp, (d+1) B/dp).
int64_t SequenceStart(uint64_t seed, int64_t step, int64_t global_batch, int64_t global_seq,
                      int64_t token_count, int64_t seq_len);

// Unigram entropy of the tokens in nats per token (the loss's unit), for the demo.
double UnigramEntropyNats(const std::vector<uint32_t>& tokens);

}  // namespace ptdp::runtime
