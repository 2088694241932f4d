// FP8 block-scaled weights, as DeepSeek-V3's, DeepSeek-R1's and Kimi K2's released folders (and
// Qwen3's -FP8 ones) hold them: config.json's quantization_config {"quant_method": "fp8", "fmt":
// "e4m3", "weight_block_size": [B0, B1], ...}; each quantized 2-D weight W [rows][cols] is stored
// as F8_E4M3 beside W_scale_inv [ceil(rows / B0)][ceil(cols / B1)], and element (i, j) is
// fp8(W[i][j]) * W_scale_inv[i / B0][j / B1] (the ragged last blocks included). ptdp reads such a
// folder (`--init-from`, `forward --hf`) by dequantizing to fp32 as it loads; it does not write
// one. The other tensors (embeddings, norms, the router) stay in their float dtypes.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/status.h"
#include "runtime/checkpoint/safetensors.h"

namespace ptdp::runtime {

// The scale tensor's name: W's name and this.
inline constexpr char kFp8ScaleSuffix[] = "_scale_inv";

// A folder's weight_block_size; {0, 0}: no quantized weights (a F8_E4M3 tensor is refused).
struct Fp8Blocks {
  int64_t rows = 0, cols = 0;
  bool On() const { return rows > 0; }
};

// OCP FP8 E4M3 (e4m3fn, as torch.float8_e4m3fn and safetensors' F8_E4M3): a sign, 4 exponent bits
// of bias 7 and 3 mantissa bits; exponent 0 is subnormal (m * 2^-9), S.1111.111 is NaN and there is
// no infinity (the largest value is 448).
inline float Fp8E4m3ToFloat(uint8_t b) {
  const int e = (b >> 3) & 0xF, m = b & 0x7;
  if (e == 0xF && m == 0x7) return std::numeric_limits<float>::quiet_NaN();
  const float magnitude =
      e == 0 ? float(m) * 0x1p-9f : (1.0f + float(m) / 8.0f) * float(1 << e) * 0x1p-7f;
  return (b & 0x80) ? -magnitude : magnitude;
}

// config.json's quantization_config (absent or null: none): fp8 of fmt e4m3 with a 2-entry
// weight_block_size of positive integers, or an error naming the field (another method, such as
// GPTQ's or bitsandbytes', is refused).
Result<Fp8Blocks> Fp8BlocksFromConfig(const Json& config, const std::string& source);

// W_scale_inv's shape for a weight of `shape` (2-D).
std::vector<int64_t> Fp8ScaleShape(const std::vector<int64_t>& shape, const Fp8Blocks& b);

// Whether `name` is a scale tensor's (ends in kFp8ScaleSuffix).
bool IsFp8ScaleName(const std::string& name);

// After a folder's header was matched (`out`: its tensors by name, F8_E4M3 ones included): every
// F8_E4M3 tensor's scale is in `h`, a float tensor of Fp8ScaleShape, and joins `out`; a scale of
// no F8_E4M3 tensor in `out` (other than one of `skipped`, tensors the reader ignores) is refused,
// as is a F8_E4M3 tensor without one or in a folder without quantization_config.
Status MatchFp8Scales(const StHeader& h, const Fp8Blocks& b,
                      const std::vector<std::string>& skipped, std::map<std::string, StTensor>* out,
                      const std::string& source);

// values [rows][cols] (a F8_E4M3 tensor decoded) times their blocks' scales, in place.
void Fp8Dequantize(std::vector<float>* values, const std::vector<int64_t>& shape,
                   const std::vector<float>& scales, const Fp8Blocks& b);

}  // namespace ptdp::runtime
