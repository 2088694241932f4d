// Placeholder until the work that owns `ptdp train` lands: the command exists and says so.
#include "tools/common.h"

namespace ptdp::tools {

void RegisterTrain(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("train", "(not built yet)");
  cmd->callback([exit_code] { *exit_code = Fail("train", Status::Internal("not implemented yet")); });
}

}  // namespace ptdp::tools
