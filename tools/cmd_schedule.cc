// Placeholder until the work that owns `ptdp schedule` lands: the command exists and says so.
#include "tools/common.h"

namespace ptdp::tools {

void RegisterSchedule(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("schedule", "(not built yet)");
  cmd->callback([exit_code] { *exit_code = Fail("schedule", Status::Internal("not implemented yet")); });
}

}  // namespace ptdp::tools
