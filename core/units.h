// Units. Quantities carry their unit in the type name or the variable name: Bytes, Seconds,
// Nanoseconds, FlopCount; JSON keys carry it as a suffix (hbm_GBps, latency_us, memory_GiB).
// Decimal prefixes (GB, TB/s, Gb/s) are 10^n, binary ones (GiB) 2^n, as vendors print them.
#pragma once

#include <cstdint>

namespace ptdp {

using Bytes = int64_t;        // memory sizes and message sizes
using Seconds = double;       // analytical times
using Nanoseconds = int64_t;  // simulated time: integer so the event order is exact
using FlopCount = double;     // floating-point operations (can exceed 2^63 for a run)

inline constexpr double kKiB = 1024.0;
inline constexpr double kMiB = 1024.0 * kKiB;
inline constexpr double kGiB = 1024.0 * kMiB;
inline constexpr double kKB = 1e3;
inline constexpr double kMB = 1e6;
inline constexpr double kGB = 1e9;
inline constexpr double kTera = 1e12;
inline constexpr double kPeta = 1e15;
inline constexpr double kUs = 1e-6;
inline constexpr double kMs = 1e-3;
inline constexpr int64_t kNsPerSecond = 1000000000;

// Gigabits per second (link data sheets) to bytes per second.
constexpr double GbpsToBytesPerSecond(double gbps) {
  return gbps * 1e9 / 8.0;
}
constexpr double GBpsToBytesPerSecond(double gBps) {
  return gBps * 1e9;
}
constexpr double BytesToGiB(double b) {
  return b / kGiB;
}
// Seconds to integer nanoseconds, rounded to nearest.
constexpr Nanoseconds ToNanoseconds(Seconds s) {
  return static_cast<Nanoseconds>(s * 1e9 + (s >= 0 ? 0.5 : -0.5));
}
constexpr Seconds ToSeconds(Nanoseconds ns) {
  return static_cast<double>(ns) * 1e-9;
}

// Bytes per element of the dtypes we use.
// Element types of tensors and messages. kU8 (dropout masks), kI32 (token ids) and kFp64 (the CPU
// backend's finite-difference tests only) are never reduced by a communicator.
enum class DType { kFp32, kFp16, kBf16, kU8, kI32, kFp64 };
constexpr int DTypeBytes(DType t) {
  switch (t) {
    case DType::kFp16:
    case DType::kBf16:
      return 2;
    case DType::kU8:
      return 1;
    case DType::kFp64:
      return 8;
    default:
      return 4;
  }
}
const char* DTypeName(DType t);

}  // namespace ptdp
