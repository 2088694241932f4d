// The monitor's analysis: pure functions of the gathered windows (runtime/executor/monitor.h).
#include "runtime/executor/monitor.h"

#include <algorithm>
#include <cstdio>

namespace ptdp::runtime {

double RankWindow::idle_s() const {
  return std::max(0.0, wall_s - busy_s - comm_s);
}

void RankWindow::ToWire(double* out) const {
  const double v[kWireSize] = {double(rank),  double(coord.tp), double(coord.dp), double(coord.pp),
                               double(steps), wall_s,           stage_compute_s,  busy_s,
                               comm_s,        span_s,           expected_flops};
  std::copy(v, v + kWireSize, out);
}

RankWindow RankWindow::FromWire(const double* in) {
  RankWindow w;
  w.rank = static_cast<int>(in[0]);
  w.coord = RankCoord{static_cast<int>(in[1]), static_cast<int>(in[2]), static_cast<int>(in[3])};
  w.steps = static_cast<int64_t>(in[4]);
  w.wall_s = in[5];
  w.stage_compute_s = in[6];
  w.busy_s = in[7];
  w.comm_s = in[8];
  w.span_s = in[9];
  w.expected_flops = in[10];
  return w;
}

namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Seconds of stage compute per expected FLOP (0 when the rank did no work in the window).
double SecondsPerFlop(const RankWindow& w) {
  const double flops = w.expected_flops * double(w.steps);
  return flops > 0 ? w.stage_compute_s / flops : 0;
}

// Per rank: seconds of stage compute per expected FLOP over the median rank's (0: no work).
std::vector<double> Slowdowns(const std::vector<RankWindow>& ranks) {
  std::vector<double> rates;
  for (const auto& w : ranks) {
    if (SecondsPerFlop(w) > 0) rates.push_back(SecondsPerFlop(w));
  }
  const double median = Median(rates);
  std::vector<double> out;
  for (const auto& w : ranks) out.push_back(median > 0 ? SecondsPerFlop(w) / median : 0);
  return out;
}

std::vector<Straggler> FindStragglers(const std::vector<RankWindow>& ranks,
                                      const std::vector<double>& slowdown, double threshold) {
  std::vector<Straggler> out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (slowdown[i] > 1 + threshold) {
      out.push_back(Straggler{ranks[i].rank, ranks[i].coord, slowdown[i]});
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Straggler& a, const Straggler& b) { return a.slowdown > b.slowdown; });
  return out;
}

}  // namespace

MonitorReport AnalyseWindow(std::vector<RankWindow> ranks, int pp, double threshold,
                            int64_t first_step, int64_t last_step) {
  MonitorReport r;
  r.first_step = first_step;
  r.last_step = last_step;
  std::vector<double> stage_sum(static_cast<size_t>(pp), 0.0);
  std::vector<int> stage_ranks(static_cast<size_t>(pp), 0);
  double bubble_sum = 0;
  int bubble_ranks = 0;
  for (const auto& w : ranks) {
    r.utilisation.push_back(w.wall_s > 0 ? w.busy_s / w.wall_s : 0);
    if (w.steps > 0) {
      stage_sum[static_cast<size_t>(w.coord.pp)] += w.stage_compute_s / double(w.steps);
      ++stage_ranks[static_cast<size_t>(w.coord.pp)];
    }
    if (w.span_s > 0) {
      bubble_sum += std::max(0.0, w.span_s - w.stage_compute_s) / w.span_s;
      ++bubble_ranks;
    }
  }
  double most = 0, total = 0;
  for (int p = 0; p < pp; ++p) {
    const double s = stage_ranks[p] > 0 ? stage_sum[p] / stage_ranks[p] : 0;
    r.stage_compute_s.push_back(s);
    most = std::max(most, s);
    total += s;
  }
  r.imbalance = total > 0 ? most / (total / pp) : 1;
  r.bubble = bubble_ranks > 0 ? bubble_sum / bubble_ranks : 0;
  r.slowdown = Slowdowns(ranks);
  r.stragglers = FindStragglers(ranks, r.slowdown, threshold);
  r.ranks = std::move(ranks);
  return r;
}

std::string MonitorLine(const MonitorReport& r) {
  std::string line;
  char buf[160];
  std::snprintf(buf, sizeof(buf), " monitor steps %lld-%lld | utilisation",
                static_cast<long long>(r.first_step), static_cast<long long>(r.last_step));
  line += buf;
  for (double u : r.utilisation) {
    std::snprintf(buf, sizeof(buf), " %.2f", u);
    line += buf;
  }
  std::snprintf(buf, sizeof(buf), " | bubble %.3f | stage imbalance %.2f | stragglers:", r.bubble,
                r.imbalance);
  line += buf;
  if (r.stragglers.empty()) line += " none";
  for (const auto& s : r.stragglers) {
    std::snprintf(buf, sizeof(buf), " rank %d (pp %d, tp %d, dp %d) %.2fx", s.rank, s.coord.pp,
                  s.coord.tp, s.coord.dp, s.slowdown);
    line += buf;
  }
  return line;
}

OrderedJson MonitorJson(const MonitorReport& r) {
  OrderedJson j;
  j["first_step"] = r.first_step;
  j["last_step"] = r.last_step;
  j["bubble"] = r.bubble;
  j["stage_imbalance"] = r.imbalance;
  j["stage_compute_s"] = r.stage_compute_s;
  OrderedJson ranks = OrderedJson::array();
  for (size_t i = 0; i < r.ranks.size(); ++i) {
    const RankWindow& w = r.ranks[i];
    const double steps = w.steps > 0 ? double(w.steps) : 1.0;
    OrderedJson x;
    x["rank"] = w.rank;
    x["pp"] = w.coord.pp;
    x["tp"] = w.coord.tp;
    x["dp"] = w.coord.dp;
    x["utilisation"] = r.utilisation[i];
    x["slowdown"] = r.slowdown[i];
    x["busy_s"] = w.busy_s / steps;  // per step
    x["comm_s"] = w.comm_s / steps;
    x["idle_s"] = w.idle_s() / steps;
    x["stage_compute_s"] = w.stage_compute_s / steps;
    ranks.push_back(x);
  }
  j["ranks"] = ranks;
  OrderedJson slow = OrderedJson::array();
  for (const auto& s : r.stragglers) {
    slow.push_back(OrderedJson{{"rank", s.rank},
                               {"pp", s.coord.pp},
                               {"tp", s.coord.tp},
                               {"dp", s.coord.dp},
                               {"slowdown", s.slowdown}});
  }
  j["stragglers"] = slow;
  return j;
}

}  // namespace ptdp::runtime
