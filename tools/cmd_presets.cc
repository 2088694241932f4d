// `ptdp presets`: the built-in models, clusters and software profiles.
#include <cstdio>

#include "core/cluster.h"
#include "core/hardware.h"
#include "core/model.h"
#include "tools/common.h"

namespace ptdp::tools {

void RegisterPresets(CLI::App& app, int* exit_code) {
  auto* cmd =
      app.add_subcommand("presets", "List the built-in models, clusters and software profiles");
  cmd->callback([exit_code] {
    std::printf("models:\n  %-12s %6s %7s %5s %6s %7s %9s  %s\n", "name", "layers", "hidden",
                "heads", "seq", "vocab", "params", "about");
    for (const auto& p : ModelPresets()) {
      const auto& s = p.spec;
      std::printf("  %-12s %6d %7lld %5d %6lld %7lld %8.2fB  %s\n", s.name.c_str(), s.layers,
                  (long long)s.hidden, s.heads, (long long)s.seq_len, (long long)s.vocab,
                  ParameterCount(s) / 1e9, p.about.c_str());
    }
    std::printf("\nclusters (hardware profiles):\n  %-10s %9s %9s %8s %9s  %s\n", "name",
                "gpus/node", "peak_TF", "mem_GiB", "hbm_GBps", "precision");
    for (const auto& e : EmbeddedProfiles()) {
      auto hw = LoadProfile(e.name);
      if (!hw.ok()) {
        *exit_code = Fail("presets", hw.status());
        return;
      }
      std::printf("  %-10s %9.0f %9.1f %8.0f %9.0f  %s\n", e.name, hw->gpus_per_node.value,
                  hw->peak_tflops.value, hw->memory_GiB.value, hw->hbm_GBps.value,
                  PrecisionName(hw->precision));
    }
    std::printf("\nsoftware profiles (--software; default %s):\n", kDefaultSoftware);
    for (const auto& e : EmbeddedSoftwareProfiles()) {
      auto sw = LoadSoftware(e.name);
      if (!sw.ok()) {
        *exit_code = Fail("presets", sw.status());
        return;
      }
      std::printf("  %-17s %s\n", e.name, sw->about.c_str());
    }
    *exit_code = 0;
  });
}

}  // namespace ptdp::tools
