// Shared helpers of the libFuzzer harnesses (docs/fuzzing.md). Each harness feeds the fuzzer's
// bytes to one parser the CLI exposes and accepts any ok or error Status; a crash, a sanitizer
// report, a timeout or an allocation past libFuzzer's -malloc_limit_mb is the failure.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ptdp::fuzz {

inline std::string AsString(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Writes `bytes` to this process's scratch file (for parsers that take a path) and returns its
// path, or "" when the file cannot be written (the harness's own failure, not the parser's: it
// says so on stderr and the harness skips the input). One file per harness and process, so
// parallel fuzzing jobs do not share it.
inline std::string ScratchFile(const char* harness, const std::string& bytes) {
  const char* dir = std::getenv("TMPDIR");
  const std::string path = std::string(dir && *dir ? dir : "/tmp") + "/ptdp-" + harness + "-" +
                           std::to_string(getpid()) + ".bin";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  const bool written = f != nullptr && (bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(),
                                                                     f) == bytes.size());
  if (f != nullptr) std::fclose(f);
  if (!written) {
    std::fprintf(stderr, "fuzz: cannot write the scratch file %s; input skipped\n", path.c_str());
    return "";
  }
  return path;
}

}  // namespace ptdp::fuzz
