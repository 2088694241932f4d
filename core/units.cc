#include "core/units.h"

namespace ptdp {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFp32:
      return "fp32";
    case DType::kFp16:
      return "fp16";
    case DType::kBf16:
      return "bf16";
    case DType::kU8:
      return "u8";
    case DType::kI32:
      return "i32";
    case DType::kFp64:
      return "fp64";
  }
  return "?";
}

}  // namespace ptdp
