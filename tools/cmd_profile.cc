// Placeholder until the work that owns `ptdp profile` lands: the command exists and says so.
#include "tools/common.h"

namespace ptdp::tools {

void RegisterProfile(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("profile", "(not built yet)");
  cmd->callback([exit_code] { *exit_code = Fail("profile", Status::Internal("not implemented yet")); });
}

}  // namespace ptdp::tools
