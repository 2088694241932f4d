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
// path. One file per harness and process, so parallel fuzzing jobs do not share it.
inline std::string ScratchFile(const char* harness, const std::string& bytes) {
  const char* dir = std::getenv("TMPDIR");
  const std::string path = std::string(dir && *dir ? dir : "/tmp") + "/ptdp-" + harness + "-" +
                           std::to_string(getpid()) + ".bin";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();  // the harness's own failure, not the parser's
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::abort();
  }
  std::fclose(f);
  return path;
}

}  // namespace ptdp::fuzz
