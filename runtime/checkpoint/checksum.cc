#include "runtime/checkpoint/checksum.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define PTDP_CRC32C_X86 1
#endif

namespace ptdp::runtime {
namespace {

// The reflected Castagnoli polynomial 0x1EDC6F41.
constexpr uint32_t kCrc32cPoly = 0x82f63b78u;

// Slicing-by-8 tables: kTables[0][b] is the CRC of byte b alone; kTables[j][b] that of byte b
// followed by j zero bytes, so eight bytes are folded with eight lookups and no bit loop.
using Crc32cTables = std::array<std::array<uint32_t, 256>, 8>;
constexpr Crc32cTables MakeTables() {
  Crc32cTables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ kCrc32cPoly : c >> 1;
    t[0][b] = c;
  }
  for (int j = 1; j < 8; ++j) {
    for (uint32_t b = 0; b < 256; ++b) t[j][b] = (t[j - 1][b] >> 8) ^ t[0][t[j - 1][b] & 0xff];
  }
  return t;
}
constexpr Crc32cTables kTables = MakeTables();

#ifdef PTDP_CRC32C_X86
// Compiled for SSE4.2 alone so the rest of the build keeps running on any x86-64 CPU; called only
// after the run-time check. One stream of the instruction waits out its 3-cycle latency between
// words, so long inputs run three independent streams over adjacent blocks and join them.
__attribute__((target("sse4.2"))) uint32_t HardwareSerial(uint32_t c, const unsigned char* p,
                                                          size_t n) {
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = static_cast<uint32_t>(_mm_crc32_u64(c, word));
  }
  for (; n > 0; --n) c = _mm_crc32_u8(c, *p++);
  return c;
}

// The register update is affine: Update(r, B) == Shift(r, |B|) ^ Update(0, B), where Shift(r, L)
// feeds L zero bytes. Shift is linear in r, so for the fixed block length it is four byte tables.
constexpr size_t kStreamBlock = 4096;
struct ShiftTables {
  std::array<std::array<uint32_t, 256>, 4> t{};
  ShiftTables() {
    static const unsigned char zeros[kStreamBlock] = {};
    uint32_t bit[32];
    for (int i = 0; i < 32; ++i) bit[i] = HardwareSerial(uint32_t(1) << i, zeros, kStreamBlock);
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int i = 0; i < 8; ++i) v ^= (b >> i & 1) ? bit[8 * k + i] : 0;
        t[k][b] = v;
      }
    }
  }
  uint32_t Shift(uint32_t r) const {
    return t[0][r & 0xff] ^ t[1][(r >> 8) & 0xff] ^ t[2][(r >> 16) & 0xff] ^ t[3][r >> 24];
  }
};

__attribute__((target("sse4.2"))) uint32_t HardwareUpdate(uint32_t c, const unsigned char* p,
                                                          size_t n) {
  static const ShiftTables shift;
  for (; n >= 3 * kStreamBlock; n -= 3 * kStreamBlock, p += 3 * kStreamBlock) {
    uint64_t a = c, b = 0, d = 0;
    const unsigned char* q = p;
    for (size_t i = 0; i < kStreamBlock; i += 8, q += 8) {
      uint64_t wa, wb, wd;
      std::memcpy(&wa, q, 8);
      std::memcpy(&wb, q + kStreamBlock, 8);
      std::memcpy(&wd, q + 2 * kStreamBlock, 8);
      a = _mm_crc32_u64(a, wa);
      b = _mm_crc32_u64(b, wb);
      d = _mm_crc32_u64(d, wd);
    }
    c = shift.Shift(shift.Shift(uint32_t(a)) ^ uint32_t(b)) ^ uint32_t(d);
  }
  return HardwareSerial(c, p, n);
}
#endif

bool DetectHardware() {
#ifdef PTDP_CRC32C_X86
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

}  // namespace

uint64_t Fnv1a64(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    // Little-endian byte order by construction, whatever the host's.
    const uint32_t lo =
        c ^ (uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24);
    c = kTables[7][lo & 0xff] ^ kTables[6][(lo >> 8) & 0xff] ^ kTables[5][(lo >> 16) & 0xff] ^
        kTables[4][lo >> 24] ^ kTables[3][p[4]] ^ kTables[2][p[5]] ^ kTables[1][p[6]] ^
        kTables[0][p[7]];
  }
  for (; n > 0; --n) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xff];
  return ~c;
}

bool Crc32cHardwareAvailable() {
  static const bool available = DetectHardware();
  return available;
}

uint32_t Crc32cHardware(uint32_t crc, const void* data, size_t n) {
#ifdef PTDP_CRC32C_X86
  if (Crc32cHardwareAvailable()) {
    return ~HardwareUpdate(~crc, static_cast<const unsigned char*>(data), n);
  }
#endif
  return Crc32cPortable(crc, data, n);  // not reached where tests ask only when available
}

uint32_t Crc32c(uint32_t crc, const void* data, size_t n) {
  return Crc32cHardwareAvailable() ? Crc32cHardware(crc, data, n) : Crc32cPortable(crc, data, n);
}

StreamChecksum::StreamChecksum(ChecksumKind kind)
    : kind_(kind), value_(kind == ChecksumKind::kCrc32c ? 0 : kFnv1a64Init) {}

void StreamChecksum::Update(const void* data, size_t n) {
  value_ = kind_ == ChecksumKind::kCrc32c ? Crc32c(static_cast<uint32_t>(value_), data, n)
                                          : Fnv1a64(value_, data, n);
}

}  // namespace ptdp::runtime
