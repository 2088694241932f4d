// The plan file `ptdp plan --out` writes and `ptdp simulate --plan` / `ptdp train --plan` read.
// Schema (docs/plan-file.md):
// {
//   "ptdp_plan_version": 2,
//   "model":   {ModelSpec, as core/model.h writes it},
//   "cluster": {"name": "selene", "gpus": 3072, "gpus_per_node": 8},
//   "global_batch": 3072,
//   "layout":  {"tp", "pp", "dp", "mbs", "vp", "schedule", "recompute", "scatter_gather"},
//   "software": {SoftwareProfile, as core/software.h writes it: the stack the plan was priced
//               for; optional, absent in plans written before software profiles},
//   "program": {Program, as core/program.h ProgramToJson writes it: the layout's schedule with
//               its message sizes; what `ptdp simulate` and `ptdp train` execute},
//   "prediction": {...the planner's numbers; kept as JSON here...},
//   "alternatives": [...], "search": {...}, "megatron_args": "...", "megatron_env": "...",
//   "megatron_layout": {...}, "megatron_note": "..."   (optional, kept as JSON)
// }
// Version 2 added "program"; a version-1 file (no program) is refused where a Program is needed
// ("plan.program: missing (plan file version 1; re-run ptdp plan)"). The reader checks the
// Program's form only; schedule::CheckProgramMatchesLayout checks it against the layout.
// The runtime reads only model, cluster, global_batch, layout and program (and prints prediction
// beside what it measures); it must not depend on the planner, hence this reader lives in core.
#pragma once

#include <optional>
#include <string>

#include "core/json.h"
#include "core/model.h"
#include "core/parallel.h"
#include "core/program.h"
#include "core/software.h"

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
  Program program;        // the layout's Program (schedule::BuildProgram), when has_program
  bool has_program = false;
  std::optional<SoftwareProfile> software;  // what the plan was priced for
  Json prediction = Json::object();
  Json extra = Json::object();  // alternatives, search, megatron_*: passed through
};

// `require_program`: refuse a plan without "program" (what simulate and train need); false reads
// one anyway (has_program = false), e.g. to give a hand-written plan its Program.
Result<PlanFile> PlanFromJson(const Json& j, bool require_program = true);
Result<PlanFile> ReadPlanFile(const std::string& path, bool require_program = true);
// The stack a plan was priced for: its "software", or for a plan written before software
// profiles the one they priced, megatron-lm-2021.
Result<SoftwareProfile> PlanSoftware(const PlanFile& p);
// Writes version 2; "program" when has_program, "software" when set.
OrderedJson PlanToJson(const PlanFile& p);

}  // namespace ptdp
