// Token files (`--data FILE`): the bytes are written to a scratch file and opened as
// TokenFile::Open does for `ptdp train` (header checks, then every token against a vocabulary of
// 256), then a few reads.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "runtime/data/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  const std::string path = fuzz::ScratchFile("token_file", fuzz::AsString(data, size));
  if (path.empty()) return 0;
  for (int64_t vocab : {int64_t(0), int64_t(256)}) {
    auto tf = runtime::TokenFile::Open(path, vocab);
    if (!tf.ok()) continue;
    std::vector<int32_t> buf(16);
    const int64_t n = std::min<int64_t>(16, tf->count());
    (void)tf->Read(0, n, buf.data());
    (void)tf->Read(tf->count() - n, n, buf.data());
    (void)tf->Read(tf->count(), 1, buf.data());  // past the end: an error, not a read
  }
  return 0;
}
