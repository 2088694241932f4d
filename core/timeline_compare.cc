#include "core/timeline_compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

namespace ptdp {
namespace {

using Key = std::tuple<int32_t, Op, int32_t, int32_t, int32_t>;  // rank, op, mb, chunk, peer

Key KeyOf(const TimelineEvent& e) {
  return {e.pp_rank, e.instr.op, e.instr.microbatch, e.instr.chunk, e.instr.peer};
}

// Each key's events in start order, so that repeated keys (none in a valid Program) still pair up.
std::map<Key, std::vector<const TimelineEvent*>> ByKey(const Timeline& t) {
  std::map<Key, std::vector<const TimelineEvent*>> m;
  for (const TimelineEvent& e : t.events) m[KeyOf(e)].push_back(&e);
  for (auto& [k, v] : m) {
    std::sort(v.begin(), v.end(), [](const TimelineEvent* a, const TimelineEvent* b) {
      return a->start_ns < b->start_ns;
    });
  }
  return m;
}

// Idle share of each rank's compute span (forward and backward instructions only).
std::vector<double> Bubbles(const Timeline& t) {
  std::vector<Nanoseconds> busy(t.pp, 0), end(t.pp, 0);
  for (const TimelineEvent& e : t.events) {
    if (!IsCompute(e.instr.op)) continue;
    busy[e.pp_rank] += e.Duration();
    end[e.pp_rank] = std::max(end[e.pp_rank], e.end_ns);
  }
  std::vector<double> b(t.pp, 0.0);
  for (int r = 0; r < t.pp; ++r) {
    if (end[r] > 0) b[r] = std::max(0.0, 1.0 - double(busy[r]) / double(end[r]));
  }
  return b;
}

// Per rank: seconds stood blocked in receives waiting for the sender (TimelineEvent::wait_ns).
std::vector<double> ReceiveWaits(const Timeline& t) {
  std::vector<double> w(t.pp, 0.0);
  for (const TimelineEvent& e : t.events) w[e.pp_rank] += double(e.wait_ns) * 1e-9;
  return w;
}

double RelativeError(Seconds predicted, Seconds measured) {
  return measured > 0 ? (predicted - measured) / measured : 0.0;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

Result<TimelineComparison> CompareTimelines(const Timeline& predicted, const Timeline& measured,
                                            int top) {
  if (predicted.pp != measured.pp || predicted.vp != measured.vp) {
    return Status::Invalid("the traces are of different layouts: predicted pp " +
                           std::to_string(predicted.pp) + " vp " + std::to_string(predicted.vp) +
                           ", measured pp " + std::to_string(measured.pp) + " vp " +
                           std::to_string(measured.vp));
  }
  TimelineComparison c;
  c.predicted_step_s = ToSeconds(predicted.EndNs());
  c.measured_step_s = ToSeconds(measured.EndNs());
  c.predicted_bubble = Bubbles(predicted);
  c.measured_bubble = Bubbles(measured);
  c.predicted_wait_s = ReceiveWaits(predicted);
  c.measured_wait_s = ReceiveWaits(measured);
  const auto pred = ByKey(predicted), meas = ByKey(measured);
  std::map<std::pair<int32_t, Op>, OpKindTimes> kinds;
  std::vector<InstrTimes> all;
  std::vector<double> errors, compute_errors;
  for (const auto& [key, pv] : pred) {
    const auto it = meas.find(key);
    const size_t n = it == meas.end() ? 0 : std::min(pv.size(), it->second.size());
    c.only_predicted += int64_t(pv.size() - n);
    for (size_t i = 0; i < n; ++i) {
      const TimelineEvent& p = *pv[i];
      const TimelineEvent& m = *it->second[i];
      InstrTimes x{p.pp_rank, p.instr, ToSeconds(p.Duration()), ToSeconds(m.Duration())};
      OpKindTimes& k = kinds[{p.pp_rank, p.instr.op}];
      k.pp_rank = p.pp_rank, k.op = p.instr.op, k.count += 1;
      k.predicted_s += x.predicted_s, k.measured_s += x.measured_s;
      if (x.measured_s > 0) {
        const double e = std::fabs(RelativeError(x.predicted_s, x.measured_s));
        errors.push_back(e);
        if (IsComputeOrOptimizerStep(p.instr.op)) compute_errors.push_back(e);
      }
      all.push_back(x);
    }
    c.matched += int64_t(n);
  }
  for (const auto& [key, mv] : meas) {
    const auto it = pred.find(key);
    c.only_measured += int64_t(mv.size()) -
                       (it == pred.end() ? 0 : int64_t(std::min(mv.size(), it->second.size())));
  }
  for (const auto& [k, v] : kinds) c.by_kind.push_back(v);
  std::sort(all.begin(), all.end(), [](const InstrTimes& a, const InstrTimes& b) {
    return std::fabs(a.measured_s - a.predicted_s) > std::fabs(b.measured_s - b.predicted_s);
  });
  all.resize(std::min<size_t>(all.size(), size_t(std::max(0, top))));
  c.divergent = std::move(all);
  c.median_relative_error = Median(std::move(errors));
  c.median_relative_error_compute = Median(std::move(compute_errors));
  return c;
}

std::string ComparisonText(const TimelineComparison& c) {
  std::string out;
  char line[256];
  const auto pct = [](Seconds p, Seconds m) { return 100.0 * RelativeError(p, m); };
  std::snprintf(line, sizeof line, "step time: predicted %.3f ms, measured %.3f ms (%+.1f%%)\n",
                c.predicted_step_s * 1e3, c.measured_step_s * 1e3,
                pct(c.predicted_step_s, c.measured_step_s));
  out += line;
  std::snprintf(line, sizeof line,
                "instructions: %lld matched, %lld only predicted, %lld only measured; median "
                "|error| per instruction %.1f%%\n",
                static_cast<long long>(c.matched), static_cast<long long>(c.only_predicted),
                static_cast<long long>(c.only_measured), 100.0 * c.median_relative_error);
  out += line;
  std::snprintf(line, sizeof line,
                "median |error| of the compute instructions (forward, backward, optimizer step) "
                "%.1f%%\n",
                100.0 * c.median_relative_error_compute);
  out += line;
  out += "bubble (idle share of each rank's compute span), predicted / measured:\n";
  for (size_t r = 0; r < c.predicted_bubble.size(); ++r) {
    std::snprintf(line, sizeof line, "  pp rank %zu: %5.1f%% / %5.1f%%\n", r,
                  100.0 * c.predicted_bubble[r], 100.0 * c.measured_bubble[r]);
    out += line;
  }
  out +=
      "blocked in receives, waiting for the sender (not in the receives' times), predicted / "
      "measured:\n";
  for (size_t r = 0; r < c.predicted_wait_s.size(); ++r) {
    std::snprintf(line, sizeof line, "  pp rank %zu: %.3f ms / %.3f ms\n", r,
                  1e3 * c.predicted_wait_s[r], 1e3 * c.measured_wait_s[r]);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-8s %-15s %7s %14s %13s %8s\n", "pp rank", "op", "count",
                "predicted_ms", "measured_ms", "error");
  out += line;
  for (const OpKindTimes& k : c.by_kind) {
    std::snprintf(line, sizeof line, "%-8d %-15s %7lld %14.3f %13.3f %+7.1f%%\n", k.pp_rank,
                  OpName(k.op), static_cast<long long>(k.count), k.predicted_s * 1e3,
                  k.measured_s * 1e3, pct(k.predicted_s, k.measured_s));
    out += line;
  }
  if (!c.divergent.empty()) {
    out += "most divergent instructions (|measured - predicted|):\n";
    std::snprintf(line, sizeof line, "%-8s %-14s %14s %13s %8s\n", "pp rank", "instruction",
                  "predicted_us", "measured_us", "error");
    out += line;
    for (const InstrTimes& x : c.divergent) {
      std::snprintf(line, sizeof line, "%-8d %-14s %14.1f %13.1f %+7.1f%%\n", x.pp_rank,
                    InstrToText(x.instr, true).c_str(), x.predicted_s * 1e6, x.measured_s * 1e6,
                    pct(x.predicted_s, x.measured_s));
      out += line;
    }
  }
  return out;
}

}  // namespace ptdp
