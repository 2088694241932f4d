#include "core/gemm_points.h"

#include <cmath>
#include <map>
#include <utility>

#include "core/checked.h"
#include "core/hardware.h"

namespace ptdp {

namespace {

// Bounds as the rest of a profile's (core/hardware.h): sizes as GEMM grid sizes, rates as
// TFLOP/s figures.
constexpr int64_t kMaxPointDim = static_cast<int64_t>(kMaxProfileGemmDim);

Status CheckSize(int64_t v, const std::string& path) {
  if (v >= 1 && v <= kMaxPointDim) return Status::Ok();
  return Status::Invalid(path + ": " + std::to_string(v) + " is outside [1, " +
                         std::to_string(kMaxPointDim) + "]");
}

Status CheckRate(double v, const std::string& path) {
  if (std::isfinite(v) && v > 0 && v <= kMaxProfileTflops) return Status::Ok();
  return Status::Invalid(path + ": " + FormatDouble(v) + " is outside (0, " +
                         FormatDouble(kMaxProfileTflops) + "]");
}

Status CheckPoint(const GemmPoint& p, const std::string& path) {
  PTDP_RETURN_IF_ERROR(CheckSize(p.m, path + ".m"));
  PTDP_RETURN_IF_ERROR(CheckSize(p.n, path + ".n"));
  PTDP_RETURN_IF_ERROR(CheckSize(p.k, path + ".k"));
  PTDP_RETURN_IF_ERROR(CheckRate(p.forward_tflops, path + ".forward_tflops"));
  PTDP_RETURN_IF_ERROR(CheckRate(p.backward_data_tflops, path + ".backward_data_tflops"));
  return CheckRate(p.backward_weight_tflops, path + ".backward_weight_tflops");
}

}  // namespace

const GemmPoint* GemmPoints::Find(int64_t m, int64_t n, int64_t k) const {
  // A profile holds tens of points: a scan is as fast as an index and keeps the struct plain.
  for (const GemmPoint& p : points) {
    if (p.m == m && p.n == n && p.k == k) return &p;
  }
  return nullptr;
}

std::vector<GemmShape> LinearGemmShapes(const ModelSpec& m, int tp, int mbs) {
  const int64_t T = int64_t(mbs) * m.seq_len, h = m.hidden, t = tp;
  return {{T, m.QkvOut() / t, h},
          {T, h, h / t},
          {T, m.Fc1Out() / t, h},
          {T, h, m.FfnHidden() / t},
          {T, PaddedVocab(m, tp) / t, h}};
}

Status ValidateGemmPoints(const GemmPoints& p, const std::string& path) {
  if (p.source.empty()) {
    return Status::Invalid(path + ".source: must name where the points come from");
  }
  if (p.points.empty()) return Status::Invalid(path + ".points: needs at least one point");
  std::map<GemmShape, size_t> seen;
  for (size_t i = 0; i < p.points.size(); ++i) {
    const GemmPoint& q = p.points[i];
    const std::string ipath = path + ".points[" + std::to_string(i) + "]";
    PTDP_RETURN_IF_ERROR(CheckPoint(q, ipath));
    const auto [it, fresh] = seen.emplace(GemmShape{q.m, q.n, q.k}, i);
    if (!fresh) {
      return Status::Invalid(ipath + ": (m, n, k) = (" + std::to_string(q.m) + ", " +
                             std::to_string(q.n) + ", " + std::to_string(q.k) + ") again (points[" +
                             std::to_string(it->second) + "] has it)");
    }
  }
  return Status::Ok();
}

Result<GemmPoints> GemmPointsFromJson(const Json& j, const std::string& path) {
  if (!j.is_object()) return Status::Invalid(path + ": expected an object, got " + JsonTypeName(j));
  JsonObjectReader r(j, path);
  GemmPoints out;
  r.Required("source", &out.source);
  const Json* list = r.Child("points", true);
  PTDP_RETURN_IF_ERROR(r.Finish());
  PTDP_RETURN_IF_ERROR(
      ReadObjectList(*list, path + ".points", [&](JsonObjectReader& pr, const std::string&) {
        GemmPoint p;
        pr.Required("m", &p.m);
        pr.Required("n", &p.n);
        pr.Required("k", &p.k);
        pr.Required("forward_tflops", &p.forward_tflops);
        pr.Required("backward_data_tflops", &p.backward_data_tflops);
        pr.Required("backward_weight_tflops", &p.backward_weight_tflops);
        out.points.push_back(p);
        return pr.status();
      }));
  PTDP_RETURN_IF_ERROR(ValidateGemmPoints(out, path));
  return out;
}

OrderedJson GemmPointsToJson(const GemmPoints& p) {
  OrderedJson j;
  j["source"] = p.source;
  OrderedJson points = OrderedJson::array();
  for (const GemmPoint& q : p.points) {
    OrderedJson pj;
    pj["m"] = q.m;
    pj["n"] = q.n;
    pj["k"] = q.k;
    pj["forward_tflops"] = q.forward_tflops;
    pj["backward_data_tflops"] = q.backward_data_tflops;
    pj["backward_weight_tflops"] = q.backward_weight_tflops;
    points.push_back(std::move(pj));
  }
  j["points"] = std::move(points);
  return j;
}

}  // namespace ptdp
