#include "core/plan_file.h"

#include "core/checked.h"

namespace ptdp {

namespace {

constexpr int kPlanVersion = 2;  // 2: "program" added

}  // namespace

Result<PlanFile> PlanFromJson(const Json& j, bool require_program) {
  PlanFile p;
  JsonObjectReader r(j, "plan");
  int version = 0;
  r.Required("ptdp_plan_version", &version);
  r.Required("global_batch", &p.layout.global_batch);
  const Json* model = r.Child("model", true);
  const Json* cluster = r.Child("cluster", true);
  const Json* layout = r.Child("layout", true);
  const Json* program = r.Child("program", false);
  const Json* software = r.Child("software", false);
  // These copies recurse over the tree; ParseJson's depth limit has already bounded it.
  if (const Json* pred = r.Child("prediction", false)) p.prediction = *pred;
  for (const char* k : {"alternatives", "search", "megatron_args", "megatron_env",
                        "megatron_layout", "megatron_note", "generated_by"}) {
    if (const Json* x = r.Child(k, false)) p.extra[k] = *x;
  }
  PTDP_RETURN_IF_ERROR(r.Finish());
  if (version != 1 && version != kPlanVersion) {
    return Status::Invalid("plan.ptdp_plan_version: " + std::to_string(version) +
                           " is not a version this ptdp reads (1, 2)");
  }
  PTDP_ASSIGN_OR_RETURN(p.model, ModelFromJson(*model, "plan.model"));
  {
    JsonObjectReader c(*cluster, "plan.cluster");
    c.Required("name", &p.cluster.name);
    c.Required("gpus", &p.cluster.gpus);
    c.Required("gpus_per_node", &p.cluster.gpus_per_node);
    PTDP_RETURN_IF_ERROR(c.Finish());
    PTDP_RETURN_IF_ERROR(
        CheckRange("plan.cluster.gpus", int64_t(p.cluster.gpus), 1, kMaxWorldSize));
    PTDP_RETURN_IF_ERROR(
        CheckRange("plan.cluster.gpus_per_node", int64_t(p.cluster.gpus_per_node), 1, 1024));
  }
  PTDP_ASSIGN_OR_RETURN(p.layout, LayoutFromJson(*layout, "plan.layout", p.layout));
  Status v = p.layout.Validate(p.model);
  if (!v.ok()) return v.WithPrefix("plan.layout");
  if (p.layout.WorldSize() != p.cluster.gpus) {
    return Status::Invalid("plan.cluster.gpus: " + std::to_string(p.cluster.gpus) +
                           " differs from tp*pp*dp = " + std::to_string(p.layout.WorldSize()));
  }
  if (software != nullptr) {
    PTDP_ASSIGN_OR_RETURN(p.software, SoftwareProfileFromJson(*software, "plan.software"));
  }
  if (program != nullptr) {
    auto prog = ProgramFromJson(*program);
    // ProgramFromJson names its keys from "program": "plan.program.ranks[1].instrs[4]: ...".
    if (!prog.ok()) return Status::Invalid("plan." + prog.status().message());
    p.program = std::move(prog).value();
    p.has_program = true;
  } else if (require_program) {
    return Status::Invalid(version == 1
                               ? "plan.program: missing (plan file version 1; re-run ptdp plan)"
                               : "plan.program: missing");
  }
  return p;
}

Result<PlanFile> ReadPlanFile(const std::string& path, bool require_program) {
  PTDP_ASSIGN_OR_RETURN(Json j, ReadJsonFile(path, kMaxPlanFileBytes));
  auto p = PlanFromJson(j, require_program);
  if (!p.ok()) return p.status().WithPrefix(path);
  return p;
}

Result<SoftwareProfile> PlanSoftware(const PlanFile& p) {
  if (p.software) return *p.software;
  return LoadSoftware(kPaperSoftware);
}

OrderedJson PlanToJson(const PlanFile& p) {
  OrderedJson j;
  j["ptdp_plan_version"] = kPlanVersion;
  j["model"] = ModelToJson(p.model);
  j["cluster"] = {{"name", p.cluster.name},
                  {"gpus", p.cluster.gpus},
                  {"gpus_per_node", p.cluster.gpus_per_node}};
  j["global_batch"] = p.layout.global_batch;
  j["layout"] = LayoutToJson(p.layout);
  if (p.software) j["software"] = SoftwareProfileToJson(*p.software);
  if (p.has_program) j["program"] = ProgramToJson(p.program);
  j["prediction"] = OrderedJson::parse(p.prediction.dump());
  for (auto it = p.extra.begin(); it != p.extra.end(); ++it) {
    j[it.key()] = OrderedJson::parse(it.value().dump());
  }
  return j;
}

}  // namespace ptdp
