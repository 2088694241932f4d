// Placeholder until the work that owns `ptdp presets` lands: the command exists and says so.
#include "tools/common.h"

namespace ptdp::tools {

void RegisterPresets(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("presets", "(not built yet)");
  cmd->callback([exit_code] { *exit_code = Fail("presets", Status::Internal("not implemented yet")); });
}

}  // namespace ptdp::tools
