// The rows of Table 1 of Narayanan et al., SC'21 (arXiv:2104.04473v5, p. 8) with the layouts the
// paper used: t and p from the table, microbatch size and interleaving from NVIDIA/Megatron-LM
// examples/sc21/run_table_1.sh (as /work/shared/reference/paper-table1.json records them), fp16
// mixed precision and full activation recomputation on every row.
#pragma once

#include <string>
#include <vector>

#include "core/model.h"
#include "core/parallel.h"
#include "core/software.h"
#include "planner/search.h"

namespace ptdp::planner {

struct PaperRow {
  const char* model;  // preset name in core/model.h
  int tp, pp, gpus;
  int64_t global_batch;
  int mbs, vp;
  double published_tflops_per_gpu;
  // run_table_1.sh's DDP=torch (the rows up to 18B) rather than Megatron-LM's local DDP.
  bool torch_ddp = false;
};
const std::vector<PaperRow>& PaperTable1();
// The software profile a row ran: megatron-lm-2021, with its torch_ddp facts (bucketed overlap of
// the reduction with the last backward, the bucket copies) on the torch DDP rows.
Result<SoftwareProfile> PaperRowSoftware(const PaperRow& row);

// The row's layout (interleaved when vp > 1, else 1F1B; full recomputation; scatter/gather on;
// fp16, as the paper's Megatron-LM ran: examples/sc21/CONFIG.sh passes --fp16).
ParallelConfig PaperLayout(const PaperRow& row);

struct PaperComparison {
  PaperRow row;
  ModelSpec model;
  Candidate predicted;
  double error_percent = 0;  // 100 (predicted - published) / published
};
// Evaluates every row on `cluster_name` (default selene).
Result<std::vector<PaperComparison>> ComparePaperTable1(const std::string& cluster_name);

// Runs published after the paper, not in Table 1, on the same machine: Korthikanti et al. 2022
// (arXiv 2205.05198), whose model FLOPs utilisation Megatron-LM's README lists (22B 41.5%, 175B
// 51.4%, 530B 56.0%, 1T 56.3%; data-parallel size 1). Layouts from the paper's Table 3 as we read
// it: t = 8, p = 1, 8, 35, 64, microbatch 1, global batch = GPUs; selective recomputation,
// sequence parallelism, and 2022 Megatron-LM's fused gradient accumulation; 1F1B assumed.
struct LaterRun {
  const char* model;
  int tp, pp, gpus;
  int64_t global_batch;
  double published_mfu_percent;
};
const std::vector<LaterRun>& Korthikanti2022Runs();
// `precision`: the cluster profile's (the runs' own precision is not stated with them).
ParallelConfig LaterRunLayout(const LaterRun& run, Precision precision);
struct LaterComparison {
  LaterRun run;
  Candidate predicted;
  double predicted_mfu_percent = 0;  // model FLOPs per GPU / the profile's peak
  double error_percent = 0;          // 100 (predicted - published) / published
};
Result<std::vector<LaterComparison>> CompareKorthikanti2022(const std::string& cluster_name);

}  // namespace ptdp::planner
