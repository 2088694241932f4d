#include "profiler/gemm_shapes.h"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <utility>
#include <vector>

#include "core/gemm_points.h"
#include "core/model.h"

namespace ptdp::profiler {
namespace {

constexpr const char* kOf = "--gemm-shapes-of";
constexpr const char* kMbs = "--gemm-shapes-mbs";
constexpr const char* kTp = "--gemm-shapes-tp";
// The largest m a profile's point may hold (core/gemm_points.h).
constexpr int64_t kMaxTokens = 1000000000;

std::vector<std::string> SplitCommas(const std::string& arg) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    const size_t comma = arg.find(',', start);
    items.push_back(arg.substr(start, comma == std::string::npos ? arg.npos : comma - start));
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

Result<std::vector<int>> ParseCounts(const std::string& arg, const char* flag) {
  std::vector<int> out;
  for (const std::string& item : SplitCommas(arg)) {
    char* end = nullptr;
    const long long v = item.empty() ? 0 : std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || end != item.c_str() + item.size() || v < 1 || v > (1 << 20)) {
      return Status::Invalid(std::string(flag) + ": \"" + arg +
                             "\" is not a comma-separated list of integers in [1, 1048576]");
    }
    out.push_back(int(v));
  }
  return out;
}

// Whether t splits every Linear of `m` as the layers shard it (heads, key-value heads, FFN).
bool Divides(const ModelSpec& m, int t) {
  return m.heads % t == 0 && m.KvHeads() % t == 0 && m.FfnHidden() % t == 0 &&
         m.Fc1Out() % t == 0 && m.QkvOut() % t == 0 && m.hidden % t == 0;
}

// (Appended piece by piece: GCC 12 warns, wrongly, -Wrestrict on `"," + std::to_string(...)`.)
std::string JoinInts(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

}  // namespace

Status ParseGemmShapes(const std::string& models, const std::string& mbs, const std::string& tp,
                       ProfileOptions* o) {
  if (models.empty()) {
    if (!mbs.empty() || !tp.empty()) {
      return Status::Invalid(std::string(mbs.empty() ? kTp : kMbs) + ": needs " + kOf +
                             " (the models whose GEMM shapes to time)");
    }
    return Status::Ok();
  }
  if (mbs.empty()) {
    return Status::Invalid(std::string(kOf) + ": needs " + kMbs +
                           " (the microbatch sizes the models run at)");
  }
  PTDP_ASSIGN_OR_RETURN(const std::vector<int> sizes, ParseCounts(mbs, kMbs));
  PTDP_ASSIGN_OR_RETURN(
      const std::vector<int> degrees,
      tp.empty() ? Result<std::vector<int>>(std::vector<int>{1}) : ParseCounts(tp, kTp));
  std::set<GemmShape> shapes;
  for (const std::string& name : SplitCommas(models)) {
    if (name.empty()) return Status::Invalid(std::string(kOf) + ": an empty model name");
    auto model = LoadModel(name);
    if (!model.ok()) return model.status().WithPrefix(kOf);
    for (const int t : degrees) {
      if (!Divides(*model, t)) {
        return Status::Invalid(std::string(kTp) + ": " + std::to_string(t) +
                               " does not divide the heads and widths of " + name);
      }
      for (const int b : sizes) {
        if (int64_t(b) * model->seq_len > kMaxTokens) {
          return Status::Invalid(std::string(kMbs) + ": " + std::to_string(b) + " sequences of " +
                                 name + " are over 1e9 tokens");
        }
        for (const GemmShape& s : LinearGemmShapes(*model, t, b)) shapes.insert(s);
      }
    }
  }
  o->gemm_shapes.assign(shapes.begin(), shapes.end());
  o->gemm_shapes_of = "the Linear GEMMs (QKV, projection, fc1, fc2, logits) of " + models +
                      " at microbatch " + JoinInts(sizes) + ", t " + JoinInts(degrees);
  return Status::Ok();
}

Status MeasureGemmPoints(ProfileBackend& backend, const TimingOptions& t, const ProfileOptions& o,
                         ProfileReport* r) {
  r->gemm_points_of = o.gemm_shapes_of;
  for (const GemmShape& s : o.gemm_shapes) {
    GemmPointSample p{s[0], s[1], s[2]};
    PTDP_ASSIGN_OR_RETURN(p.forward, backend.TimeGemm(p.m, p.n, p.k, t));
    PTDP_ASSIGN_OR_RETURN(p.backward_data, backend.TimeGemmBackwardData(p.m, p.n, p.k, t));
    PTDP_ASSIGN_OR_RETURN(p.backward_weight, backend.TimeGemmBackwardWeight(p.m, p.n, p.k, t));
    if (!(p.forward > 0 && p.backward_data > 0 && p.backward_weight > 0)) {
      return Status::Invalid(std::string(kOf) + ": the " + backend.kind() +
                             " backend does not time all three GEMMs of " + std::to_string(p.m) +
                             "x" + std::to_string(p.n) + "x" + std::to_string(p.k));
    }
    r->gemm_points.push_back(p);
  }
  return Status::Ok();
}

namespace {

double Tflops(const GemmPointSample& p, Seconds s) {
  return 2.0 * double(p.m) * double(p.n) * double(p.k) / s / kTera;
}

}  // namespace

Status AddGemmPoints(const ProfileReport& r, const std::string& run_source, HardwareProfile* p) {
  if (r.gemm_points.empty()) return Status::Ok();
  GemmPoints points;
  points.source = run_source + ": " + r.gemm_dtype + " " + r.gemm_points_of +
                  ", each timed as the grid tables are (forward, input gradient, weight gradient "
                  "into fp32; median of repeats), keyed by the forward's (m tokens, n out, k in), "
                  "2 m n k FLOPs";
  for (const GemmPointSample& s : r.gemm_points) {
    points.points.push_back({s.m, s.n, s.k, Tflops(s, s.forward), Tflops(s, s.backward_data),
                             Tflops(s, s.backward_weight)});
  }
  PTDP_RETURN_IF_ERROR(ValidateGemmPoints(points, "profile.gemm_points"));
  p->gemm_points = std::move(points);
  return Status::Ok();
}

OrderedJson GemmPointsRawJson(const ProfileReport& r) {
  OrderedJson j;
  j["of"] = r.gemm_points_of;
  OrderedJson points = OrderedJson::array();
  for (const GemmPointSample& s : r.gemm_points) {
    points.push_back({{"m", s.m},
                      {"n", s.n},
                      {"k", s.k},
                      {"forward_us", s.forward / kUs},
                      {"backward_data_us", s.backward_data / kUs},
                      {"backward_weight_us", s.backward_weight / kUs}});
  }
  j["points"] = std::move(points);
  return j;
}

std::string GemmPointsText(const ProfileReport& r) {
  std::string out = "# GEMM points: " + r.gemm_points_of + "\n";
  out += "#        m        n        k  forward TFLOP/s  data TFLOP/s  weight TFLOP/s\n";
  char line[160];
  for (const GemmPointSample& s : r.gemm_points) {
    std::snprintf(line, sizeof(line), "# %8lld %8lld %8lld  %15.3f  %12.3f  %14.3f\n",
                  static_cast<long long>(s.m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), Tflops(s, s.forward), Tflops(s, s.backward_data),
                  Tflops(s, s.backward_weight));
    out += line;
  }
  return out;
}

}  // namespace ptdp::profiler
