#include "tools/common.h"

#include <cstdio>
#include <filesystem>

namespace ptdp::tools {

int Fail(const std::string& command, const Status& status) {
  std::fprintf(stderr, "ptdp %s: error: %s\n", command.c_str(), status.message().c_str());
  return status.ExitCode();
}

Status CheckNotSpecialFile(const std::string& flag, const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st) || std::filesystem::is_regular_file(st)) {
    return Status::Ok();
  }
  return Status::Invalid(flag + ": '" + path + "' is not a regular file");
}

}  // namespace ptdp::tools
