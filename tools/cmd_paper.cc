// `ptdp paper`: the paper's Table 1 layouts on selene, predicted vs published TFLOP/s per GPU.
#include <cmath>
#include <cstdio>

#include "core/software.h"
#include "planner/paper_table.h"
#include "tools/common.h"

namespace ptdp::tools {

void RegisterPaper(CLI::App& app, int* exit_code) {
  auto cluster = std::make_shared<std::string>("selene");
  auto* cmd = app.add_subcommand(
      "paper", "Predict Table 1 of Narayanan et al. SC'21 with the paper's own layouts");
  cmd->add_option("--cluster", *cluster, "Cluster preset or file")->capture_default_str();
  cmd->callback([cluster, exit_code] {
    auto rows = planner::ComparePaperTable1(*cluster);
    if (!rows.ok()) {
      *exit_code = Fail("paper", rows.status());
      return;
    }
    std::printf(
        "Table 1 of Narayanan et al. SC'21 on %s: predicted vs published TFLOP/s per GPU\n"
        "(full recomputation, eq. (3) FLOPs; microbatch and interleaving from run_table_1.sh; "
        "software %s, its torch_ddp facts on the rows up to 18B)\n\n",
        cluster->c_str(), kPaperSoftware);
    std::printf("%-9s %3s %3s %5s %5s %3s %3s %9s %9s %8s %7s %8s %8s\n", "model", "t", "p", "GPUs",
                "B", "b", "v", "published", "predicted", "error", "bubble", "iter_s", "mem_GiB");
    double worst = 0;
    for (const auto& r : *rows) {
      const auto& p = r.predicted.prediction;
      std::printf("%-9s %3d %3d %5d %5lld %3d %3d %9.0f %9.1f %+7.1f%% %7.3f %8.2f %8.1f\n",
                  r.row.model, r.row.tp, r.row.pp, r.row.gpus, (long long)r.row.global_batch,
                  r.row.mbs, r.row.vp, r.row.published_tflops_per_gpu, p.tflops_per_gpu,
                  r.error_percent, p.bubble_fraction, p.iteration_s,
                  p.peak_memory / (1024.0 * 1024.0 * 1024.0));
      worst = std::max(worst, std::fabs(r.error_percent));
    }
    std::printf("\nlargest error %.1f%% (acceptance: every row within 10%%)\n", worst);

    auto later = planner::CompareKorthikanti2022(*cluster);
    if (!later.ok()) {
      *exit_code = Fail("paper", later.status());
      return;
    }
    std::printf(
        "\nBeyond Table 1: Korthikanti et al. 2022 on %s, model FLOPs utilisation (Megatron-LM "
        "README)\n(t = 8, b = 1, 1F1B, data parallel 1; selective recomputation, sequence "
        "parallelism, fused gradient accumulation)\n\n",
        cluster->c_str());
    std::printf("%-9s %3s %3s %5s %5s %9s %9s %8s %8s %8s\n", "model", "t", "p", "GPUs", "B",
                "published", "predicted", "error", "iter_s", "mem_GiB");
    for (const auto& r : *later) {
      const auto& p = r.predicted.prediction;
      std::printf("%-9s %3d %3d %5d %5lld %8.1f%% %8.1f%% %+7.1f%% %8.2f %8.1f\n", r.run.model,
                  r.run.tp, r.run.pp, r.run.gpus, (long long)r.run.global_batch,
                  r.run.published_mfu_percent, r.predicted_mfu_percent, r.error_percent,
                  p.iteration_s, p.peak_memory / (1024.0 * 1024.0 * 1024.0));
    }
    *exit_code = 0;
  });
}

}  // namespace ptdp::tools
