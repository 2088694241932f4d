// The rows of Table 1 of Narayanan et al., SC'21 (arXiv:2104.04473v5, p. 8) with the layouts the
// paper used: t and p from the table, microbatch size and interleaving from NVIDIA/Megatron-LM
// examples/sc21/run_table_1.sh (as /work/shared/reference/paper-table1.json records them), fp16
// mixed precision and full activation recomputation on every row.
#pragma once

#include <string>
#include <vector>

#include "core/model.h"
#include "core/parallel.h"
#include "planner/search.h"

namespace ptdp::planner {

struct PaperRow {
  const char* model;  // preset name in core/model.h
  int tp, pp, gpus;
  int64_t global_batch;
  int mbs, vp;
  double published_tflops_per_gpu;
};
const std::vector<PaperRow>& PaperTable1();

// The row's layout (interleaved when vp > 1, else 1F1B; full recomputation; scatter/gather on).
ParallelConfig PaperLayout(const PaperRow& row);

struct PaperComparison {
  PaperRow row;
  ModelSpec model;
  Candidate predicted;
  double error_percent = 0;  // 100 (predicted - published) / published
};
// Evaluates every row on `cluster_name` (default selene).
Result<std::vector<PaperComparison>> ComparePaperTable1(const std::string& cluster_name);

}  // namespace ptdp::planner
