// Placeholder until the work that owns `ptdp tokenize` lands: the command exists and says so.
#include "tools/common.h"

namespace ptdp::tools {

void RegisterTokenize(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("tokenize", "(not built yet)");
  cmd->callback([exit_code] { *exit_code = Fail("tokenize", Status::Internal("not implemented yet")); });
}

}  // namespace ptdp::tools
