// Safetensors files (the Hugging Face format, https://huggingface.co/docs/safetensors), written
// and read without a third-party library: 8 bytes of little-endian header length N, N bytes of
// JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the tensors' raw bytes (offsets relative to the end of the header). The header is padded
// with spaces to a multiple of 8 bytes so that every tensor starts aligned.
//
// The reader treats the file as untrusted: header length capped, the JSON parsed by core/json.h's
// bounded parser, every shape's element count overflow-checked, every tensor's byte range inside
// the file, matching its dtype and shape, and no two ranges overlapping.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace ptdp::runtime {

// Safetensors itself refuses headers over 100 MB; so do we.
inline constexpr int64_t kMaxSafetensorsHeader = int64_t(100) << 20;

struct StTensor {
  std::string name;
  // F32, F16, BF16, F64, F8_E4M3 (runtime/checkpoint/fp8.h), I64, I32, U32, I16, U16, I8, U8, BOOL
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte range in the data section
};

struct StHeader {
  std::vector<StTensor> tensors;  // in file order
  std::map<std::string, std::string> metadata;
  int64_t data_start = 0;  // file offset of the data section (8 + N)
  const StTensor* Find(const std::string& name) const;
};

// Bytes per element of a safetensors dtype name, or 0 when unknown.
int StDTypeBytes(const std::string& dtype);

// The first 8 + N bytes of a file holding `tensors` back to back in the given order (their begin
// and end are assigned here) and `metadata`.
std::string EncodeSafetensorsHeader(std::vector<StTensor>* tensors,
                                    const std::map<std::string, std::string>& metadata);

// Parses and checks the header of a safetensors file of `file_size` bytes whose first bytes are
// `prefix` (at least the whole header). `source` names the file in errors.
Result<StHeader> ParseSafetensorsHeader(const std::string& prefix, int64_t file_size,
                                        const std::string& source);

}  // namespace ptdp::runtime
