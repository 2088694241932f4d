#include "core/software.h"

#include <algorithm>
#include <filesystem>
#include <utility>

namespace ptdp {

namespace {

// Bounds: a fraction is a share; a bucket of more than 1e12 parameters or more than 64 bytes
// moved per parameter element to add two gradients describe no stack.
constexpr double kMaxFraction = 1;
constexpr double kMaxBucketParams = 1e12;
constexpr double kMaxBytesPerParam = 64;
constexpr double kMaxCount = 100;

// {"value": true | false, "source": "<non-empty>"}
Status ReadFlag(JsonObjectReader& parent, const std::string& key, SourcedFlag* out) {
  return ReadValueWithSource(parent, key, &out->value, &out->source,
                             "{\"value\": true | false, \"source\"}", "fact");
}

OrderedJson FlagJson(const SourcedFlag& f) {
  return OrderedJson{{"value", f.value}, {"source", f.source}};
}

std::vector<std::pair<const char*, SourcedFlag*>> SearchFlags(SoftwareSearchDefaults& s) {
  return {{"sequence_parallel", &s.sequence_parallel},
          {"selective_recompute", &s.selective_recompute},
          {"distributed_optimizer", &s.distributed_optimizer},
          {"fused_attention", &s.fused_attention},
          {"grad_accumulation_fusion", &s.grad_accumulation_fusion}};
}

Status ReadSearch(JsonObjectReader& parent, SoftwareSearchDefaults* out) {
  const Json* v = parent.Child("search", true);
  PTDP_RETURN_IF_ERROR(parent.status());
  const std::string path = parent.PathOf("search");
  if (!v->is_object())
    return Status::Invalid(path + ": expected an object, got " + JsonTypeName(*v));
  JsonObjectReader r(*v, path);
  for (auto [key, flag] : SearchFlags(*out)) PTDP_RETURN_IF_ERROR(ReadFlag(r, key, flag));
  if (r.Has("context_parallel")) {  // optional: a profile without it searches cp = 1 only
    PTDP_RETURN_IF_ERROR(ReadFlag(r, "context_parallel", &out->context_parallel));
  }
  return r.Finish();
}

Status ReadDdpVariant(JsonObjectReader& parent, std::optional<DdpVariant>* out) {
  if (!parent.Has("torch_ddp")) return Status::Ok();
  const Json* v = parent.Child("torch_ddp", true);
  PTDP_RETURN_IF_ERROR(parent.status());
  const std::string path = parent.PathOf("torch_ddp");
  if (!v->is_object())
    return Status::Invalid(path + ": expected an object, got " + JsonTypeName(*v));
  JsonObjectReader r(*v, path);
  DdpVariant d;
  r.Optional("about", &d.about);
  PTDP_RETURN_IF_ERROR(r.status());
  PTDP_RETURN_IF_ERROR(ReadFlag(r, "overlap_grad_reduce", &d.overlap_grad_reduce));
  PTDP_RETURN_IF_ERROR(
      ReadSourced(r, "grad_bucket_params", &d.grad_bucket_params, kMaxBucketParams));
  PTDP_RETURN_IF_ERROR(ReadSourced(r, "grad_bucket_params_per_dp_rank",
                                   &d.grad_bucket_params_per_dp_rank, kMaxBucketParams, true));
  PTDP_RETURN_IF_ERROR(ReadSourced(r, "ddp_grad_copy_bytes_per_param",
                                   &d.ddp_grad_copy_bytes_per_param, kMaxBytesPerParam, true));
  PTDP_RETURN_IF_ERROR(
      ReadSourced(r, "overlap_compute_slowdown", &d.overlap_compute_slowdown, kMaxFraction, true));
  PTDP_RETURN_IF_ERROR(r.Finish());
  *out = std::move(d);
  return Status::Ok();
}

OrderedJson DdpVariantJson(const DdpVariant& d) {
  OrderedJson j;
  j["about"] = d.about;
  j["overlap_grad_reduce"] = FlagJson(d.overlap_grad_reduce);
  j["grad_bucket_params"] = SourcedJson(d.grad_bucket_params);
  j["grad_bucket_params_per_dp_rank"] = SourcedJson(d.grad_bucket_params_per_dp_rank);
  j["ddp_grad_copy_bytes_per_param"] = SourcedJson(d.ddp_grad_copy_bytes_per_param);
  j["overlap_compute_slowdown"] = SourcedJson(d.overlap_compute_slowdown);
  return j;
}

}  // namespace

Result<SoftwareProfile> SoftwareProfile::WithTorchDdp() const {
  if (!torch_ddp) {
    return Status::Invalid("software profile " + name + ": states no torch_ddp facts");
  }
  SoftwareProfile p = *this;
  p.overlap_grad_reduce = torch_ddp->overlap_grad_reduce;
  p.grad_bucket_params = torch_ddp->grad_bucket_params;
  p.grad_bucket_params_per_dp_rank = torch_ddp->grad_bucket_params_per_dp_rank;
  p.ddp_grad_copy_bytes_per_param = torch_ddp->ddp_grad_copy_bytes_per_param;
  p.overlap_compute_slowdown = torch_ddp->overlap_compute_slowdown;
  return p;
}

double SoftwareProfile::BucketParams(int dp) const {
  return std::max({1.0, grad_bucket_params.value, grad_bucket_params_per_dp_rank.value * dp});
}

Result<SoftwareProfile> SoftwareProfileFromJson(const Json& j, const std::string& path) {
  SoftwareProfile p;
  if (!j.is_object()) return Status::Invalid(path + ": expected an object, got " + JsonTypeName(j));
  JsonObjectReader r(j, path);
  r.Required("name", &p.name);
  r.Optional("about", &p.about);
  PTDP_RETURN_IF_ERROR(r.status());
  if (p.name.empty()) return Status::Invalid(r.PathOf("name") + ": must not be empty");
  PTDP_RETURN_IF_ERROR(
      ReadSourced(r, "tp_comm_overlap_fraction", &p.tp_comm_overlap_fraction, kMaxFraction, true));
  PTDP_RETURN_IF_ERROR(
      ReadSourced(r, "overlap_compute_slowdown", &p.overlap_compute_slowdown, kMaxFraction, true));
  PTDP_RETURN_IF_ERROR(ReadFlag(r, "overlap_grad_reduce", &p.overlap_grad_reduce));
  PTDP_RETURN_IF_ERROR(ReadFlag(r, "overlap_param_gather", &p.overlap_param_gather));
  PTDP_RETURN_IF_ERROR(
      ReadSourced(r, "grad_bucket_params", &p.grad_bucket_params, kMaxBucketParams));
  PTDP_RETURN_IF_ERROR(ReadSourced(r, "grad_bucket_params_per_dp_rank",
                                   &p.grad_bucket_params_per_dp_rank, kMaxBucketParams, true));
  PTDP_RETURN_IF_ERROR(ReadSourced(r, "grad_accumulate_bytes_per_param",
                                   &p.grad_accumulate_bytes_per_param, kMaxBytesPerParam, true));
  PTDP_RETURN_IF_ERROR(ReadSourced(r, "ddp_grad_copy_bytes_per_param",
                                   &p.ddp_grad_copy_bytes_per_param, kMaxBytesPerParam, true));
  PTDP_RETURN_IF_ERROR(
      ReadSourced(r, "host_sync_gaps_per_pass", &p.host_sync_gaps_per_pass, kMaxCount, true));
  PTDP_RETURN_IF_ERROR(
      ReadSourced(r, "optimizer_small_allreduces", &p.optimizer_small_allreduces, kMaxCount, true));
  PTDP_RETURN_IF_ERROR(ReadSourced(r, "loss_dp_allreduces_per_microbatch",
                                   &p.loss_dp_allreduces_per_microbatch, kMaxCount, true));
  if (r.Has("gelu_gemm_epilogue")) {
    PTDP_RETURN_IF_ERROR(ReadFlag(r, "gelu_gemm_epilogue", &p.gelu_gemm_epilogue));
  }
  if (r.Has("te_layer")) PTDP_RETURN_IF_ERROR(ReadFlag(r, "te_layer", &p.te_layer));
  if (r.Has("context_parallel_collectives")) {
    PTDP_RETURN_IF_ERROR(
        ReadFlag(r, "context_parallel_collectives", &p.context_parallel_collectives));
  }
  for (auto [key, flag] :
       {std::pair{"fused_cross_entropy", &p.fused_cross_entropy},
        std::pair{"fused_optimizer_step", &p.fused_optimizer_step},
        std::pair{"optimizer_main_grads_in_place", &p.optimizer_main_grads_in_place}}) {
    if (r.Has(key)) PTDP_RETURN_IF_ERROR(ReadFlag(r, key, flag));
  }
  for (auto [key, fact] : {std::pair{"grad_buffer_passes", &p.grad_buffer_passes},
                           std::pair{"grad_scale_passes", &p.grad_scale_passes}}) {
    if (r.Has(key)) PTDP_RETURN_IF_ERROR(ReadSourced(r, key, fact, kMaxCount, true));
  }
  PTDP_RETURN_IF_ERROR(ReadDdpVariant(r, &p.torch_ddp));
  PTDP_RETURN_IF_ERROR(ReadSearch(r, &p.search));
  PTDP_RETURN_IF_ERROR(r.Finish());
  // Megatron-LM gathers parameters only where the distributed optimizer sharded them.
  if (p.overlap_param_gather.value && !p.search.distributed_optimizer.value) {
    return Status::Invalid(r.PathOf("overlap_param_gather") +
                           ": needs search.distributed_optimizer (only the distributed optimizer "
                           "gathers parameters)");
  }
  return p;
}

OrderedJson SoftwareProfileToJson(const SoftwareProfile& p) {
  OrderedJson j;
  j["name"] = p.name;
  j["about"] = p.about;
  j["tp_comm_overlap_fraction"] = SourcedJson(p.tp_comm_overlap_fraction);
  j["overlap_compute_slowdown"] = SourcedJson(p.overlap_compute_slowdown);
  j["overlap_grad_reduce"] = FlagJson(p.overlap_grad_reduce);
  j["overlap_param_gather"] = FlagJson(p.overlap_param_gather);
  j["grad_bucket_params"] = SourcedJson(p.grad_bucket_params);
  j["grad_bucket_params_per_dp_rank"] = SourcedJson(p.grad_bucket_params_per_dp_rank);
  j["grad_accumulate_bytes_per_param"] = SourcedJson(p.grad_accumulate_bytes_per_param);
  j["ddp_grad_copy_bytes_per_param"] = SourcedJson(p.ddp_grad_copy_bytes_per_param);
  j["host_sync_gaps_per_pass"] = SourcedJson(p.host_sync_gaps_per_pass);
  j["optimizer_small_allreduces"] = SourcedJson(p.optimizer_small_allreduces);
  j["loss_dp_allreduces_per_microbatch"] = SourcedJson(p.loss_dp_allreduces_per_microbatch);
  if (!p.gelu_gemm_epilogue.source.empty()) {
    j["gelu_gemm_epilogue"] = FlagJson(p.gelu_gemm_epilogue);
  }
  if (!p.te_layer.source.empty()) j["te_layer"] = FlagJson(p.te_layer);
  if (!p.context_parallel_collectives.source.empty()) {
    j["context_parallel_collectives"] = FlagJson(p.context_parallel_collectives);
  }
  if (!p.grad_buffer_passes.source.empty()) {
    j["grad_buffer_passes"] = SourcedJson(p.grad_buffer_passes);
  }
  if (!p.grad_scale_passes.source.empty())
    j["grad_scale_passes"] = SourcedJson(p.grad_scale_passes);
  if (!p.fused_cross_entropy.source.empty()) {
    j["fused_cross_entropy"] = FlagJson(p.fused_cross_entropy);
  }
  if (!p.fused_optimizer_step.source.empty()) {
    j["fused_optimizer_step"] = FlagJson(p.fused_optimizer_step);
  }
  if (!p.optimizer_main_grads_in_place.source.empty()) {
    j["optimizer_main_grads_in_place"] = FlagJson(p.optimizer_main_grads_in_place);
  }
  if (p.torch_ddp) j["torch_ddp"] = DdpVariantJson(*p.torch_ddp);
  SoftwareSearchDefaults search = p.search;
  OrderedJson s;
  for (auto [key, flag] : SearchFlags(search)) s[key] = FlagJson(*flag);
  if (!search.context_parallel.source.empty()) {
    s["context_parallel"] = FlagJson(search.context_parallel);
  }
  j["search"] = s;
  return j;
}

Result<SoftwareProfile> LoadSoftware(const std::string& name_or_path) {
  for (const auto& e : EmbeddedSoftwareProfiles()) {
    if (name_or_path != e.name) continue;
    auto j = ParseJson(e.json, std::string("built-in software profile ") + e.name);
    if (!j.ok()) return Status::Internal(j.status().message());
    return SoftwareProfileFromJson(*j, name_or_path);
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(name_or_path, ec)) {
    std::string names;
    for (const auto& e : EmbeddedSoftwareProfiles())
      names += (names.empty() ? "" : ", ") + std::string(e.name);
    return Status::NotFound("--software: \"" + name_or_path +
                            "\" is neither a built-in software profile (" + names +
                            ") nor a regular file");
  }
  PTDP_ASSIGN_OR_RETURN(Json j, ReadJsonFile(name_or_path));
  return SoftwareProfileFromJson(j, name_or_path);
}

}  // namespace ptdp
