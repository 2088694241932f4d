// The checksums of checkpoint files (docs/checkpoints.md). New checkpoints use CRC32C (the
// Castagnoli polynomial), which x86-64 CPUs with SSE4.2 compute with one instruction per 8 bytes
// (several GB/s, so a save or a load is no longer bound by it); other CPUs use a table-driven
// fallback that gives the same values. Checkpoints written before it carry FNV-1a 64 (one byte per
// multiply, about 1 GB/s), still read and verified.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ptdp::runtime {

// Which checksum a manifest's file entry carries: its JSON key is the name.
enum class ChecksumKind { kFnv1a64, kCrc32c };
// Inline, as the manifest parser's fuzzer links no more than it needs.
inline const char* ChecksumKeyName(ChecksumKind k) {
  return k == ChecksumKind::kCrc32c ? "crc32c" : "fnv1a64";
}
inline size_t ChecksumHexDigits(ChecksumKind k) {
  return k == ChecksumKind::kCrc32c ? 8 : 16;
}
inline std::string ChecksumHex(ChecksumKind k, uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%0*llx", int(ChecksumHexDigits(k)),
                static_cast<unsigned long long>(v));
  return buf;
}

// FNV-1a, 64 bits, of `n` more bytes after state `h` (start from kFnv1a64Init).
inline constexpr uint64_t kFnv1a64Init = 0xcbf29ce484222325ull;
uint64_t Fnv1a64(uint64_t h, const void* data, size_t n);

// CRC32C (reflected, initial and final value 0xffffffff) of `n` more bytes after checksum `crc` of
// what came before (0 for nothing): Crc32c(Crc32c(0, a), b) == Crc32c(0, a || b). Uses the SSE4.2
// instruction when the CPU has it.
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);
// The two paths, for tests: the table-driven one always; the instruction one only when
// Crc32cHardwareAvailable().
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n);
uint32_t Crc32cHardware(uint32_t crc, const void* data, size_t n);
bool Crc32cHardwareAvailable();

// A checksum of either kind computed over a stream of blocks.
class StreamChecksum {
 public:
  explicit StreamChecksum(ChecksumKind kind);
  void Update(const void* data, size_t n);
  ChecksumKind kind() const { return kind_; }
  uint64_t value() const { return value_; }

 private:
  ChecksumKind kind_;
  uint64_t value_;
};

}  // namespace ptdp::runtime
