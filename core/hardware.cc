#include "core/hardware.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <iterator>
#include <utility>

#include "core/checked.h"
#include "core/collective.h"

namespace ptdp {

namespace {

// Upper bounds of profile figures: far above any machine of today (an H100 is 989 TFLOP/s,
// 80 GiB, 3.35 TB/s), low enough that no derived time or size overflows. Listed in
// core/hardware.h.
constexpr double kMaxTflops = kMaxProfileTflops;
constexpr double kMaxGBps = 1e5;
constexpr double kMaxGiB = 1e5;
constexpr double kMaxMicroseconds = 1e6;
constexpr double kMaxCount = 1e5;  // SMs, tile sizes
constexpr double kMaxGpusPerNode = 1024;
constexpr double kMaxGemmDim = kMaxProfileGemmDim;
constexpr double kMaxEfficiency = 100;        // a multiple of a table's throughput
constexpr double kMaxFp8GemmSpeedup = 10;     // FP8 against bf16 at one shape
constexpr double kMaxGlogitsPerSecond = 1e5;  // cross-entropy throughput, 1e9 logits/s
constexpr double kMaxGelemsPerSecond = 1e5;   // GeLU throughput, 1e9 elements/s
constexpr double kMaxGparamsPerSecond = 1e5;  // optimizer step, 1e9 parameters/s

constexpr double kMaxCurveBytes = 1e15;

Status ReadCurve(const Json& j, const std::string& path, BusbwCurve* out) {
  if (!j.is_object()) return Status::Invalid(path + ": expected an object, got " + JsonTypeName(j));
  JsonObjectReader r(j, path);
  r.Required("collective", &out->collective);
  r.Optional("ranks", &out->ranks);
  r.Required("source", &out->source);
  r.Required("bytes", &out->bytes);
  r.Required("busbw_GBps", &out->busbw_GBps);
  PTDP_RETURN_IF_ERROR(r.Finish());
  const std::string& c = out->collective;
  if (std::none_of(std::begin(kCollectives), std::end(kCollectives),
                   [&](Collective k) { return c == CollectiveName(k); })) {
    return Status::Invalid(path + ".collective: \"" + c +
                           "\" is not all_reduce, all_gather, reduce_scatter or send_recv");
  }
  if (out->source.empty())
    return Status::Invalid(path + ".source: must name where the points come from");
  if (out->ranks < 0 || out->ranks > 1048576)
    return Status::Invalid(path + ".ranks: " + std::to_string(out->ranks) +
                           " is outside [0, 2^20]");
  if (out->bytes.empty() || out->bytes.size() != out->busbw_GBps.size()) {
    return Status::Invalid(path + ".bytes: needs at least one point and one busbw_GBps per size");
  }
  for (size_t i = 0; i < out->bytes.size(); ++i) {
    const double b = out->bytes[i];
    if (!(b > 0) || !(b <= kMaxCurveBytes) || (i > 0 && !(b > out->bytes[i - 1]))) {
      return Status::Invalid(path + ".bytes: must be in (0, " + FormatDouble(kMaxCurveBytes) +
                             "] and strictly increasing");
    }
    const double bw = out->busbw_GBps[i];
    if (!(bw > 0) || !(bw <= kMaxGBps)) {
      return Status::Invalid(path + ".busbw_GBps: entry " + std::to_string(i) + ": " +
                             FormatDouble(bw) + " is outside (0, " + FormatDouble(kMaxGBps) + "]");
    }
  }
  return Status::Ok();
}

// {"value": "ring" | "hierarchical", "source": "<non-empty>"}
Status ReadAlgorithm(JsonObjectReader& parent, LinkProfile* out) {
  const Json* v = parent.Child("algorithm", false);
  const std::string path = parent.PathOf("algorithm");
  if (!v->is_object()) {
    return Status::Invalid(path + ": expected an object {\"value\": \"ring\" | " +
                           "\"hierarchical\", \"source\"}, got " + JsonTypeName(*v));
  }
  JsonObjectReader r(*v, path);
  r.Required("value", &out->algorithm);
  r.Required("source", &out->algorithm_source);
  PTDP_RETURN_IF_ERROR(r.Finish());
  if (out->algorithm != "ring" && out->algorithm != kHierarchical)
    return Status::Invalid(path + ".value: \"" + out->algorithm + "\" is not ring or hierarchical");
  if (out->algorithm_source.empty())
    return Status::Invalid(path + ".source: must say why NCCL runs this algorithm here");
  return Status::Ok();
}

Status ReadLink(JsonObjectReader& parent, const std::string& key, LinkProfile* out) {
  const Json* v = parent.Child(key, true);
  PTDP_RETURN_IF_ERROR(parent.status());
  const std::string path = parent.PathOf(key);
  if (!v->is_object())
    return Status::Invalid(path + ": expected an object, got " + JsonTypeName(*v));
  JsonObjectReader r(*v, path);
  r.Required("name", &out->name);
  PTDP_RETURN_IF_ERROR(r.status());
  PTDP_RETURN_IF_ERROR(ReadSourced(r, "latency_us", &out->latency_us, kMaxMicroseconds, true));
  PTDP_RETURN_IF_ERROR(
      ReadSourced(r, "all_reduce_busbw_GBps", &out->all_reduce_busbw_GBps, kMaxGBps));
  PTDP_RETURN_IF_ERROR(
      ReadSourced(r, "all_gather_busbw_GBps", &out->all_gather_busbw_GBps, kMaxGBps));
  PTDP_RETURN_IF_ERROR(
      ReadSourced(r, "reduce_scatter_busbw_GBps", &out->reduce_scatter_busbw_GBps, kMaxGBps));
  PTDP_RETURN_IF_ERROR(ReadSourced(r, "send_recv_GBps", &out->send_recv_GBps, kMaxGBps));
  if (r.Has("algorithm")) {
    if (key != "inter_node")
      return Status::Invalid(r.PathOf("algorithm") + ": only the inter_node link has one");
    PTDP_RETURN_IF_ERROR(ReadAlgorithm(r, out));
  }
  if (r.Has("busbw_curves")) {
    const Json* curves = r.Child("busbw_curves", false);
    const std::string cpath = r.PathOf("busbw_curves");
    if (!curves->is_array())
      return Status::Invalid(cpath + ": expected a list, got " + JsonTypeName(*curves));
    for (size_t i = 0; i < curves->size(); ++i) {
      BusbwCurve c;
      PTDP_RETURN_IF_ERROR(ReadCurve((*curves)[i], cpath + "[" + std::to_string(i) + "]", &c));
      out->busbw_curves.push_back(std::move(c));
    }
  }
  return r.Finish();
}

Status ReadGemm(JsonObjectReader& parent, const std::string& key, GemmTable* out) {
  const Json* v = parent.Child(key, true);
  PTDP_RETURN_IF_ERROR(parent.status());
  const std::string path = parent.PathOf(key);
  if (!v->is_object())
    return Status::Invalid(path + ": expected an object, got " + JsonTypeName(*v));
  JsonObjectReader r(*v, path);
  r.Required("dtype", &out->dtype);
  r.Required("source", &out->source);
  r.Required("m", &out->m);
  r.Required("n", &out->n);
  r.Required("k", &out->k);
  r.Required("tflops", &out->tflops);
  PTDP_RETURN_IF_ERROR(r.Finish());
  if (out->source.empty())
    return Status::Invalid(path + ".source: must name where the table comes from");
  if (out->dtype != "fp16" && out->dtype != "bf16" && out->dtype != "fp32") {
    return Status::Invalid(path + ".dtype: \"" + out->dtype + "\" is not fp16, bf16 or fp32");
  }
  return ValidateGemmTable(*out, path);
}

// {"value": "fp32" | "bf16" | "fp16", "source": "<non-empty>"}
Status ReadPrecision(JsonObjectReader& parent, HardwareProfile* out) {
  const Json* v = parent.Child("precision", true);
  PTDP_RETURN_IF_ERROR(parent.status());
  const std::string path = parent.PathOf("precision");
  if (!v->is_object()) {
    return Status::Invalid(path + ": expected an object {\"value\": \"fp32\" | \"bf16\" | " +
                           "\"fp16\", \"source\"}, got " + JsonTypeName(*v));
  }
  JsonObjectReader r(*v, path);
  std::string value;
  r.Required("value", &value);
  r.Required("source", &out->precision_source);
  PTDP_RETURN_IF_ERROR(r.Finish());
  if (out->precision_source.empty())
    return Status::Invalid(path + ".source: must say why the machine trains in this precision");
  PTDP_ASSIGN_OR_RETURN(out->precision, ParsePrecision(value, path + ".value"));
  return Status::Ok();
}

OrderedJson LinkJson(const LinkProfile& l) {
  OrderedJson j;
  j["name"] = l.name;
  j["latency_us"] = SourcedJson(l.latency_us);
  j["all_reduce_busbw_GBps"] = SourcedJson(l.all_reduce_busbw_GBps);
  j["all_gather_busbw_GBps"] = SourcedJson(l.all_gather_busbw_GBps);
  j["reduce_scatter_busbw_GBps"] = SourcedJson(l.reduce_scatter_busbw_GBps);
  j["send_recv_GBps"] = SourcedJson(l.send_recv_GBps);
  if (!l.algorithm.empty()) {
    j["algorithm"] = {{"value", l.algorithm}, {"source", l.algorithm_source}};
  }
  if (!l.busbw_curves.empty()) {
    OrderedJson curves = OrderedJson::array();
    for (const BusbwCurve& c : l.busbw_curves) {
      OrderedJson cj;
      cj["collective"] = c.collective;
      if (c.ranks > 0) cj["ranks"] = c.ranks;
      cj["source"] = c.source;
      cj["bytes"] = c.bytes;
      cj["busbw_GBps"] = c.busbw_GBps;
      curves.push_back(std::move(cj));
    }
    j["busbw_curves"] = std::move(curves);
  }
  return j;
}

}  // namespace

// {"value": <number in (0, hi], or [0, hi] with allow_zero>, "source": "<non-empty>"}
Status ReadSourced(JsonObjectReader& parent, const std::string& key, Sourced* out, double hi,
                   bool allow_zero) {
  PTDP_RETURN_IF_ERROR(ReadValueWithSource(parent, key, &out->value, &out->source,
                                           "{\"value\", \"source\"}", "number"));
  const std::string path = parent.PathOf(key);
  if (!std::isfinite(out->value) || out->value < 0 || (!allow_zero && out->value == 0) ||
      out->value > hi) {
    return Status::Invalid(path + ".value: " + FormatDouble(out->value) + " is outside " +
                           (allow_zero ? "[0, " : "(0, ") + FormatDouble(hi) + "]");
  }
  return Status::Ok();
}

OrderedJson SourcedJson(const Sourced& s) {
  return OrderedJson{{"value", s.value}, {"source", s.source}};
}

Status ValidateGemmTable(const GemmTable& g, const std::string& path) {
  for (const auto* axis : {&g.m, &g.n, &g.k}) {
    const char* name = axis == &g.m ? "m" : axis == &g.n ? "n" : "k";
    if (axis->empty()) return Status::Invalid(path + "." + name + ": must not be empty");
    for (size_t i = 0; i < axis->size(); ++i) {
      if (!((*axis)[i] > 0) || !((*axis)[i] <= kMaxGemmDim) ||
          (i > 0 && !((*axis)[i] > (*axis)[i - 1]))) {
        return Status::Invalid(path + "." + name + ": must be in (0, " + FormatDouble(kMaxGemmDim) +
                               "] and strictly increasing");
      }
    }
  }
  const size_t want = g.m.size() * g.n.size() * g.k.size();
  if (g.tflops.size() != want) {
    return Status::Invalid(path + ".tflops: has " + std::to_string(g.tflops.size()) +
                           " entries, the grid needs |m| |n| |k| = " + std::to_string(want));
  }
  for (size_t i = 0; i < g.tflops.size(); ++i) {
    if (!(g.tflops[i] > 0) || !(g.tflops[i] <= kMaxTflops)) {
      return Status::Invalid(path + ".tflops: entry " + std::to_string(i) + ": " +
                             FormatDouble(g.tflops[i]) + " is outside (0, " +
                             FormatDouble(kMaxTflops) + "]");
    }
  }
  return Status::Ok();
}

namespace {

// The GeLU's two rates: a layer's GeLU is priced by its elements only with both (one direction's
// bytes at memory_bound_GBps beside the other's measured rate would mix two methods in one pass).
Status ReadGeluRates(JsonObjectReader& r, HardwareProfile* p) {
  const bool forward = r.Has("gelu_forward_Gelems_per_s"),
             backward = r.Has("gelu_backward_Gelems_per_s");
  if (forward != backward) {
    return Status::Invalid(
        r.PathOf(forward ? "gelu_forward_Gelems_per_s" : "gelu_backward_Gelems_per_s") +
        ": needs " + (forward ? "gelu_backward_Gelems_per_s" : "gelu_forward_Gelems_per_s") +
        " too (the GeLU is priced by its elements in both directions or neither)");
  }
  if (!forward) return Status::Ok();
  PTDP_RETURN_IF_ERROR(ReadSourced(r, "gelu_forward_Gelems_per_s", &p->gelu_forward_Gelems_per_s,
                                   kMaxGelemsPerSecond));
  return ReadSourced(r, "gelu_backward_Gelems_per_s", &p->gelu_backward_Gelems_per_s,
                     kMaxGelemsPerSecond);
}

// The GeLU epilogues' two rates, both or neither: the cost model replaces the whole bias-GeLU pass
// (forward and backward) by them, so one alone would leave a direction without a price.
Status ReadEpilogueRates(JsonObjectReader& r, HardwareProfile* p) {
  const bool forward = r.Has("gelu_epilogue_Gelems_per_s"),
             backward = r.Has("dgelu_epilogue_Gelems_per_s");
  if (forward != backward) {
    return Status::Invalid(
        r.PathOf(forward ? "gelu_epilogue_Gelems_per_s" : "dgelu_epilogue_Gelems_per_s") +
        ": needs " + (forward ? "dgelu_epilogue_Gelems_per_s" : "gelu_epilogue_Gelems_per_s") +
        " too (the GeLU runs in the GEMMs' epilogues in both directions or neither)");
  }
  if (forward) {
    PTDP_RETURN_IF_ERROR(ReadSourced(r, "gelu_epilogue_Gelems_per_s",
                                     &p->gelu_epilogue_Gelems_per_s, kMaxEpilogueGelemsPerSecond));
    PTDP_RETURN_IF_ERROR(ReadSourced(r, "dgelu_epilogue_Gelems_per_s",
                                     &p->dgelu_epilogue_Gelems_per_s, kMaxEpilogueGelemsPerSecond));
  }
  if (!r.Has("bias_grad_Gelems_per_s")) return Status::Ok();
  return ReadSourced(r, "bias_grad_Gelems_per_s", &p->bias_grad_Gelems_per_s, kMaxGelemsPerSecond);
}

// The calibration block is provenance, kept as written; it must say what was fitted to what.
Status ReadCalibration(JsonObjectReader& parent, Json* out) {
  const Json* v = parent.Child("calibration", false);
  const std::string path = parent.PathOf("calibration");
  if (!v->is_object())
    return Status::Invalid(path + ": expected an object, got " + JsonTypeName(*v));
  const auto text = [&](const char* key) {
    const auto it = v->find(key);
    return it != v->end() && it->is_string() && !it->get<std::string>().empty();
  };
  for (const char* key : {"tool", "date", "plan"}) {
    if (!text(key))
      return Status::Invalid(path + "." + key + ": missing or not a non-empty string");
  }
  // What it was fitted to: a trace, an op table (`ptdp calibrate --op-times`), or both.
  if (!text("trace") && !text("op_times")) {
    return Status::Invalid(path + ".trace: missing or not a non-empty string (nor op_times)");
  }
  *out = *v;
  return Status::Ok();
}

}  // namespace

Result<HardwareProfile> HardwareProfileFromJson(const Json& j, const std::string& path) {
  HardwareProfile p;
  if (!j.is_object()) return Status::Invalid(path + ": expected an object, got " + JsonTypeName(j));
  JsonObjectReader r(j, path);
  r.Required("name", &p.name);
  r.Optional("about", &p.about);
  PTDP_RETURN_IF_ERROR(r.status());
  if (r.Has("training_precision")) {
    return Status::Invalid(r.PathOf("training_precision") +
                           ": renamed to \"precision\": {\"value\": \"fp32\" | \"bf16\" | "
                           "\"fp16\", \"source\": ...}");
  }
  PTDP_RETURN_IF_ERROR(ReadPrecision(r, &p));
  PTDP_RETURN_IF_ERROR(ReadSourced(r, "gpus_per_node", &p.gpus_per_node, kMaxGpusPerNode));
  PTDP_RETURN_IF_ERROR(ReadSourced(r, "peak_tflops", &p.peak_tflops, kMaxTflops));
  PTDP_RETURN_IF_ERROR(ReadSourced(r, "memory_GiB", &p.memory_GiB, kMaxGiB));
  PTDP_RETURN_IF_ERROR(ReadSourced(r, "hbm_GBps", &p.hbm_GBps, kMaxGBps));
  PTDP_RETURN_IF_ERROR(ReadSourced(r, "memory_bound_GBps", &p.memory_bound_GBps, kMaxGBps));
  PTDP_RETURN_IF_ERROR(ReadSourced(r, "workspace_GiB", &p.workspace_GiB, kMaxGiB, true));
  PTDP_RETURN_IF_ERROR(
      ReadSourced(r, "kernel_launch_us", &p.kernel_launch_us, kMaxMicroseconds, true));
  PTDP_RETURN_IF_ERROR(ReadGemm(r, "gemm", &p.gemm));
  for (auto [key, table] : {std::pair{"gemm_backward_data", &p.gemm_backward_data},
                            std::pair{"gemm_backward_weight", &p.gemm_backward_weight}}) {
    if (!r.Has(key)) continue;
    PTDP_RETURN_IF_ERROR(ReadGemm(r, key, table));
    if (table->dtype != p.gemm.dtype) {
      return Status::Invalid(r.PathOf(key) + ".dtype: " + table->dtype +
                             " differs from gemm.dtype " + p.gemm.dtype);
    }
  }
  if (r.Has("gemm_points")) {
    // Priced in place of the backward tables' rates too, so it needs them: a profile prices a
    // Linear's backward from measured kernels or from the forward table, never a mix by shape.
    if (p.gemm_backward_data.empty() || p.gemm_backward_weight.empty()) {
      return Status::Invalid(r.PathOf("gemm_points") +
                             ": needs gemm_backward_data and gemm_backward_weight (the grid of "
                             "the same kernels)");
    }
    PTDP_ASSIGN_OR_RETURN(
        p.gemm_points, GemmPointsFromJson(*r.Child("gemm_points", true), r.PathOf("gemm_points")));
  }
  // How gradients are accumulated is a fact of the training software, not of the machine.
  if (r.Has("grad_accumulate_bytes_per_param")) {
    return Status::Invalid(r.PathOf("grad_accumulate_bytes_per_param") +
                           ": moved to the software profile (profiles/software/*.json, "
                           "ptdp plan --software)");
  }
  if (r.Has("attention_tflops")) {
    PTDP_RETURN_IF_ERROR(ReadSourced(r, "attention_tflops", &p.attention_tflops, kMaxTflops));
  }
  if (r.Has("attention_dropout_tflops")) {
    if (!r.Has("attention_tflops")) {
      return Status::Invalid(r.PathOf("attention_dropout_tflops") +
                             ": needs attention_tflops (the rate of models without dropout)");
    }
    PTDP_RETURN_IF_ERROR(
        ReadSourced(r, "attention_dropout_tflops", &p.attention_dropout_tflops, kMaxTflops));
  }
  if (r.Has("attention_table")) {
    PTDP_ASSIGN_OR_RETURN(
        p.attention_table,
        AttentionTableFromJson(*r.Child("attention_table", true), r.PathOf("attention_table")));
  }
  if (r.Has("cross_entropy_Glogits_per_s")) {
    PTDP_RETURN_IF_ERROR(ReadSourced(r, "cross_entropy_Glogits_per_s",
                                     &p.cross_entropy_Glogits_per_s, kMaxGlogitsPerSecond));
  }
  PTDP_RETURN_IF_ERROR(ReadGeluRates(r, &p));
  PTDP_RETURN_IF_ERROR(ReadEpilogueRates(r, &p));
  if (r.Has("optimizer_Gparams_per_s")) {
    PTDP_RETURN_IF_ERROR(ReadSourced(r, "optimizer_Gparams_per_s", &p.optimizer_Gparams_per_s,
                                     kMaxGparamsPerSecond));
  }
  if (r.Has("fp8_peak_tflops")) {
    PTDP_RETURN_IF_ERROR(ReadSourced(r, "fp8_peak_tflops", &p.fp8_peak_tflops, kMaxTflops));
  }
  if (r.Has("fp8_gemm_speedup")) {
    if (!r.Has("fp8_peak_tflops")) {
      return Status::Invalid(r.PathOf("fp8_gemm_speedup") +
                             ": needs fp8_peak_tflops (a profile without it refuses fp8)");
    }
    PTDP_RETURN_IF_ERROR(
        ReadSourced(r, "fp8_gemm_speedup", &p.fp8_gemm_speedup, kMaxFp8GemmSpeedup));
  }
  if (r.Has("gemm_backward_efficiency")) {
    PTDP_RETURN_IF_ERROR(
        ReadSourced(r, "gemm_backward_efficiency", &p.gemm_backward_efficiency, kMaxEfficiency));
  }
  if (r.Has("device_share")) {
    PTDP_RETURN_IF_ERROR(ReadSourced(r, "device_share", &p.device_share, 1.0));
  }
  if (r.Has("calibration")) PTDP_RETURN_IF_ERROR(ReadCalibration(r, &p.calibration));
  if (r.Has("wave_quantization")) {
    const Json* w = r.Child("wave_quantization", false);
    const std::string wpath = r.PathOf("wave_quantization");
    if (!w->is_object())
      return Status::Invalid(wpath + ": expected an object, got " + JsonTypeName(*w));
    JsonObjectReader wr(*w, wpath);
    PTDP_RETURN_IF_ERROR(ReadSourced(wr, "sm_count", &p.sm_count, kMaxCount));
    PTDP_RETURN_IF_ERROR(ReadSourced(wr, "tile_m", &p.gemm_tile_m, kMaxCount));
    PTDP_RETURN_IF_ERROR(ReadSourced(wr, "tile_n", &p.gemm_tile_n, kMaxCount));
    PTDP_RETURN_IF_ERROR(wr.Finish());
  }
  PTDP_RETURN_IF_ERROR(ReadLink(r, "intra_node", &p.intra_node));
  PTDP_RETURN_IF_ERROR(ReadLink(r, "inter_node", &p.inter_node));
  PTDP_RETURN_IF_ERROR(r.Finish());
  if (p.gpus_per_node.value != std::floor(p.gpus_per_node.value)) {
    return Status::Invalid(path + ".gpus_per_node.value: must be an integer");
  }
  // A GEMM table measured in 16 bits says nothing of fp32 throughput, and the reverse.
  const bool gemm16 = p.gemm.dtype != "fp32";
  if (gemm16 != IsHalf(p.precision)) {
    return Status::Invalid(path + ".gemm.dtype: " + p.gemm.dtype + " does not match precision " +
                           PrecisionName(p.precision));
  }
  // FP8 is asked for (--precision fp8), never a machine's default: default plans stay bf16's.
  if (p.precision == Precision::kFp8) {
    return Status::Invalid(path + ".precision.value: fp8 is not a profile's default precision " +
                           "(plan it with --precision fp8)");
  }
  return p;
}

namespace {

OrderedJson GemmJson(const GemmTable& t) {
  OrderedJson g;
  g["dtype"] = t.dtype;
  g["source"] = t.source;
  g["m"] = t.m;
  g["n"] = t.n;
  g["k"] = t.k;
  g["tflops"] = t.tflops;
  return g;
}

}  // namespace

OrderedJson HardwareProfileToJson(const HardwareProfile& p) {
  OrderedJson j;
  j["name"] = p.name;
  j["about"] = p.about;
  j["precision"] = {{"value", PrecisionName(p.precision)}, {"source", p.precision_source}};
  j["gpus_per_node"] = SourcedJson(p.gpus_per_node);
  j["peak_tflops"] = SourcedJson(p.peak_tflops);
  j["memory_GiB"] = SourcedJson(p.memory_GiB);
  j["hbm_GBps"] = SourcedJson(p.hbm_GBps);
  j["memory_bound_GBps"] = SourcedJson(p.memory_bound_GBps);
  j["workspace_GiB"] = SourcedJson(p.workspace_GiB);
  j["kernel_launch_us"] = SourcedJson(p.kernel_launch_us);
  j["gemm"] = GemmJson(p.gemm);
  if (!p.gemm_backward_data.empty()) j["gemm_backward_data"] = GemmJson(p.gemm_backward_data);
  if (!p.gemm_backward_weight.empty()) j["gemm_backward_weight"] = GemmJson(p.gemm_backward_weight);
  if (!p.gemm_points.empty()) j["gemm_points"] = GemmPointsToJson(p.gemm_points);
  if (!p.attention_tflops.source.empty()) j["attention_tflops"] = SourcedJson(p.attention_tflops);
  if (!p.attention_dropout_tflops.source.empty()) {
    j["attention_dropout_tflops"] = SourcedJson(p.attention_dropout_tflops);
  }
  if (!p.attention_table.empty()) j["attention_table"] = AttentionTableToJson(p.attention_table);
  if (!p.cross_entropy_Glogits_per_s.source.empty()) {
    j["cross_entropy_Glogits_per_s"] = SourcedJson(p.cross_entropy_Glogits_per_s);
  }
  if (!p.gelu_forward_Gelems_per_s.source.empty()) {
    j["gelu_forward_Gelems_per_s"] = SourcedJson(p.gelu_forward_Gelems_per_s);
    j["gelu_backward_Gelems_per_s"] = SourcedJson(p.gelu_backward_Gelems_per_s);
  }
  if (!p.optimizer_Gparams_per_s.source.empty()) {
    j["optimizer_Gparams_per_s"] = SourcedJson(p.optimizer_Gparams_per_s);
  }
  if (!p.gelu_epilogue_Gelems_per_s.source.empty()) {
    j["gelu_epilogue_Gelems_per_s"] = SourcedJson(p.gelu_epilogue_Gelems_per_s);
    j["dgelu_epilogue_Gelems_per_s"] = SourcedJson(p.dgelu_epilogue_Gelems_per_s);
  }
  if (!p.bias_grad_Gelems_per_s.source.empty()) {
    j["bias_grad_Gelems_per_s"] = SourcedJson(p.bias_grad_Gelems_per_s);
  }
  if (!p.fp8_peak_tflops.source.empty()) j["fp8_peak_tflops"] = SourcedJson(p.fp8_peak_tflops);
  if (!p.fp8_gemm_speedup.source.empty()) j["fp8_gemm_speedup"] = SourcedJson(p.fp8_gemm_speedup);
  if (!p.gemm_backward_efficiency.source.empty()) {
    j["gemm_backward_efficiency"] = SourcedJson(p.gemm_backward_efficiency);
  }
  if (!p.device_share.source.empty()) j["device_share"] = SourcedJson(p.device_share);
  if (p.sm_count.value > 0) {
    j["wave_quantization"] = {{"sm_count", SourcedJson(p.sm_count)},
                              {"tile_m", SourcedJson(p.gemm_tile_m)},
                              {"tile_n", SourcedJson(p.gemm_tile_n)}};
  }
  j["intra_node"] = LinkJson(p.intra_node);
  j["inter_node"] = LinkJson(p.inter_node);
  if (p.calibration.is_object()) j["calibration"] = OrderedJson::parse(p.calibration.dump());
  return j;
}

Status CheckPrecision(const HardwareProfile& profile, Precision precision) {
  if (precision != Precision::kFp8 || profile.fp8_peak_tflops.value > 0) return Status::Ok();
  return Status::Invalid("precision fp8: profile '" + profile.name +
                         "' has no fp8_peak_tflops (an FP8 tensor-core rate is needed)");
}

}  // namespace ptdp
