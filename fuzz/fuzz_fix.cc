// `--fix` strings: planner::ParseFix, and Admits on an accepted one.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_util.h"
#include "planner/fix.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  auto f = planner::ParseFix(fuzz::AsString(data, size));
  if (!f.ok()) return 0;
  ParallelConfig c;
  (void)f->Admits(c);
  (void)f->Any();
  return 0;
}
