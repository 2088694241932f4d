// Shared helpers of the thin CLI mains: turning a Status into a message and an exit code.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace ptdp::tools {

// Prints "ptdp <command>: error: <message>" on one line to stderr; returns the exit code
// (2 for bad input, 1 for internal failures).
int Fail(const std::string& command, const Status& status);

// Ok unless `path` names something that exists but is not a regular file (a directory, a FIFO):
// such a path "opens" and then reads nothing or blocks, and the later error would mislead.
// A path that does not exist is left to the loader (a preset name, or its own NotFound).
Status CheckNotSpecialFile(const std::string& flag, const std::string& path);

// Every subcommand registers itself on the app; `exit_code` receives its result.
void RegisterPresets(CLI::App& app, int* exit_code);
void RegisterPlan(CLI::App& app, int* exit_code);
void RegisterPaper(CLI::App& app, int* exit_code);
void RegisterSchedule(CLI::App& app, int* exit_code);
void RegisterSimulate(CLI::App& app, int* exit_code);
void RegisterTrain(CLI::App& app, int* exit_code);
void RegisterLaunch(CLI::App& app, int* exit_code);
void RegisterTokenize(CLI::App& app, int* exit_code);
void RegisterProfile(CLI::App& app, int* exit_code);
void RegisterCompare(CLI::App& app, int* exit_code);
void RegisterCalibrate(CLI::App& app, int* exit_code);
void RegisterExport(CLI::App& app, int* exit_code);
void RegisterForward(CLI::App& app, int* exit_code);

}  // namespace ptdp::tools
