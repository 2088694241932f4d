#include "runtime/checkpoint/fp8.h"

#include <algorithm>
#include <set>

namespace ptdp::runtime {

Result<Fp8Blocks> Fp8BlocksFromConfig(const Json& config, const std::string& source) {
  const auto q = config.find("quantization_config");
  if (q == config.end() || q->is_null()) return Fp8Blocks{};
  const std::string at = source + ".quantization_config";
  if (!q->is_object()) return Status::Invalid(at + ": expected an object");
  PTDP_ASSIGN_OR_RETURN(const std::string method, StringAt(*q, "quant_method", "", at));
  if (method != "fp8") {
    return Status::Invalid(at + ".quant_method: \"" + method +
                           "\" is not read: ptdp reads fp8 block-scaled weights only");
  }
  PTDP_ASSIGN_OR_RETURN(const std::string fmt, StringAt(*q, "fmt", "e4m3", at));
  if (fmt != "e4m3") {
    return Status::Invalid(at + ".fmt: \"" + fmt + "\" is not read: only e4m3 (F8_E4M3)");
  }
  const auto block = q->find("weight_block_size");
  if (block == q->end() || !block->is_array() || block->size() != 2 ||
      !(*block)[0].is_number_integer() || !(*block)[1].is_number_integer() ||
      (*block)[0].get<int64_t>() < 1 || (*block)[1].get<int64_t>() < 1 ||
      (*block)[0].get<int64_t>() > (int64_t(1) << 20) ||
      (*block)[1].get<int64_t>() > (int64_t(1) << 20)) {
    return Status::Invalid(at +
                           ".weight_block_size: expected two positive integers (a block's "
                           "rows and columns; per-tensor scales are not read)");
  }
  return Fp8Blocks{(*block)[0].get<int64_t>(), (*block)[1].get<int64_t>()};
}

std::vector<int64_t> Fp8ScaleShape(const std::vector<int64_t>& shape, const Fp8Blocks& b) {
  if (shape.size() != 2 || !b.On()) return {};
  return {(shape[0] + b.rows - 1) / b.rows, (shape[1] + b.cols - 1) / b.cols};
}

bool IsFp8ScaleName(const std::string& name) {
  const size_t n = sizeof(kFp8ScaleSuffix) - 1;
  return name.size() > n && name.compare(name.size() - n, n, kFp8ScaleSuffix) == 0;
}

Status MatchFp8Scales(const StHeader& h, const Fp8Blocks& b,
                      const std::vector<std::string>& skipped, std::map<std::string, StTensor>* out,
                      const std::string& source) {
  const std::set<std::string> ignored(skipped.begin(), skipped.end());
  std::map<std::string, const StTensor*> scales;  // by the weight's name
  for (const StTensor& t : h.tensors) {
    if (!IsFp8ScaleName(t.name)) continue;
    const std::string weight = t.name.substr(0, t.name.size() - (sizeof(kFp8ScaleSuffix) - 1));
    if (ignored.count(weight) > 0) continue;
    const auto w = out->find(weight);
    if (w == out->end() || w->second.dtype != "F8_E4M3") {
      return Status::Invalid(source + ": tensor '" + t.name + "' scales no F8_E4M3 tensor");
    }
    scales[weight] = &t;
  }
  std::map<std::string, StTensor> added;
  for (const auto& [name, t] : *out) {
    if (t.dtype != "F8_E4M3") continue;
    if (!b.On()) {
      return Status::Invalid(source + ": tensor '" + name +
                             "' is F8_E4M3 but config.json has no fp8 quantization_config");
    }
    const auto s = scales.find(name);
    if (s == scales.end()) {
      return Status::Invalid(source + ": tensor '" + name + "' is F8_E4M3 without '" + name +
                             kFp8ScaleSuffix + "'");
    }
    const StTensor& scale = *s->second;
    const std::vector<int64_t> want = Fp8ScaleShape(t.shape, b);
    if (want.empty() || scale.shape != want || (scale.dtype != "F32" && scale.dtype != "BF16")) {
      std::string shape;
      for (const int64_t d : want) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      return Status::Invalid(source + ": tensor '" + scale.name + "': expected F32 or BF16 of [" +
                             shape + "] (weight_block_size " + std::to_string(b.rows) + " x " +
                             std::to_string(b.cols) + ")");
    }
    added[scale.name] = scale;
  }
  out->insert(added.begin(), added.end());
  return Status::Ok();
}

void Fp8Dequantize(std::vector<float>* values, const std::vector<int64_t>& shape,
                   const std::vector<float>& scales, const Fp8Blocks& b) {
  const int64_t cols = shape[1], block_cols = (cols + b.cols - 1) / b.cols;
  for (int64_t i = 0; i < shape[0]; ++i) {
    const float* row_scales = scales.data() + (i / b.rows) * block_cols;
    float* row = values->data() + i * cols;
    for (int64_t j = 0; j < cols; ++j) row[j] *= row_scales[j / b.cols];
  }
}

}  // namespace ptdp::runtime
