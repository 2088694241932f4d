// Plan files (`--plan FILE`): ParseJson + PlanFromJson (model, cluster reference, layout, Program,
// prediction and the passed-through keys), then what `ptdp simulate --plan` does with an accepted
// plan whose cluster is a built-in preset: the layout's checks, the Program against its layout,
// the cost table and the simulation of the plan's Program.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/cluster.h"
#include "core/plan_file.h"
#include "costmodel/estimate.h"
#include "fuzz/fuzz_util.h"
#include "schedule/schedule.h"
#include "simulator/refine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptdp;
  auto j = ParseJson(fuzz::AsString(data, size), "plan");
  if (!j.ok()) return 0;
  auto plan = PlanFromJson(*j, /*require_program=*/false);
  if (!plan.ok()) return 0;
  (void)PlanToJson(*plan).dump();
  bool preset = false;
  for (const auto& e : EmbeddedProfiles()) preset |= plan->cluster.name == e.name;
  if (!preset || !plan->has_program) return 0;  // files are the cluster fuzzer's
  auto cluster = LoadCluster(plan->cluster.name, plan->cluster.gpus);
  if (!cluster.ok()) return 0;
  if (plan->software) cluster->software = *plan->software;  // its overlaps, as simulate prices it
  if (!plan->layout.Validate(plan->model).ok()) return 0;
  if (plan->layout.WorldSize() != cluster->Gpus()) return 0;
  if (!schedule::CheckProgramMatchesLayout(plan->program, plan->model, plan->layout).ok()) return 0;
  (void)sim::SimulateLayout(plan->model, *cluster, plan->layout, sim::SimOptions(), false, nullptr,
                            &plan->program);
  return 0;
}
