// ProfileReport -> HardwareProfile (the strict schema of core/hardware.h), raw JSON and a table.
#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <utility>
#include <vector>

#include "profiler/epilogues.h"
#include "profiler/gemm_shapes.h"
#include "profiler/profiler.h"

namespace ptdp::profiler {
namespace {

std::string RunSource(const ProfileReport& r) {
  return "ptdp profile run on " + r.device + " (" + r.host + ", " + r.backend + " backend, " +
         std::to_string(r.ranks) + (r.ranks == 1 ? " rank" : " ranks") + "), " + r.date;
}

Sourced Measured(const ProfileReport& r, double value, const std::string& what) {
  return Sourced{value, RunSource(r) + ": " + what};
}

// The largest-size sample of a collective (the bandwidth figure) and the smallest (latency).
const CollectiveSample* Largest(const ProfileReport& r, Collective c) {
  const CollectiveSample* best = nullptr;
  for (const auto& s : r.collectives) {
    if (s.op == c && (best == nullptr || s.size > best->size)) best = &s;
  }
  return best;
}
const CollectiveSample* Smallest(const ProfileReport& r, Collective c) {
  const CollectiveSample* best = nullptr;
  for (const auto& s : r.collectives) {
    if (s.op == c && (best == nullptr || s.size < best->size)) best = &s;
  }
  return best;
}

std::string SizeText(Bytes b) {
  char buf[32];
  if (b >= (Bytes(1) << 20)) {
    std::snprintf(buf, sizeof(buf), "%g MiB", b / kMiB);
  } else {
    std::snprintf(buf, sizeof(buf), "%g KiB", b / kKiB);
  }
  return buf;
}

std::string AttentionShapeText(const ProfileReport& r) {
  return "b=" + std::to_string(r.att_b) + " s=" + std::to_string(r.att_s) +
         " heads=" + std::to_string(r.att_heads) + " d=" + std::to_string(r.att_d);
}
std::string DropoutText(const ProfileReport& r) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", r.att_dropout_p);
  return buf;
}

// --attention-grid's points as the profile's attention_table: the measured points, which must
// still form a grid (every s with every d); when one left out breaks it, no table (a line on
// stderr), never a table with a figure of another kernel or shape.
void AddAttentionTable(const ProfileReport& r, HardwareProfile* p) {
  if (r.att_grid.empty()) return;
  std::vector<AttentionPoint> points;
  for (const AttentionGridSample& x : r.att_grid) {
    if (x.tflops > 0) points.push_back({double(x.s), double(x.d), x.tflops, x.dropout_tflops});
  }
  const bool dropout = std::any_of(points.begin(), points.end(),
                                   [](const AttentionPoint& x) { return x.dropout_tflops > 0; });
  const std::string source =
      RunSource(r) + ": causal attention forward + backward at each (s, d), median of repeats; " +
      "each call b = round(" + std::to_string(r.att_grid_tokens) +
      " / s) sequences and heads = " + "round(" + std::to_string(r.att_grid_width) +
      " / d), the tokens (b s) and width (heads d) " + "of " + AttentionShapeText(r) +
      ", so that the points differ by s and d, not by the work " + "per call: " + r.attention_kind +
      (dropout ? "; dropout_tflops: " + r.att_grid_dropout_kind : "");
  auto table = AttentionTableFromPoints(source, points, "profile.attention_table");
  if (table.ok()) {
    p->attention_table = std::move(*table);
  } else {
    std::fprintf(stderr, "ptdp profile: %s; attention_table not written\n",
                 table.status().message().c_str());
  }
}

LinkProfile MeasuredLink(const ProfileReport& r) {
  LinkProfile l;
  l.name = "measured " + std::string(r.backend == "cuda" ? "NCCL" : "MPI") + " among " +
           std::to_string(r.ranks) + " ranks on " + r.host;
  const auto* lat = Smallest(r, Collective::kAllReduce);
  l.latency_us = Measured(r, lat->seconds / kUs,
                          "all-reduce time of the smallest message (" + SizeText(lat->size) + ")");
  auto bus = [&](Collective c) {
    const auto* s = Largest(r, c);
    return Measured(r, s->busbw_GBps,
                    std::string(CollectiveName(c)) + " bus bandwidth (nccl-tests definition) at " +
                        SizeText(s->size));
  };
  l.all_reduce_busbw_GBps = bus(Collective::kAllReduce);
  l.all_gather_busbw_GBps = bus(Collective::kAllGather);
  l.reduce_scatter_busbw_GBps = bus(Collective::kReduceScatter);
  l.send_recv_GBps = bus(Collective::kSendRecv);
  // Every measured size as a busbw curve (docs/profiles.md), so the cost model prices a message
  // at the bandwidth measured near its size, not only at the largest one's.
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kSendRecv}) {
    std::vector<const CollectiveSample*> samples;
    for (const auto& s : r.collectives) {
      if (s.op == c && s.size > 0 && s.busbw_GBps > 0) samples.push_back(&s);
    }
    std::sort(
        samples.begin(), samples.end(),
        [](const CollectiveSample* a, const CollectiveSample* b) { return a->size < b->size; });
    BusbwCurve curve;
    curve.collective = CollectiveName(c);
    curve.ranks = samples.empty() ? 0 : samples.front()->ranks;
    curve.source = RunSource(r) + ": " + CollectiveName(c) + " busbw at each measured size";
    for (const CollectiveSample* s : samples) {
      if (!curve.bytes.empty() && double(s->size) <= curve.bytes.back()) continue;
      curve.bytes.push_back(double(s->size));
      curve.busbw_GBps.push_back(s->busbw_GBps);
    }
    if (curve.bytes.size() >= 2) l.busbw_curves.push_back(std::move(curve));
  }
  return l;
}

LinkProfile CopiedLink(const LinkProfile& from, const std::string& why) {
  LinkProfile l = from;
  for (Sourced* s : {&l.latency_us, &l.all_reduce_busbw_GBps, &l.all_gather_busbw_GBps,
                     &l.reduce_scatter_busbw_GBps, &l.send_recv_GBps}) {
    s->source = why + " [" + s->source + "]";
  }
  for (BusbwCurve& c : l.busbw_curves) c.source = why + " [" + c.source + "]";
  l.algorithm.clear();  // a multi-node algorithm is no figure of the link it is copied to
  l.algorithm_source.clear();
  return l;
}

OrderedJson AttentionGridJson(const ProfileReport& r) {
  OrderedJson grid = OrderedJson::array();
  for (const AttentionGridSample& x : r.att_grid) {
    OrderedJson j = {{"s", x.s}, {"d", x.d}, {"b", x.b}, {"heads", x.heads}};
    if (x.tflops > 0) {
      j["time_us"] = x.forward / kUs;
      j["backward_time_us"] = x.backward / kUs;
      j["forward_backward_causal_tflops"] = x.tflops;
    } else {
      j["left_out"] = x.note;
    }
    if (x.dropout_tflops > 0) {
      j["dropout"] = {{"time_us", x.dropout_forward / kUs},
                      {"backward_time_us", x.dropout_backward / kUs},
                      {"forward_backward_causal_tflops", x.dropout_tflops}};
    } else if (x.tflops > 0) {
      j["dropout_left_out"] = x.dropout_note;
    }
    grid.push_back(std::move(j));
  }
  return grid;
}

std::string AttentionGridText(const ProfileReport& r) {
  std::string out = "# attention grid (forward + backward, causal TFLOP/s): " +
                    std::string("s, d, b, heads, without dropout, with dropout\n");
  char line[256];
  for (const AttentionGridSample& x : r.att_grid) {
    std::snprintf(line, sizeof(line), "  attention %8lld %5lld %5lld %6lld %12.3f %12.3f%s\n",
                  static_cast<long long>(x.s), static_cast<long long>(x.d),
                  static_cast<long long>(x.b), static_cast<long long>(x.heads), x.tflops,
                  x.dropout_tflops, x.tflops > 0 ? "" : "  (left out)");
    out += line;
  }
  return out;
}

}  // namespace

Result<HardwareProfile> ToHardwareProfile(const ProfileReport& r, const std::string& name,
                                          const std::optional<Sourced>& peak,
                                          const LinkFallback& fallback) {
  HardwareProfile p;
  p.name = name;
  p.about = "Measured by `ptdp profile --backend " + r.backend + "` on " + r.device + " (" +
            r.host + "), " + r.date + ".";
  p.precision = r.precision;
  p.precision_source = RunSource(r) + ": the " + r.backend + " backend trains in " +
                       PrecisionName(r.precision) + " (its GEMM dtype " + r.gemm_dtype + ")";
  p.gpus_per_node = Measured(r, r.ranks, "ranks in the profiling run (one node)");
  double best = 0;
  for (const auto& g : r.gemm) best = std::max(best, g.tflops);
  p.peak_tflops = peak.has_value() ? *peak
                                   : Measured(r, best,
                                              "best achieved " + r.gemm_dtype +
                                                  " GEMM TFLOP/s over the measured grid (not a "
                                                  "datasheet peak)");
  p.memory_GiB = Measured(r, r.memory_bytes / kGiB,
                          r.backend == "cuda" ? "device memory reported by cudaMemGetInfo"
                                              : "physical memory / ranks on the node (sysconf)");
  p.hbm_GBps = Measured(r, r.stream_add_GBps,
                        "streaming c = a + b over " + SizeText(r.stream_bytes) +
                            " arrays (3 arrays moved; achieved, not the datasheet figure)");
  // Per backend (backend.h TimeGelu): where the GeLU is timed by its elements (the cpu, where its
  // exp bounds it) the elementwise ops' bytes move at the streaming rate; elsewhere (cuda) at
  // the GeLU kernel's, as every GPU profile has measured it.
  const bool gelu_by_elements = r.gelu_forward_seconds > 0 && r.gelu_backward_seconds > 0;
  p.memory_bound_GBps =
      gelu_by_elements
          ? Measured(r, r.stream_add_GBps,
                     "streaming c = a + b over " + SizeText(r.stream_bytes) +
                         " arrays (3 arrays moved), the bytes of an elementwise op; the GeLU, "
                         "bound by its exp here, is timed apart (gelu_*_Gelems_per_s)")
          : Measured(r, r.gelu_GBps,
                     "GeLU forward kernel over " + SizeText(r.stream_bytes) + " (read + write)");
  p.workspace_GiB =
      Measured(r, r.workspace_bytes / kGiB,
               r.backend == "cuda" ? "device memory taken by the cuBLAS workspace and handles"
                                   : "no library workspace on the cpu backend");
  p.kernel_launch_us =
      Measured(r, r.launch_us, "one tiny kernel back to back (launch + completion)");
  if (r.att_train_tflops > 0) {
    // The fused-attention cost (costmodel/layer_cost.cc) takes one rate for forward and backward.
    p.attention_tflops = Measured(
        r, r.att_train_tflops,
        "causal attention forward + backward (" + AttentionShapeText(r) + "): " + r.attention_kind);
  }
  if (r.att_dropout_train_tflops > 0) {  // the rate of models with dropout (FusedAttentionTflops)
    p.attention_dropout_tflops =
        Measured(r, r.att_dropout_train_tflops,
                 "causal attention forward + backward with dropout " + DropoutText(r) + " (" +
                     AttentionShapeText(r) + "): " + r.attention_dropout_kind);
  }
  AddAttentionTable(r, &p);
  if (r.ce_seconds > 0) {
    const double logits = double(r.ce_rows) * double(r.ce_vocab);
    p.cross_entropy_Glogits_per_s =
        Measured(r, logits / r.ce_seconds / 1e9,
                 "cross-entropy forward (row max, sum of exponentials, loss) + backward over " +
                     std::to_string(r.ce_rows) + " x " + std::to_string(r.ce_vocab) +
                     " fp32 logits, median of repeats");
  }
  if (gelu_by_elements) {
    const double elements = double(r.gelu_elements);
    const std::string over = " over " + std::to_string(r.gelu_elements) +
                             " fp32 elements, median "
                             "of repeats (kernels::Gelu";
    p.gelu_forward_Gelems_per_s =
        Measured(r, elements / r.gelu_forward_seconds / 1e9, "GeLU forward" + over + "Forward)");
    p.gelu_backward_Gelems_per_s =
        Measured(r, elements / r.gelu_backward_seconds / 1e9, "GeLU backward" + over + "Backward)");
  }
  if (r.optimizer_seconds > 0) {
    p.optimizer_Gparams_per_s = Measured(
        r, double(r.optimizer_params) / r.optimizer_seconds / 1e9,
        "the optimizer step over " + std::to_string(r.optimizer_params) +
            " fp32 parameters in one tensor, median of repeats (the runtime's "
            "SumSquaresMany for the gradient norm, then AdamWMany with weight decay, clipped)");
  }
  AddEpilogueKeys(r, RunSource(r), &p);
  p.gemm.dtype = r.gemm_dtype;
  p.gemm.source =
      RunSource(r) + ": " + r.gemm_dtype + " GEMM, median of repeats" +
      (r.backend == "cuda" ? " (cuBLASLt through kernels/cublas LinearForward, fp32 accumulation)"
                           : " (Eigen through kernels::MatmulForward)");
  p.gemm.m = r.gemm_m;
  p.gemm.n = r.gemm_n;
  p.gemm.k = r.gemm_k;
  for (const auto& g : r.gemm) p.gemm.tflops.push_back(g.tflops);
  PTDP_RETURN_IF_ERROR(ValidateGemmTable(p.gemm, "profile.gemm"));
  // The backward GEMMs, through the same Ops calls the layers make, keyed by the forward's shape.
  const bool cuda = r.backend == "cuda";
  const auto backward = [&](const std::vector<GemmSample>& samples, const std::string& what,
                            GemmTable* t) -> Status {
    if (samples.empty()) return Status::Ok();
    *t = p.gemm;
    t->source = RunSource(r) + ": " + r.gemm_dtype + " " + what +
                ", median of repeats, keyed by the forward's (m tokens, n out, k in), 2 m n k "
                "FLOPs" +
                (cuda ? " (CudaOps: cuBLASLt, fp32 accumulation)" : " (CpuOps: Eigen)");
    t->tflops.clear();
    for (const auto& g : samples) t->tflops.push_back(g.tflops);
    return ValidateGemmTable(*t, "profile." + what);
  };
  PTDP_RETURN_IF_ERROR(backward(r.gemm_backward_data,
                                "input-gradient GEMM (Ops::LinearBackwardData, dx = dy W)",
                                &p.gemm_backward_data));
  PTDP_RETURN_IF_ERROR(backward(r.gemm_backward_weight,
                                "weight-gradient GEMM (Ops::LinearBackwardWeight, dW += dy^T x in "
                                "fp32)",
                                &p.gemm_backward_weight));
  PTDP_RETURN_IF_ERROR(AddGemmPoints(r, RunSource(r), &p));

  if (r.ranks > 1) {
    p.intra_node = MeasuredLink(r);
  } else if (fallback.from != nullptr) {
    p.intra_node = CopiedLink(fallback.from->intra_node,
                              "not measured (one rank): copied from " + fallback.from_path);
  } else if (r.backend == "cpu") {
    // A shared-memory transport between processes copies each message in and out once.
    const double bw = r.stream_add_GBps / 2;
    const std::string why =
        "not measured (one rank, no peer): half the measured streaming bandwidth, an estimate of a "
        "shared-memory transport that copies each message in and out; run under mpirun -np N to "
        "measure";
    p.intra_node.name = "estimated shared memory on " + r.host;
    p.intra_node.latency_us = Measured(r, 0, "not measured (one rank): taken as 0");
    p.intra_node.all_reduce_busbw_GBps = Measured(r, bw, why);
    p.intra_node.all_gather_busbw_GBps = Measured(r, bw, why);
    p.intra_node.reduce_scatter_busbw_GBps = Measured(r, bw, why);
    p.intra_node.send_recv_GBps = Measured(r, bw, why);
  } else {
    return Status::Invalid(
        "profile: one rank measures no links; run with one rank per GPU under mpirun, or pass "
        "--links-from <profile.json> to copy its link figures");
  }
  if (fallback.from != nullptr) {
    p.inter_node = CopiedLink(fallback.from->inter_node,
                              "not measured (one node): copied from " + fallback.from_path);
  } else {
    p.inter_node = CopiedLink(p.intra_node,
                              "not measured (one node): the intra-node figures, so that a one-node "
                              "cluster of this machine reads; a one-node cluster never uses them");
    p.inter_node.name = "none measured (copy of intra_node)";
  }
  // The result must read back through the strict reader.
  PTDP_ASSIGN_OR_RETURN(
      HardwareProfile back,
      HardwareProfileFromJson(Json::parse(HardwareProfileToJson(p).dump()), "profile"));
  (void)back;
  return p;
}

OrderedJson ReportToJson(const ProfileReport& r) {
  OrderedJson j;
  j["backend"] = r.backend;
  j["device"] = r.device;
  j["host"] = r.host;
  j["date"] = r.date;
  j["ranks"] = r.ranks;
  j["gemm_dtype"] = r.gemm_dtype;
  OrderedJson gemm = OrderedJson::array();
  for (const auto& g : r.gemm) {
    gemm.push_back(
        {{"m", g.m}, {"n", g.n}, {"k", g.k}, {"time_us", g.seconds / kUs}, {"tflops", g.tflops}});
  }
  j["gemm"] = gemm;
  for (auto [key, samples] : {std::pair{"gemm_backward_data", &r.gemm_backward_data},
                              std::pair{"gemm_backward_weight", &r.gemm_backward_weight}}) {
    if (samples->empty()) continue;
    OrderedJson rows = OrderedJson::array();
    for (const auto& g : *samples) {
      rows.push_back(
          {{"m", g.m}, {"n", g.n}, {"k", g.k}, {"time_us", g.seconds / kUs}, {"tflops", g.tflops}});
    }
    j[key] = rows;
  }
  j["stream_bytes"] = r.stream_bytes;
  j["stream_add_GBps"] = r.stream_add_GBps;
  j["gelu_GBps"] = r.gelu_GBps;
  j["attention"] = {
      {"kind", r.attention_kind},     {"b", r.att_b},        {"s", r.att_s},
      {"heads", r.att_heads},         {"head_dim", r.att_d}, {"time_us", r.att_seconds / kUs},
      {"causal_tflops", r.att_tflops}};
  if (r.att_backward_seconds > 0) {
    j["attention"]["backward_time_us"] = r.att_backward_seconds / kUs;
    j["attention"]["forward_backward_causal_tflops"] = r.att_train_tflops;
  }
  if (r.att_dropout_train_tflops > 0) {
    j["attention"]["dropout"] = {{"p", r.att_dropout_p},
                                 {"kind", r.attention_dropout_kind},
                                 {"time_us", r.att_dropout_seconds / kUs},
                                 {"backward_time_us", r.att_dropout_backward_seconds / kUs},
                                 {"forward_backward_causal_tflops", r.att_dropout_train_tflops}};
  }
  if (!r.att_grid.empty()) j["attention"]["grid"] = AttentionGridJson(r);
  if (!r.gemm_points.empty()) j["gemm_points"] = GemmPointsRawJson(r);
  if (r.ce_seconds > 0) {
    j["cross_entropy"] = {{"rows", r.ce_rows},
                          {"vocab", r.ce_vocab},
                          {"forward_backward_time_us", r.ce_seconds / kUs}};
  }
  if (r.gelu_forward_seconds > 0) {
    j["gelu"] = {{"elements", r.gelu_elements},
                 {"forward_time_us", r.gelu_forward_seconds / kUs},
                 {"backward_time_us", r.gelu_backward_seconds / kUs}};
  }
  if (r.optimizer_seconds > 0) {
    j["optimizer_step"] = {{"params", r.optimizer_params}, {"time_us", r.optimizer_seconds / kUs}};
  }
  if (r.epi_tokens > 0) j["epilogues"] = EpiloguesJson(r);
  j["kernel_launch_us"] = r.launch_us;
  j["memory_bytes"] = r.memory_bytes;
  j["workspace_bytes"] = r.workspace_bytes;
  OrderedJson coll = OrderedJson::array();
  for (const auto& c : r.collectives) {
    coll.push_back({{"op", CollectiveName(c.op)},
                    {"ranks", c.ranks},
                    {"size_bytes", c.size},
                    {"time_us", c.seconds / kUs},
                    {"algbw_GBps", c.algbw_GBps},
                    {"busbw_GBps", c.busbw_GBps}});
  }
  j["collectives"] = coll;
  return j;
}

std::string ReportToText(const ProfileReport& r) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "# %s\n", RunSource(r).c_str());
  out += line;
  std::snprintf(line, sizeof(line), "# %-8s %8s %8s %8s %12s %10s\n", "gemm", "m", "n", "k",
                "time_us", "TFLOP/s");
  out += line;
  for (const auto& g : r.gemm) {
    std::snprintf(line, sizeof(line), "  %-8s %8lld %8lld %8lld %12.2f %10.3f\n",
                  r.gemm_dtype.c_str(), static_cast<long long>(g.m), static_cast<long long>(g.n),
                  static_cast<long long>(g.k), g.seconds / kUs, g.tflops);
    out += line;
  }
  // The backward GEMMs: one summary line each (their rows are in the raw JSON).
  for (auto [name, samples] : {std::pair{"input-gradient", &r.gemm_backward_data},
                               std::pair{"weight-gradient", &r.gemm_backward_weight}}) {
    if (samples->empty()) continue;
    double lo = samples->front().tflops, hi = lo;
    for (const auto& g : *samples) lo = std::min(lo, g.tflops), hi = std::max(hi, g.tflops);
    std::snprintf(line, sizeof(line), "# %s GEMMs: %zu shapes, %.3f to %.3f TFLOP/s\n", name,
                  samples->size(), lo, hi);
    out += line;
  }
  std::snprintf(line, sizeof(line),
                "# stream add %.2f GB/s, gelu %.2f GB/s, launch %.3f us, attention (b=%lld s=%lld "
                "heads=%lld d=%lld) %.1f us = %.3f TFLOP/s causal\n",
                r.stream_add_GBps, r.gelu_GBps, r.launch_us, static_cast<long long>(r.att_b),
                static_cast<long long>(r.att_s), static_cast<long long>(r.att_heads),
                static_cast<long long>(r.att_d), r.att_seconds / kUs, r.att_tflops);
  out += line;
  if (r.att_backward_seconds > 0) {
    std::snprintf(line, sizeof(line),
                  "# attention backward %.1f us; forward + backward %.3f TFLOP/s causal\n",
                  r.att_backward_seconds / kUs, r.att_train_tflops);
    out += line;
  }
  if (r.att_dropout_train_tflops > 0) {
    std::snprintf(line, sizeof(line),
                  "# attention with dropout %s: forward %.1f us, backward %.1f us; forward + "
                  "backward %.3f TFLOP/s causal\n",
                  DropoutText(r).c_str(), r.att_dropout_seconds / kUs,
                  r.att_dropout_backward_seconds / kUs, r.att_dropout_train_tflops);
    out += line;
  }
  if (!r.att_grid.empty()) out += AttentionGridText(r);
  if (!r.gemm_points.empty()) out += GemmPointsText(r);
  if (r.ce_seconds > 0) {
    std::snprintf(line, sizeof(line),
                  "# cross-entropy forward + backward (%lld x %lld logits) %.1f us = %.3f "
                  "Glogits/s\n",
                  static_cast<long long>(r.ce_rows), static_cast<long long>(r.ce_vocab),
                  r.ce_seconds / kUs, double(r.ce_rows) * double(r.ce_vocab) / r.ce_seconds / 1e9);
    out += line;
  }
  if (r.gelu_forward_seconds > 0) {
    const double n = double(r.gelu_elements);
    std::snprintf(line, sizeof(line),
                  "# gelu over %lld elements: forward %.1f us = %.4f Gelems/s, backward %.1f us = "
                  "%.4f Gelems/s\n",
                  static_cast<long long>(r.gelu_elements), r.gelu_forward_seconds / kUs,
                  n / r.gelu_forward_seconds / 1e9, r.gelu_backward_seconds / kUs,
                  n / r.gelu_backward_seconds / 1e9);
    out += line;
  }
  if (r.optimizer_seconds > 0) {
    std::snprintf(line, sizeof(line),
                  "# optimizer step (sum of squares + AdamW) over %lld parameters: %.1f us = "
                  "%.4f Gparams/s\n",
                  static_cast<long long>(r.optimizer_params), r.optimizer_seconds / kUs,
                  double(r.optimizer_params) / r.optimizer_seconds / 1e9);
    out += line;
  }
  out += EpiloguesText(r);
  if (!r.collectives.empty()) {
    std::snprintf(line, sizeof(line), "# %-15s %6s %12s %12s %12s %12s\n", "collective", "ranks",
                  "size_B", "time_us", "algbw_GB/s", "busbw_GB/s");
    out += line;
    for (const auto& c : r.collectives) {
      std::snprintf(line, sizeof(line), "  %-15s %6d %12lld %12.2f %12.3f %12.3f\n",
                    CollectiveName(c.op), c.ranks, static_cast<long long>(c.size), c.seconds / kUs,
                    c.algbw_GBps, c.busbw_GBps);
      out += line;
    }
  }
  return out;
}

}  // namespace ptdp::profiler
