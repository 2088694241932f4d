#include "tools/common.h"

#include <cstdio>

namespace ptdp::tools {

int Fail(const std::string& command, const Status& status) {
  std::fprintf(stderr, "ptdp %s: error: %s\n", command.c_str(), status.message().c_str());
  return status.ExitCode();
}

}  // namespace ptdp::tools
