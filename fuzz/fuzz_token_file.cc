// Token files (`--data FILE`): the bytes are written to a scratch file and opened as
// TokenFile::Open does for `ptdp train` (header checks, then every token against a vocabulary of
// 256), then a few reads. The same bytes as a Megatron-LM dataset (`ptdp tokenize --megatron`,
// runtime/data/megatron_indexed.h): a 2-byte little-endian length L, L bytes of PREFIX.idx, the
// rest PREFIX.bin, converted, and a token file it writes opened again; the same dataset read in
// place (OpenMegatronTokens, `ptdp train --data PREFIX`), and a few reads. The bytes also as
// --split's text and as a blend's words (runtime/data/token_set.h).
#include <cstddef>
#include <cstdint>
#include <vector>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_util.h"
#include "runtime/data/megatron_indexed.h"
#include "runtime/data/token_file.h"
#include "runtime/data/token_set.h"

namespace {

bool WriteAll(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  const bool ok = f != nullptr &&
                  (bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  if (f != nullptr) std::fclose(f);
  return ok;
}

void FuzzMegatron(const uint8_t* data, size_t size) {
  using namespace ptdp;
  if (size < 2) return;
  const size_t len = std::min<size_t>(size - 2, size_t(data[0]) | (size_t(data[1]) << 8));
  const char* dir = std::getenv("TMPDIR");
  const std::string prefix =
      std::string(dir && *dir ? dir : "/tmp") + "/ptdp-megatron-" + std::to_string(getpid());
  if (!WriteAll(prefix + ".idx", fuzz::AsString(data + 2, len)) ||
      !WriteAll(prefix + ".bin", fuzz::AsString(data + 2 + len, size - 2 - len))) {
    return;
  }
  if (runtime::ConvertMegatronDataset(prefix, prefix + ".tok").ok()) {
    (void)runtime::TokenFile::Open(prefix + ".tok", 0);
  }
  for (int64_t vocab : {int64_t(0), int64_t(256)}) {
    auto tf = runtime::OpenMegatronTokens(prefix, vocab);
    if (!tf.ok()) continue;
    std::vector<int32_t> buf(16);
    const int64_t n = std::min<int64_t>(16, tf->count());
    (void)tf->Read(0, n, buf.data());
    (void)tf->Read(tf->count() - n, n, buf.data());
  }
}

// The bytes as --split's text, and as --data's words (split at spaces).
void FuzzDataFlags(const uint8_t* data, size_t size) {
  using namespace ptdp;
  const std::string text = fuzz::AsString(data, size);
  (void)ParseSplit(text);
  std::vector<std::string> words;
  std::string word;
  for (char ch : text) {
    if (ch == ' ') {
      words.push_back(word);
      word.clear();
    } else {
      word += ch;
    }
  }
  words.push_back(word);
  (void)ParseBlend(words, "--data");
}

}  // namespace

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
  FuzzMegatron(data, size);
  FuzzDataFlags(data, size);
  return 0;
}
