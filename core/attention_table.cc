#include "core/attention_table.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/checked.h"
#include "core/hardware.h"

namespace ptdp {

namespace {

Status CheckPositive(double v, double hi, const std::string& path) {
  if (std::isfinite(v) && v > 0 && v <= hi) return Status::Ok();
  return Status::Invalid(path + ": " + FormatDouble(v) + " is outside (0, " + FormatDouble(hi) +
                         "]");
}

Status CheckPoint(const AttentionPoint& p, const std::string& path) {
  PTDP_RETURN_IF_ERROR(CheckPositive(p.s, kMaxProfileGemmDim, path + ".s"));
  PTDP_RETURN_IF_ERROR(CheckPositive(p.d, kMaxProfileGemmDim, path + ".d"));
  PTDP_RETURN_IF_ERROR(CheckPositive(p.tflops, kMaxProfileTflops, path + ".tflops"));
  if (p.dropout_tflops != 0) {
    PTDP_RETURN_IF_ERROR(
        CheckPositive(p.dropout_tflops, kMaxProfileTflops, path + ".dropout_tflops"));
  }
  return Status::Ok();
}

// The distinct values of one coordinate, increasing.
std::vector<double> Axis(const std::vector<AttentionPoint>& points, double AttentionPoint::*of) {
  std::vector<double> axis;
  for (const AttentionPoint& p : points) axis.push_back(p.*of);
  std::sort(axis.begin(), axis.end());
  axis.erase(std::unique(axis.begin(), axis.end()), axis.end());
  return axis;
}

size_t IndexOf(const std::vector<double>& axis, double v) {
  return size_t(std::lower_bound(axis.begin(), axis.end(), v) - axis.begin());
}

std::string PointName(double s, double d) {
  return "(s, d) = (" + FormatDouble(s) + ", " + FormatDouble(d) + ")";
}

}  // namespace

bool AttentionTable::HasDropout() const {
  return !dropout_tflops.empty() &&
         std::all_of(dropout_tflops.begin(), dropout_tflops.end(), [](double r) { return r > 0; });
}

std::vector<AttentionPoint> AttentionTable::Points() const {
  std::vector<AttentionPoint> points;
  for (size_t is = 0; is < s.size(); ++is) {
    for (size_t id = 0; id < d.size(); ++id) {
      points.push_back({s[is], d[id], At(is, id), DropoutAt(is, id)});
    }
  }
  return points;
}

Result<AttentionTable> AttentionTableFromPoints(const std::string& source,
                                                const std::vector<AttentionPoint>& points,
                                                const std::string& path) {
  if (source.empty()) {
    return Status::Invalid(path + ".source: must name where the points come from");
  }
  if (points.empty()) return Status::Invalid(path + ".points: needs at least one point");
  for (size_t i = 0; i < points.size(); ++i) {
    PTDP_RETURN_IF_ERROR(CheckPoint(points[i], path + ".points[" + std::to_string(i) + "]"));
  }
  AttentionTable t;
  t.source = source;
  t.s = Axis(points, &AttentionPoint::s);
  t.d = Axis(points, &AttentionPoint::d);
  const size_t cells = t.s.size() * t.d.size();
  t.tflops.assign(cells, 0.0);
  t.dropout_tflops.assign(cells, 0.0);
  std::vector<size_t> first(cells, points.size());  // which point filled each cell
  for (size_t i = 0; i < points.size(); ++i) {
    const size_t cell = IndexOf(t.s, points[i].s) * t.d.size() + IndexOf(t.d, points[i].d);
    if (first[cell] != points.size()) {
      return Status::Invalid(path + ".points[" + std::to_string(i) +
                             "]: " + PointName(points[i].s, points[i].d) + " again (points[" +
                             std::to_string(first[cell]) + "] has it)");
    }
    first[cell] = i;
    t.tflops[cell] = points[i].tflops;
    t.dropout_tflops[cell] = points[i].dropout_tflops;
  }
  for (size_t cell = 0; cell < cells; ++cell) {
    if (first[cell] != points.size()) continue;
    return Status::Invalid(path + ".points: no point at " +
                           PointName(t.s[cell / t.d.size()], t.d[cell % t.d.size()]) +
                           ": every s needs every d (a grid, looked up bilinearly)");
  }
  return t;
}

Result<AttentionTable> AttentionTableFromJson(const Json& j, const std::string& path) {
  if (!j.is_object()) return Status::Invalid(path + ": expected an object, got " + JsonTypeName(j));
  JsonObjectReader r(j, path);
  std::string source;
  r.Required("source", &source);
  const Json* list = r.Child("points", true);
  PTDP_RETURN_IF_ERROR(r.Finish());
  std::vector<AttentionPoint> points;
  PTDP_RETURN_IF_ERROR(
      ReadObjectList(*list, path + ".points", [&](JsonObjectReader& pr, const std::string& epath) {
        AttentionPoint p;
        pr.Required("s", &p.s);
        pr.Required("d", &p.d);
        pr.Required("tflops", &p.tflops);
        if (pr.Has("dropout_tflops")) {
          pr.Required("dropout_tflops", &p.dropout_tflops);
          // Present means measured: 0 is no rate, refused like any other value out of range.
          if (pr.status().ok() && p.dropout_tflops == 0) {
            return Status::Invalid(epath + ".dropout_tflops: 0 is outside (0, " +
                                   FormatDouble(kMaxProfileTflops) +
                                   "] (leave the key out instead)");
          }
        }
        points.push_back(p);
        return pr.status();
      }));
  return AttentionTableFromPoints(source, points, path);
}

OrderedJson AttentionTableToJson(const AttentionTable& t) {
  OrderedJson j;
  j["source"] = t.source;
  OrderedJson points = OrderedJson::array();
  for (const AttentionPoint& p : t.Points()) {
    OrderedJson pj;
    pj["s"] = p.s;
    pj["d"] = p.d;
    pj["tflops"] = p.tflops;
    if (p.dropout_tflops > 0) pj["dropout_tflops"] = p.dropout_tflops;
    points.push_back(std::move(pj));
  }
  j["points"] = std::move(points);
  return j;
}

}  // namespace ptdp
