// ptdp: plan, simulate and run PTD-P training of GPT models. Wiring only: each subcommand lives
// in its own cmd_*.cc and calls the library.
#include <cstdio>
#include <exception>

#include "tools/common.h"

int main(int argc, char** argv) {
  CLI::App app{"ptdp: plan, simulate and run pipeline + tensor + data parallel GPT training"};
  app.require_subcommand(1);
  int exit_code = 0;
  ptdp::tools::RegisterPresets(app, &exit_code);
  ptdp::tools::RegisterPlan(app, &exit_code);
  ptdp::tools::RegisterPaper(app, &exit_code);
  ptdp::tools::RegisterSchedule(app, &exit_code);
  ptdp::tools::RegisterSimulate(app, &exit_code);
  ptdp::tools::RegisterTrain(app, &exit_code);
  ptdp::tools::RegisterLaunch(app, &exit_code);
  ptdp::tools::RegisterTokenize(app, &exit_code);
  ptdp::tools::RegisterProfile(app, &exit_code);
  ptdp::tools::RegisterCompare(app, &exit_code);
  ptdp::tools::RegisterCalibrate(app, &exit_code);
  ptdp::tools::RegisterExport(app, &exit_code);
  ptdp::tools::RegisterForward(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ptdp: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ptdp: internal error: %s\n", e.what());
    return 1;
  }
  return exit_code;
}
