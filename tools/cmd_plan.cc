// Placeholder until the work that owns `ptdp plan` lands: the command exists and says so.
#include "tools/common.h"

namespace ptdp::tools {

void RegisterPlan(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("plan", "(not built yet)");
  cmd->callback([exit_code] { *exit_code = Fail("plan", Status::Internal("not implemented yet")); });
}

}  // namespace ptdp::tools
