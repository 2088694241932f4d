// The runtime monitor (`ptdp train --monitor-every N`, docs/runtime.md "Monitor"): what each rank
// did over a window of steps, from the device marks the executor already takes between
// instructions, and the analysis of every rank's window on world rank 0: utilisation, bubble,
// stage imbalance and stragglers. The analysis is a pure function of the numbers (unit-tested on
// synthetic windows); the Trainer fills and gathers the windows (Trainer::GatherMonitor).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/rank_grid.h"

namespace ptdp::runtime {

// One rank's sums over a window of steps. Every instruction's time is its device marks' difference:
//   stage compute: kForward and kBackward (with t > 1 they hold the tensor-parallel all-reduces);
//   busy: stage compute and kOptimizerStep (AdamW, and the world's norm gather);
//   comm: kRecvAct, kRecvGrad, kSendAct, kSendGrad, kReduceGrads. With MPI a receive's wait for
//         its sender is timed apart (TimelineEvent::wait_ns) and falls to idle; on NCCL and in
//         kReduceGrads the wait for a slower peer is still counted here: the monitor cannot tell a
//         slow link from a late sender, which is why stragglers are found from compute;
//   idle: the job's step time (its slowest rank's) less busy and comm: receives' waits, host work
//         between instructions and the end of a step this rank finished before the slowest one.
struct RankWindow {
  int rank = 0;  // world rank
  RankCoord coord;
  int64_t steps = 0;
  double wall_s = 0;  // the job's step times summed (slowest rank's, StepMetrics::iteration_s)
  double stage_compute_s = 0;
  double busy_s = 0;
  double comm_s = 0;
  double span_s = 0;          // per step, first forward's start to last backward's end, summed
  double expected_flops = 0;  // per step: core/ledger.h PipelineRankFlops of its pipeline rank

  double idle_s() const;
  // Wire form (AllGatherDoubles): a fixed number of doubles.
  static constexpr int kWireSize = 11;
  void ToWire(double* out) const;
  static RankWindow FromWire(const double* in);
};

struct Straggler {
  int rank = 0;
  RankCoord coord;
  double slowdown = 1;  // its seconds per expected FLOP over the median rank's
};

struct MonitorReport {
  int64_t first_step = 0, last_step = 0;
  std::vector<RankWindow> ranks;    // by world rank
  std::vector<double> utilisation;  // per rank: busy / wall
  // Per rank: compute per expected FLOP over the median rank's (0: no work in the window).
  std::vector<double> slowdown;
  std::vector<double> stage_compute_s;  // per pipeline rank, per step: mean over its ranks
  double bubble = 0;                    // mean over ranks of (span - stage compute) / span
  double imbalance = 1;                 // max / mean of stage_compute_s
  std::vector<Straggler> stragglers;    // slowest first
};

// The analysis. Ranks are compared by stage compute per expected FLOP, so a rank of a heavier
// stage (the head's) is not taken for a straggler and ranks of one stage across t and d are
// compared directly; a straggler is slower than the median rank by more than `threshold`
// (0.2: 20 %). REQUIRES: ranks by world rank, pp >= 1, every pipeline rank < pp.
MonitorReport AnalyseWindow(std::vector<RankWindow> ranks, int pp, double threshold,
                            int64_t first_step, int64_t last_step);
// One line for stdout.
std::string MonitorLine(const MonitorReport& r);
// The JSON record (`--log`: the "monitor" field of the window's last step).
OrderedJson MonitorJson(const MonitorReport& r);

}  // namespace ptdp::runtime
