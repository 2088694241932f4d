// The plan file `ptdp plan --out` writes and `ptdp simulate --plan` / `ptdp train --plan` read.
// Schema (docs/plan-file.md):
// {
//   "ptdp_plan_version": 1,
//   "model":   {ModelSpec, as core/model.h writes it},
//   "cluster": {"name": "selene", "gpus": 3072, "gpus_per_node": 8},
//   "global_batch": 3072,
//   "layout":  {"tp", "pp", "dp", "mbs", "vp", "schedule", "recompute", "scatter_gather"},
//   "prediction": {...the planner's numbers; kept as JSON here...},
//   "alternatives": [...], "search": {...}, "megatron_args": "..."   (optional, kept as JSON)
// }
// The runtime reads only model, cluster, global_batch and layout (and prints prediction beside
// what it measures); it must not depend on the planner, hence this reader lives in core.
#pragma once

#include <string>

#include "core/json.h"
#include "core/model.h"
#include "core/parallel.h"

namespace ptdp {

struct PlanClusterRef {
  std::string name;  // a preset name or a cluster/profile file path
  int gpus = 1;
  int gpus_per_node = 1;
};

struct PlanFile {
  ModelSpec model;
  PlanClusterRef cluster;
  ParallelConfig layout;  // global_batch included
  Json prediction = Json::object();
  Json extra = Json::object();  // alternatives, search, megatron_args: passed through
};

Result<PlanFile> PlanFromJson(const Json& j);
Result<PlanFile> ReadPlanFile(const std::string& path);
OrderedJson PlanToJson(const PlanFile& p);

}  // namespace ptdp
