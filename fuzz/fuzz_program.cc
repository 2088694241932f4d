// The Program's text form (ProgramFromText, docs/ir.md: a header line, then one line per rank)
// and its JSON form (ProgramFromJson, as a plan file's "program" holds it); an accepted Program
// goes through schedule::Validate, as `ptdp schedule` and the simulator do.
#include <cstddef>
#include <cstdint>

#include "core/program.h"
#include "fuzz/fuzz_util.h"
#include "schedule/schedule.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  const std::string text = fuzz::AsString(data, size);
  Result<Program> p = ProgramFromText(text);
  if (!p.ok()) {
    auto j = ParseJson(text, "program");
    if (!j.ok()) return 0;
    p = ProgramFromJson(*j);
    if (!p.ok()) return 0;
  }
  (void)InstructionCount(*p);
  if (schedule::Validate(*p).ok()) {
    (void)ProgramToText(*p);
    (void)ProgramToJson(*p).dump();
  }
  return 0;
}
