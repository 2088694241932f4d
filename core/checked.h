// Checked integer arithmetic for sizes computed from user input (layouts, model shapes, GPU
// counts). A product that would overflow int64 is bad input, not a wrap: the callers turn a false
// return into a Status that names the field. Header-only so that every layer can use it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <string>

#include "core/status.h"

namespace ptdp {

// *out = a * b; false (and *out untouched) when the product does not fit in int64.
inline bool CheckedMul(int64_t a, int64_t b, int64_t* out) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return false;
  *out = r;
  return true;
}

// *out = a + b; false when the sum does not fit in int64.
inline bool CheckedAdd(int64_t a, int64_t b, int64_t* out) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return false;
  *out = r;
  return true;
}

// The product of the factors, or an error "<what>: <a> x <b> ... overflows int64".
inline Result<int64_t> CheckedProduct(std::initializer_list<int64_t> factors,
                                      const std::string& what) {
  int64_t r = 1;
  for (int64_t f : factors) {
    if (!CheckedMul(r, f, &r)) {
      std::string expr;
      for (int64_t g : factors) expr += (expr.empty() ? "" : " x ") + std::to_string(g);
      return Status::Invalid(what + ": " + expr + " overflows a 64-bit integer");
    }
  }
  return r;
}

// Converts a finite, integral double in int64 range; false for NaN, infinities, fractions and
// values beyond +-2^63 (a plain cast of those is undefined behaviour).
inline bool DoubleToInt64(double d, int64_t* out) {
  if (!std::isfinite(d) || d != std::floor(d)) return false;
  // 2^63 is exactly representable; every double below it converts without overflow.
  if (d >= 9223372036854775808.0 || d < -9223372036854775808.0) return false;
  *out = static_cast<int64_t>(d);
  return true;
}

// Range checks with the message style shared by every reader:
// "<field>: <value> is outside [<lo>, <hi>]".
inline Status CheckRange(const std::string& field, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return Status::Ok();
  return Status::Invalid(field + ": " + std::to_string(v) + " is outside [" + std::to_string(lo) +
                         ", " + std::to_string(hi) + "]");
}

// Shortest readable form of a double for messages ("1e+300", "0.5", "inf").
inline std::string FormatDouble(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Finite and in [lo, hi]; `hi_open` makes the upper bound exclusive ("[0, 1)").
inline Status CheckRange(const std::string& field, double v, double lo, double hi,
                         bool hi_open = false) {
  if (std::isfinite(v) && v >= lo && (hi_open ? v < hi : v <= hi)) return Status::Ok();
  return Status::Invalid(field + ": " + FormatDouble(v) + " is outside [" + FormatDouble(lo) +
                         ", " + FormatDouble(hi) + (hi_open ? ")" : "]"));
}

}  // namespace ptdp
