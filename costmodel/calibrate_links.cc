// The link half of `ptdp calibrate` (costmodel/calibrate.h): each link class's bandwidths, and its
// latency where the receives carry messages of more than one size.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "core/checked.h"
#include "costmodel/calibrate_fit.h"
#include "costmodel/estimate.h"

namespace ptdp::costmodel::calibrate_fit {

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  // Between the two elements about position q (n - 1), as numpy's default: with an even count the
  // median is the mean of the two middle ones. The element at q n was the upper middle one: on
  // the H200 trace of 2026-11-27 (forward times 21.7, 21.9, 23.1, 24.9 ms) the fit matched 23.1,
  // and the calibrated profile priced the runs it had not seen 2-3 points slower.
  std::sort(v.begin(), v.end());
  const double at = std::clamp(q, 0.0, 1.0) * double(v.size() - 1);
  const size_t below = size_t(at);
  if (below + 1 >= v.size()) return v.back();
  return v[below] + (at - double(below)) * (v[below + 1] - v[below]);
}

std::vector<CostTable> FitContext::TablesFor(const CalibrationParams& x) {
  const HardwareProfile profile = ApplyCalibration(start, x, "fit");
  std::vector<CostTable> out;
  for (RunContext& r : runs) {
    r.cluster.profile = profile;
    out.push_back(BuildCostTable(*r.model, r.cluster, r.layout, &r.param_counts));
  }
  return out;
}

namespace {

// The `quantile` (0: the smallest) of measured / predicted under `x` over the samples; +inf when
// nothing is predicted.
double RatioQuantile(FitContext& f, const std::vector<Sample>& s, const CalibrationParams& x,
                     double quantile) {
  const std::vector<CostTable> t = f.TablesFor(x);
  std::vector<double> ratios;
  for (const Sample& e : s) {
    const Seconds p = PredictedInstructionTime(t[size_t(e.run)], e.pp_rank, e.instr);
    if (p > 0) ratios.push_back(e.measured_s / p);
  }
  return ratios.empty() ? HUGE_VAL : Quantile(ratios, quantile);
}

// Sets *scale (a multiplier of a bandwidth in `x`) so that the `quantile` of `s` matches, halving
// the link's latency while even the largest bandwidth cannot. False when there is nothing to fit.
bool FitLink(FitContext& f, const std::vector<Sample>& s, double quantile, CalibrationParams* x,
             double* scale, double* latency) {
  if (s.empty()) return false;
  const auto ratio_at = [&](double v) {
    const double keep = *scale;
    *scale = v;
    const double r = RatioQuantile(f, s, *x, quantile);
    *scale = keep;
    return r;
  };
  if (!std::isfinite(ratio_at(1.0))) return false;
  while (ratio_at(kMaxScale) < 1.0 && *latency > 1e-6) *latency *= 0.5;
  double lo = std::log(kMinLinkScale), hi = std::log(kMaxScale);
  // The ratio grows with the bandwidth (predictions shrink): bisect for ratio = 1.
  for (int i = 0; i < 80; ++i) {
    const double mid = 0.5 * (lo + hi);
    (ratio_at(std::exp(mid)) < 1.0 ? lo : hi) = mid;
  }
  *scale = std::exp(0.5 * (lo + hi));
  return true;
}

// The receives of one link class grouped by message size; empty unless the sizes differ by at
// least 1.5x, below which latency and bandwidth trade at nearly the same residual.
std::vector<std::vector<Sample>> BySize(const std::vector<Sample>& recvs) {
  std::map<int64_t, std::vector<Sample>> groups;
  for (const Sample& s : recvs) {
    if (s.instr.bytes > 0) groups[s.instr.bytes].push_back(s);
  }
  if (groups.size() < 2) return {};
  if (double(groups.rbegin()->first) < 1.5 * double(groups.begin()->first)) return {};
  std::vector<std::vector<Sample>> out;
  for (auto& [bytes, g] : groups) out.push_back(std::move(g));
  return out;
}

// With messages of several sizes, latency_us and send_recv_GBps are told apart: for a latency
// multiplier the bandwidth matches the pooled `quantile` (FitLink), and the latency is the one
// whose sizes each come closest (sum over sizes of sqrt(count) log(measured/predicted)^2 at that
// quantile): a grid over 1e-4..1e2 in log space, then golden-section search around its best point.
// False (nothing changed) when the sizes do not differ enough.
bool FitLatencyAndBandwidth(FitContext& f, const std::vector<Sample>& recvs, double quantile,
                            int link, CalibrationParams* x) {
  const std::vector<std::vector<Sample>> groups = BySize(recvs);
  if (groups.empty()) return false;
  // A multiple of no latency is none: a starting profile without one (a one-rank `ptdp profile`
  // measures no link) is fitted from 1 us, and says so.
  Sourced& start_latency = (link == 0 ? f.start.intra_node : f.start.inter_node).latency_us;
  if (!(start_latency.value > 0)) {
    start_latency = {1.0, "none in the starting profile (" + FormatDouble(start_latency.value) +
                              " us): the fit starts from 1 us; " + start_latency.source};
  }
  const auto cost_at = [&](double log_latency, CalibrationParams* out) {
    CalibrationParams y = *x;
    y.latency[link] = std::exp(log_latency);
    FitLink(f, recvs, quantile, &y, &y.p2p[link], &y.latency[link]);
    double cost = 0;
    for (const std::vector<Sample>& g : groups) {
      const double r = std::log(RatioQuantile(f, g, y, quantile));
      cost += std::sqrt(double(g.size())) * r * r;
    }
    if (out) *out = y;
    return cost;
  };
  constexpr int kGrid = 31;
  const double lo = std::log(1e-4), hi = std::log(1e2), step = (hi - lo) / (kGrid - 1);
  int best = 0;
  double best_cost = HUGE_VAL;
  for (int i = 0; i < kGrid; ++i) {
    const double c = cost_at(lo + i * step, nullptr);
    if (c < best_cost) best_cost = c, best = i;
  }
  double a = lo + std::max(best - 1, 0) * step, b = lo + std::min(best + 1, kGrid - 1) * step;
  const double phi = (std::sqrt(5.0) - 1) / 2;
  double m1 = b - phi * (b - a), m2 = a + phi * (b - a);
  double c1 = cost_at(m1, nullptr), c2 = cost_at(m2, nullptr);
  for (int i = 0; i < 30; ++i) {
    if (c1 < c2) {
      b = m2, m2 = m1, c2 = c1;
      m1 = b - phi * (b - a), c1 = cost_at(m1, nullptr);
    } else {
      a = m1, m1 = m2, c1 = c2;
      m2 = a + phi * (b - a), c2 = cost_at(m2, nullptr);
    }
  }
  cost_at(0.5 * (a + b), x);
  return true;
}

}  // namespace

void FitLinks(FitContext& f, double quantile, CalibrationParams* x) {
  // A measured reduce-grads includes the time its rank stood blocked (another rank's compute, on
  // the CPU): fitted to its fastest instance. A receive is its transfer alone (the runtime keeps
  // the wait for the sender apart, TimelineEvent::wait_ns): fitted to `quantile`, as the compute
  // classes are. A latency changed by the receives is shared with the collectives, which are then
  // fitted again.
  constexpr double kFastest = 0.0;
  for (int c = 0; c < 2; ++c) {
    FitLink(f, f.reduces[c], kFastest, x, &x->collective[c], &x->latency[c]);
    const double latency = x->latency[c];
    if (!FitLatencyAndBandwidth(f, f.recvs[c], quantile, c, x)) {
      FitLink(f, f.recvs[c], quantile, x, &x->p2p[c], &x->latency[c]);
    }
    if (x->latency[c] != latency) {
      FitLink(f, f.reduces[c], kFastest, x, &x->collective[c], &x->latency[c]);
    }
  }
}

}  // namespace ptdp::costmodel::calibrate_fit
