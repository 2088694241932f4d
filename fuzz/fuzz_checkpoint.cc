// Checkpoints (`ptdp train --load DIR`): the two parsers of untrusted checkpoint bytes. The input
// is split at its first byte: even, a safetensors file (ParseSafetensorsHeader over the whole input
// as the file, then the header re-encoded and parsed back); odd, a manifest.json (ParseJson +
// ManifestFromJson, then written back and read again). Each must return a Status, never crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/json.h"
#include "fuzz/fuzz_util.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  if (size == 0) return 0;
  const std::string bytes = fuzz::AsString(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    auto h = runtime::ParseSafetensorsHeader(bytes, int64_t(bytes.size()), "fuzz.safetensors");
    if (h.ok()) {
      std::vector<runtime::StTensor> tensors = h->tensors;
      const std::string again = runtime::EncodeSafetensorsHeader(&tensors, h->metadata);
      int64_t data_bytes = 0;
      for (const auto& t : tensors) data_bytes = std::max(data_bytes, t.end);
      (void)runtime::ParseSafetensorsHeader(again, int64_t(again.size()) + data_bytes, "again");
    }
    return 0;
  }
  auto j = ParseJson(bytes, "manifest.json");
  if (!j.ok()) return 0;
  auto m = runtime::ManifestFromJson(*j, "manifest.json");
  if (m.ok()) {
    auto back = ParseJson(runtime::ManifestToJson(*m).dump(), "again");
    if (back.ok()) (void)runtime::ManifestFromJson(*back, "again");
  }
  return 0;
}
