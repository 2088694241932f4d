// Model JSON (`--model FILE`): ParseJson + ModelFromJson, then what the planner derives from an
// accepted model (parameter counts, padded vocabulary, the JSON written back).
#include <cstddef>
#include <cstdint>

#include "core/json.h"
#include "core/model.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  auto j = ParseJson(fuzz::AsString(data, size), "model");
  if (!j.ok()) return 0;
  auto m = ModelFromJson(*j, "model");
  if (!m.ok()) return 0;
  for (int tp : {1, 8, 512}) {
    (void)ParameterCount(*m, tp);
    (void)PaddedVocab(*m, tp);
  }
  (void)ParameterCountEq2(*m);
  (void)ModelToJson(*m).dump();
  return 0;
}
