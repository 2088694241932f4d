// Placeholder until the work that owns `ptdp paper` lands: the command exists and says so.
#include "tools/common.h"

namespace ptdp::tools {

void RegisterPaper(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("paper", "(not built yet)");
  cmd->callback([exit_code] { *exit_code = Fail("paper", Status::Internal("not implemented yet")); });
}

}  // namespace ptdp::tools
