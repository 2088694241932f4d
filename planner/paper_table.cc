#include "planner/paper_table.h"

#include "core/cluster.h"

namespace ptdp::planner {

const std::vector<PaperRow>& PaperTable1() {
  // model, t, p, GPUs, B, b, v, published TFLOP/s per GPU, torch DDP
  static const std::vector<PaperRow> kRows = {
      {"gpt-1.7b", 1, 1, 32, 512, 16, 1, 137, true},  {"gpt-3.6b", 2, 1, 64, 512, 16, 1, 138, true},
      {"gpt-7.5b", 4, 1, 128, 512, 16, 1, 142, true}, {"gpt-18b", 8, 1, 256, 1024, 8, 1, 135, true},
      {"gpt-39b", 8, 2, 512, 1536, 4, 1, 138},        {"gpt-76b", 8, 4, 1024, 1792, 2, 3, 140},
      {"gpt-145b", 8, 8, 1536, 2304, 2, 2, 148},      {"gpt-310b", 8, 16, 1920, 2160, 1, 2, 155},
      {"gpt-530b", 8, 35, 2520, 2520, 1, 3, 163},     {"gpt-1t", 8, 64, 3072, 3072, 1, 1, 163},
  };
  return kRows;
}

Result<SoftwareProfile> PaperRowSoftware(const PaperRow& row) {
  PTDP_ASSIGN_OR_RETURN(SoftwareProfile sw, LoadSoftware(kPaperSoftware));
  if (row.torch_ddp) return sw.WithTorchDdp();
  return sw;
}

ParallelConfig PaperLayout(const PaperRow& row) {
  ParallelConfig c;
  c.tp = row.tp;
  c.pp = row.pp;
  c.dp = row.gpus / (row.tp * row.pp);
  c.mbs = row.mbs;
  c.vp = row.vp;
  c.schedule = row.vp > 1 ? ScheduleKind::kInterleaved : ScheduleKind::k1F1B;
  c.recompute = Recompute::kFull;
  c.scatter_gather = true;
  c.global_batch = row.global_batch;
  c.precision = Precision::kFp16;
  return c;
}

const std::vector<LaterRun>& Korthikanti2022Runs() {
  static const std::vector<LaterRun> kRuns = {
      {"gpt-22b", 8, 1, 8, 4, 41.5},
      {"gpt3-175b", 8, 8, 64, 64, 51.4},
      {"gpt-530b", 8, 35, 280, 280, 56.0},
      {"gpt-1t", 8, 64, 512, 512, 56.3},
  };
  return kRuns;
}

ParallelConfig LaterRunLayout(const LaterRun& run, Precision precision) {
  ParallelConfig c;
  c.tp = run.tp;
  c.pp = run.pp;
  c.dp = run.gpus / (run.tp * run.pp);
  c.mbs = 1;
  c.vp = 1;
  c.schedule = ScheduleKind::k1F1B;
  c.recompute = Recompute::kSelective;
  c.sequence_parallel = true;
  c.grad_accumulation_fusion = true;
  c.scatter_gather = true;
  c.global_batch = run.global_batch;
  c.precision = precision;
  return c;
}

Result<std::vector<LaterComparison>> CompareKorthikanti2022(const std::string& cluster_name) {
  std::vector<LaterComparison> out;
  for (const LaterRun& run : Korthikanti2022Runs()) {
    LaterComparison lc;
    lc.run = run;
    PTDP_ASSIGN_OR_RETURN(ModelSpec model, LoadModel(run.model));
    PTDP_ASSIGN_OR_RETURN(ClusterSpec cluster, LoadCluster(cluster_name, run.gpus));
    PTDP_ASSIGN_OR_RETURN(cluster.software, LoadSoftware(kPaperSoftware));
    auto cand = Evaluate(model, cluster, LaterRunLayout(run, cluster.profile.precision));
    if (!cand.ok()) return cand.status().WithPrefix(std::string("Korthikanti run ") + run.model);
    lc.predicted = std::move(cand).value();
    lc.predicted_mfu_percent = lc.predicted.prediction.model_flops_utilization;
    lc.error_percent =
        100.0 * (lc.predicted_mfu_percent - run.published_mfu_percent) / run.published_mfu_percent;
    out.push_back(std::move(lc));
  }
  return out;
}

Result<std::vector<PaperComparison>> ComparePaperTable1(const std::string& cluster_name) {
  std::vector<PaperComparison> out;
  for (const PaperRow& row : PaperTable1()) {
    PaperComparison pc;
    pc.row = row;
    PTDP_ASSIGN_OR_RETURN(pc.model, LoadModel(row.model));
    PTDP_ASSIGN_OR_RETURN(ClusterSpec cluster, LoadCluster(cluster_name, row.gpus));
    PTDP_ASSIGN_OR_RETURN(cluster.software, PaperRowSoftware(row));
    auto cand = Evaluate(pc.model, cluster, PaperLayout(row));
    if (!cand.ok()) return cand.status().WithPrefix(std::string("Table 1 row ") + row.model);
    pc.predicted = std::move(cand).value();
    pc.error_percent = 100.0 *
                       (pc.predicted.prediction.tflops_per_gpu - row.published_tflops_per_gpu) /
                       row.published_tflops_per_gpu;
    out.push_back(std::move(pc));
  }
  return out;
}

}  // namespace ptdp::planner
