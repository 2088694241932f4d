#include "core/precision.h"

namespace ptdp {

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    case Precision::kFp8:
      return "fp8";
  }
  return "?";
}

Result<Precision> ParsePrecision(const std::string& s, const std::string& field) {
  if (s == "fp32") return Precision::kFp32;
  if (s == "bf16") return Precision::kBf16;
  if (s == "fp16") return Precision::kFp16;
  if (s == "fp8") return Precision::kFp8;
  return Status::Invalid(field + ": '" + s + "' is not one of fp32, bf16, fp16, fp8");
}

int ComputeBytes(Precision p) {
  return p == Precision::kFp32 ? 4 : 2;
}

int LinearInputBytes(Precision p) {
  return p == Precision::kFp8 ? 1 : ComputeBytes(p);
}

}  // namespace ptdp
