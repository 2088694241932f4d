// Placeholder until the work that owns `ptdp simulate` lands: the command exists and says so.
#include "tools/common.h"

namespace ptdp::tools {

void RegisterSimulate(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("simulate", "(not built yet)");
  cmd->callback([exit_code] { *exit_code = Fail("simulate", Status::Internal("not implemented yet")); });
}

}  // namespace ptdp::tools
