// The re-planner of `ptdp train --adapt` (tools/train_adapt.h ReplanForMeasuredCosts): calibrates
// the cost model's compute to a monitor window, per world rank, and replays candidate layouts for
// the same GPUs in the simulator: those with the running t, p, d (any microbatch size, schedule,
// interleaving and split of the layers, interleaved ones with short ends too), and those with
// another t, p, d of the same world size (the even split and the uneven ones the planner searches
// for that shape), which a run can only reach through a checkpoint and a relaunch. With vp = 1 the
// running t, p, d also gets per-stage splits (stage_layers) balanced for the calibrated costs, so a
// slow middle stage can hold fewer layers than its neighbours.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

#include "core/cluster.h"
#include "core/ledger.h"
#include "core/rank_grid.h"
#include "core/shapes.h"
#include "costmodel/calibrate.h"
#include "costmodel/estimate.h"
#include "schedule/schedule.h"
#include "simulator/simulator.h"
#include "tools/train_adapt.h"

namespace ptdp::tools {
namespace {

// "name before->after" of each fitted figure that moved, for --adapt's log line.
std::string CalibrationSummary(const std::vector<costmodel::FittedFigure>& figures) {
  std::string out;
  char buf[160];
  for (const costmodel::FittedFigure& f : figures) {
    if (f.before == f.after) continue;
    const std::string name = f.name.substr(0, f.name.find(" ("));
    std::snprintf(buf, sizeof buf, "%s%s %.3g->%.3g", out.empty() ? "" : ", ", name.c_str(),
                  f.before, f.after);
    out += buf;
  }
  return out;
}

void Scale(costmodel::ComputeBreakdown* b, double f) {
  b->gemm *= f;
  b->memory *= f;
  b->tp_comm *= f;
}

// The table with each pipeline rank's compute multiplied by its calibration factor.
costmodel::CostTable Calibrated(costmodel::CostTable t, const std::vector<double>& scale) {
  for (int r = 0; r < t.pp; ++r) {
    for (int chunk = 0; chunk < t.vp; ++chunk) {
      costmodel::ChunkCost& c = t.chunks[static_cast<size_t>(r * t.vp + chunk)];
      Scale(&c.forward, scale[static_cast<size_t>(r)]);
      Scale(&c.backward, scale[static_cast<size_t>(r)]);
      // W is part of the backward, so it runs at the same pace (left unscaled, a factor under
      // W/B made it more than its whole backward and the simulator refused the table).
      Scale(&c.weight_grad, scale[static_cast<size_t>(r)]);
      Scale(&c.recompute, scale[static_cast<size_t>(r)]);
    }
  }
  return t;
}

// Per pipeline rank of layout `c`: the largest factor of the world ranks `c` places on it (the
// runtime's RankGrid order), so a slow GPU keeps its slowness wherever a layout puts it, and a
// stage runs at its slowest rank's pace (a tensor group waits for it in every all-reduce, a
// data-parallel replica in the gradient all-reduce).
Result<std::vector<double>> PipelineFactors(const ParallelConfig& c,
                                            const std::vector<double>& rank_factor) {
  PTDP_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(c.tp, c.WeightReplicas(), c.pp));
  std::vector<double> out(static_cast<size_t>(c.pp), 0.0);
  for (int w = 0; w < grid.WorldSize() && w < int(rank_factor.size()); ++w) {
    double& f = out[static_cast<size_t>(grid.Coord(w).pp)];
    f = std::max(f, rank_factor[static_cast<size_t>(w)]);
  }
  return out;
}

// The simulated iteration of layout `c` with calibrated compute; an error when the layout cannot
// run here (its Program cannot be built, or a pipeline rank's ledger exceeds the memory limit).
Result<double> SimulatedStep(const PlanFile& p, const ClusterSpec& cluster, const ParallelConfig& c,
                             const std::vector<double>& rank_factor, Bytes memory_limit) {
  PTDP_ASSIGN_OR_RETURN(Program program, schedule::BuildProgram(p.model, c));
  for (int r = 0; r < c.pp && memory_limit > 0; ++r) {
    if (MemoryOf(p.model, c, program, r).Total() > memory_limit) {
      return Status::DoesNotFit("over the memory limit");
    }
  }
  PTDP_ASSIGN_OR_RETURN(const std::vector<double> scale, PipelineFactors(c, rank_factor));
  const costmodel::CostTable t = Calibrated(costmodel::BuildCostTable(p.model, cluster, c), scale);
  PTDP_ASSIGN_OR_RETURN(sim::SimResult res, sim::Simulate(program, t));
  return double(res.iteration_ns) * 1e-9;
}

// The stage splits for the same pipeline: the even one, and with vp = 1 every uneven one in
// Megatron-LM's form (first_stage_layers, last_stage_layers; the stages between share the rest
// evenly), one representation per distinct split. For pp = 2 that is every split; for pp > 2 the
// middle stages move together, so a slow middle stage is relieved only by heavier first and last
// stages, which lightens every middle stage alike.
std::vector<std::pair<int, int>> StageSplits(const PlanFile& p, const ParallelConfig& shape) {
  std::vector<std::pair<int, int>> out = {{0, 0}};
  ParallelConfig base = shape;  // the vp = 1 form, whatever the running layout's
  base.vp = 1;
  base.first_stage_layers = base.last_stage_layers = 0;
  base.stage_layers.clear();
  if (base.pp < 2) return out;
  // No even split when pp does not divide the layers (a run that started uneven): nothing to seed
  // `seen` with (StageLayerCounts refuses it), and Candidates' Validate drops the {0, 0}.
  std::vector<std::vector<int>> seen;
  if (base.ValidateStageSplit(p.model).ok()) seen.push_back(StageLayerCounts(p.model, base));
  for (int first = 0; first <= p.model.layers; ++first) {
    for (int last = 0; last <= p.model.layers; ++last) {
      ParallelConfig c = base;
      c.first_stage_layers = first;
      c.last_stage_layers = last;
      if (!c.Uneven() || !c.ValidateStageSplit(p.model).ok()) continue;
      std::vector<int> counts = StageLayerCounts(p.model, c);
      if (std::find(seen.begin(), seen.end(), counts) != seen.end()) continue;
      seen.push_back(std::move(counts));
      out.emplace_back(first, last);
    }
  }
  return out;
}

// The vp = 1 splits the planner searches for `shape`: the even one and core's UnevenStageSplits
// (short first and/or last stages, as many as the head's weight in layers asks for), not
// StageSplits' every split: for a shape a relaunch reaches, the count stays bounded.
std::vector<std::pair<int, int>> PlannerStageSplits(const PlanFile& p,
                                                    const ParallelConfig& shape) {
  std::vector<std::pair<int, int>> out = {{0, 0}};
  for (const auto& s : UnevenStageSplits(p.model, shape.pp)) out.push_back(s);
  return out;
}

// The splits to try with vp chunks per rank: vp = 1, `flat`; vp > 1, the even one and each
// short-end split core's interleaved rule allows (core/parallel.h InterleavedShortEnds: the
// embedding, the loss or both counted as a layer; at most 3 per vp, so the count stays bounded).
std::vector<std::pair<int, int>> SplitsForVp(const PlanFile& p, const ParallelConfig& shape, int vp,
                                             const std::vector<std::pair<int, int>>& flat) {
  if (vp == 1) return flat;
  std::vector<std::pair<int, int>> out = {{0, 0}};
  for (const auto& s : InterleavedShortEnds(p.model, shape.pp, vp)) out.push_back(s);
  return out;
}

// Layouts with the t, p, d of `shape`: every microbatch size dividing B/d, with 1F1B, GPipe and
// each interleaving the model's layers allow, 1F1B and GPipe with each of the `flat` splits of the
// layers over the stages (first_stage_layers, last_stage_layers), interleaved ones with
// SplitsForVp's; recomputation and the rest as running.
std::vector<ParallelConfig> Candidates(const PlanFile& p, ParallelConfig shape,
                                       const std::vector<std::pair<int, int>>& flat) {
  std::vector<ParallelConfig> out;
  shape.vp = 1;
  shape.first_stage_layers = shape.last_stage_layers = 0;
  shape.stage_layers.clear();  // a running per-stage split is not one of another p, nor of `flat`
  const int64_t per_replica = shape.global_batch / shape.dp;
  for (int64_t mbs = 1; mbs <= per_replica; ++mbs) {
    if (per_replica % mbs != 0) continue;
    for (int vp = 1; vp <= p.model.layers; ++vp) {
      const std::vector<std::pair<int, int>> splits = SplitsForVp(p, shape, vp, flat);
      for (ScheduleKind kind :
           {ScheduleKind::k1F1B, ScheduleKind::kGPipe, ScheduleKind::kInterleaved}) {
        if ((kind == ScheduleKind::kInterleaved) != (vp > 1)) continue;
        for (const auto& [first, last] : splits) {
          ParallelConfig c = shape;
          c.mbs = static_cast<int>(mbs);
          c.vp = vp;
          c.schedule = kind;
          c.first_stage_layers = first;
          c.last_stage_layers = last;
          if (c.Validate(p.model).ok()) out.push_back(c);
        }
      }
    }
  }
  return out;
}

// The cost model's compute of a vp = 1 layout per microbatch (forward and backward, recomputation
// included): one transformer layer's, and per pipeline rank its fixed work (rank 0's embedding,
// the last rank's head and loss; about none between).
struct StageWork {
  double layer_s = 0;
  std::vector<double> fixed_s;  // [pp_rank]
};

// StageWork of `c` (vp = 1, its mbs): read off the cost tables of two per-stage splits that differ
// by one layer on one rank (a near-even split, and one layer moved off its fullest rank), so that
// the layer's price and each rank's fixed work come from the same tables the simulator replays.
Result<StageWork> LayerAndFixedWork(const PlanFile& p, const ClusterSpec& cluster,
                                    ParallelConfig c) {
  const int layers = p.model.layers, pp = c.pp;
  if (pp < 2 || layers <= pp) return Status::Invalid("no layer to move between the stages");
  std::vector<int> near_even(size_t(pp), layers / pp);
  for (int r = 0; r < layers % pp; ++r) ++near_even[size_t(r)];
  std::vector<int> moved = near_even;  // rank 0 is the fullest (>= 2 since layers > pp)
  --moved[0];
  ++moved[1];
  c.stage_layers = near_even;
  const costmodel::CostTable a = costmodel::BuildCostTable(p.model, cluster, c);
  c.stage_layers = moved;
  const costmodel::CostTable b = costmodel::BuildCostTable(p.model, cluster, c);
  auto compute = [](const costmodel::CostTable& t, int r) {
    const costmodel::ChunkCost& k = t.Chunk(r, 0);
    return k.ForwardTime() + k.BackwardTime();
  };
  StageWork w;
  w.layer_s = compute(a, 0) - compute(b, 0);
  if (!(w.layer_s > 0)) return Status::Invalid("a layer priced at no time");
  for (int r = 0; r < pp; ++r) {
    w.fixed_s.push_back(std::max(0.0, compute(a, r) - near_even[size_t(r)] * w.layer_s));
  }
  return w;
}

// The contiguous split of `layers` over the pipeline ranks (at least one each) that minimises the
// largest stage time factor[r] * (fixed[r] + n_r * layer): an exact min-max by dynamic
// programming over (rank, layers placed so far), pp * layers^2 steps; ties keep the first found.
std::vector<int> BalancedSplit(int layers, const std::vector<double>& factor, const StageWork& w) {
  const int pp = int(factor.size());
  auto stage_s = [&](int r, int n) {
    return factor[size_t(r)] * (w.fixed_s[size_t(r)] + n * w.layer_s);
  };
  const double inf = std::numeric_limits<double>::infinity();
  // worst[r][n]: the least largest stage time of n layers on ranks 0..r; take[r][n]: rank r's.
  std::vector<std::vector<double>> worst(size_t(pp), std::vector<double>(size_t(layers) + 1, inf));
  std::vector<std::vector<int>> take(size_t(pp), std::vector<int>(size_t(layers) + 1, 0));
  for (int n = 1; n <= layers; ++n) {
    worst[0][size_t(n)] = stage_s(0, n);
    take[0][size_t(n)] = n;
  }
  for (int r = 1; r < pp; ++r) {
    for (int n = r + 1; n <= layers; ++n) {
      for (int k = 1; k <= n - r; ++k) {
        const double t = std::max(worst[size_t(r - 1)][size_t(n - k)], stage_s(r, k));
        if (t < worst[size_t(r)][size_t(n)]) {
          worst[size_t(r)][size_t(n)] = t;
          take[size_t(r)][size_t(n)] = k;
        }
      }
    }
  }
  std::vector<int> split(size_t(pp), 0);
  for (int r = pp - 1, n = layers; r >= 0; --r) {
    split[size_t(r)] = take[size_t(r)][size_t(n)];
    n -= split[size_t(r)];
  }
  return split;
}

// The balanced split and its neighbours: one layer moved across each boundary, either way (the
// cost model's layer price is not exact, and a replay sees the bubble and the messages the
// min-max above does not), those whose stages all keep a layer.
std::vector<std::vector<int>> SplitAndNeighbours(const std::vector<int>& split) {
  std::vector<std::vector<int>> out = {split};
  for (size_t b = 0; b + 1 < split.size(); ++b) {
    for (const auto& [from, to] : {std::pair{b, b + 1}, std::pair{b + 1, b}}) {
      if (split[from] < 2) continue;
      std::vector<int> n = split;
      --n[from];
      ++n[to];
      out.push_back(std::move(n));
    }
  }
  return out;
}

// Per pipeline rank, the cost model's stage compute per step of the running layout: what the
// monitor measures (kForward and kBackward), each instruction priced as the simulator prices it.
Result<std::vector<double>> ModelledStageCompute(const PlanFile& p, const ClusterSpec& cluster) {
  PTDP_ASSIGN_OR_RETURN(Program program, schedule::BuildProgram(p.model, p.layout));
  const costmodel::CostTable t = costmodel::BuildCostTable(p.model, cluster, p.layout);
  std::vector<double> out(static_cast<size_t>(p.layout.pp), 0.0);
  for (const RankProgram& rp : program.ranks) {
    for (const Instr& in : rp.instrs) {
      if (in.op != Op::kForward && in.op != Op::kBackward) continue;
      out[static_cast<size_t>(rp.pp_rank)] +=
          costmodel::PredictedInstructionTime(t, rp.pp_rank, in);
    }
  }
  return out;
}

// The calibration: per world rank, its measured stage compute per step over the modelled stage
// compute of its pipeline rank. It puts the prediction in this machine's units (the fastest
// rank's factor: the profile's error, common to every rank) and carries each GPU's own slowness
// (its factor over the fastest's) to whatever layers and whatever pipeline rank a candidate gives
// it (PipelineFactors). A rank the window did not measure gets the fastest rank's factor.
std::vector<double> RankFactors(const runtime::MonitorReport& report,
                                const std::vector<double>& modelled, int world_size) {
  std::vector<double> factor(static_cast<size_t>(world_size), 0.0);
  double fastest = 0;
  for (const runtime::RankWindow& w : report.ranks) {
    if (w.steps <= 0 || w.rank < 0 || w.rank >= world_size) continue;
    const double m = modelled[static_cast<size_t>(w.coord.pp)];
    if (!(m > 0)) continue;
    const double f = w.stage_compute_s / double(w.steps) / m;
    factor[static_cast<size_t>(w.rank)] = f;
    if (f > 0 && (fastest == 0 || f < fastest)) fastest = f;
  }
  for (double& f : factor) f = f > 0 ? f : (fastest > 0 ? fastest : 1.0);
  return factor;
}

// The shortest simulated step among `candidates` (not in `rejected`) into *best / *best_step_s
// when shorter than *best_step_s; returns how many were simulated.
int PickShortest(const PlanFile& p, const ClusterSpec& cluster,
                 const std::vector<ParallelConfig>& candidates, const std::vector<double>& factor,
                 Bytes memory_limit, const std::vector<std::string>& rejected, ParallelConfig* best,
                 double* best_step_s) {
  int simulated = 0;
  for (const ParallelConfig& c : candidates) {
    if (std::find(rejected.begin(), rejected.end(), c.ToString()) != rejected.end()) continue;
    auto step_s = SimulatedStep(p, cluster, c, factor, memory_limit);
    if (!step_s.ok()) continue;
    ++simulated;
    if (*step_s < *best_step_s) {
      *best_step_s = *step_s;
      *best = c;
    }
  }
  return simulated;
}

}  // namespace

// Not every per-stage split (24 layers on 4 stages have 1771, each to replay per microbatch size
// and schedule): per microbatch size, the one the calibrated costs balance and its 2 (pp - 1)
// neighbours, so tens of layouts; those Megatron's first/last form already lists are left out.
std::vector<ParallelConfig> BalancedStageCandidates(const PlanFile& running,
                                                    const ClusterSpec& cluster,
                                                    const std::vector<double>& rank_factor) {
  ParallelConfig shape = running.layout;
  shape.vp = 1;
  shape.first_stage_layers = shape.last_stage_layers = 0;
  shape.stage_layers.clear();
  std::vector<ParallelConfig> out;
  const Result<std::vector<double>> factor = PipelineFactors(shape, rank_factor);
  if (shape.pp < 2 || !factor.ok()) return out;
  std::vector<std::vector<int>> seen;  // the first/last splits Candidates already lists
  for (const auto& [first, last] : StageSplits(running, shape)) {
    ParallelConfig c = shape;
    c.first_stage_layers = first;
    c.last_stage_layers = last;
    if (c.ValidateStageSplit(running.model).ok())
      seen.push_back(StageLayerCounts(running.model, c));
  }
  const int64_t per_replica = shape.global_batch / shape.dp;
  for (int64_t mbs = 1; mbs <= per_replica; ++mbs) {
    if (per_replica % mbs != 0) continue;
    shape.mbs = static_cast<int>(mbs);
    const Result<StageWork> work = LayerAndFixedWork(running, cluster, shape);
    if (!work.ok()) continue;
    std::vector<std::vector<int>> seen_here = seen;  // each microbatch size its own splits
    for (std::vector<int>& split :
         SplitAndNeighbours(BalancedSplit(running.model.layers, *factor, *work))) {
      if (std::find(seen_here.begin(), seen_here.end(), split) != seen_here.end()) continue;
      seen_here.push_back(split);
      for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kGPipe}) {
        ParallelConfig c = shape;
        c.schedule = kind;
        c.stage_layers = split;
        if (c.Validate(running.model).ok()) out.push_back(std::move(c));
      }
    }
  }
  return out;
}

std::vector<ParallelConfig> RunningShapeCandidates(const PlanFile& running) {
  return Candidates(running, running.layout, StageSplits(running, running.layout));
}

// The shapes are those `ptdp train` accepts at start: d divides B, a tensor group within a node;
// a mixture keeps its ep (where d cp holds it) with its experts over the tensor group.
std::vector<ParallelConfig> OtherShapeCandidates(const PlanFile& p) {
  const ParallelConfig& now = p.layout;
  const int world = now.WorldSize() / now.cp;  // the context-parallel size stays
  std::vector<ParallelConfig> out;
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp != 0 || tp > p.cluster.gpus_per_node) continue;
    for (int pp = 1; pp <= world / tp; ++pp) {
      if ((world / tp) % pp != 0) continue;
      const int dp = world / tp / pp;
      if ((tp == now.tp && pp == now.pp && dp == now.dp) || now.global_batch % dp != 0) continue;
      ParallelConfig shape = now;
      shape.tp = tp;
      shape.pp = pp;
      shape.dp = dp;
      shape.sequence_parallel = now.sequence_parallel && tp > 1;  // it needs t > 1
      // The experts split over the new tensor group, as this runtime runs them (etp = t); the
      // same ep where the new data group holds it, which Validate checks.
      shape.etp = 0;
      for (ParallelConfig& c : Candidates(p, shape, PlannerStageSplits(p, shape))) {
        out.push_back(std::move(c));
      }
    }
  }
  return out;
}

double WindowStepSeconds(std::vector<double> step_s) {
  if (step_s.empty()) return 0;
  std::sort(step_s.begin(), step_s.end());
  const size_t n = step_s.size();
  return n % 2 == 1 ? step_s[n / 2] : 0.5 * (step_s[n / 2 - 1] + step_s[n / 2]);
}

TrialLesson LearnFromTrial(double predicted_gain, double before_step_s, double after_step_s,
                           double move_s, double first_step_s) {
  TrialLesson l;
  l.realised_gain = before_step_s > 0 ? 1 - after_step_s / before_step_s : 0;
  l.trust = predicted_gain > 0 ? std::clamp(l.realised_gain / predicted_gain, 0.0, 1.0) : 0.0;
  l.first_step_excess_s = std::max(0.0, first_step_s - after_step_s);
  l.cost_s = move_s + l.first_step_excess_s;
  return l;
}

SwitchVerdict JudgeSwitch(double predicted_gain, double threshold, double trust,
                          double switch_cost_s, double measured_step_s, int64_t steps_left) {
  SwitchVerdict v;
  v.discounted_gain = predicted_gain * trust;
  v.saving_s = v.discounted_gain * measured_step_s;
  v.repaid_s = v.saving_s * double(std::max<int64_t>(steps_left, 0));
  char buf[200];
  if (!(v.discounted_gain > threshold)) {
    v.why = "staying (under --adapt-threshold)";
  } else if (switch_cost_s >= 0 && measured_step_s > 0 && !(v.repaid_s > switch_cost_s)) {
    std::snprintf(buf, sizeof buf,
                  "staying (a saving of %.4f s a step repays %.3f s over the %lld steps left, "
                  "under the last switch's cost of %.3f s)",
                  v.saving_s, v.repaid_s, static_cast<long long>(steps_left), switch_cost_s);
    v.why = buf;
  } else {
    v.go = true;
    v.why = "switching";
  }
  return v;
}

Result<Replan> ReplanForMeasuredCosts(const PlanFile& running, const runtime::MonitorReport& report,
                                      Bytes memory_limit, const std::vector<std::string>& rejected,
                                      const Timeline* last_step) {
  PTDP_ASSIGN_OR_RETURN(ClusterSpec cluster,
                        LoadCluster(running.cluster.name, running.layout.WorldSize()));
  // Candidates are priced for the stack the plan was (its overlaps, fusions and optimizer bytes),
  // as `ptdp simulate --plan` prices it; LoadCluster's empty profile is what unit tests get.
  PTDP_ASSIGN_OR_RETURN(cluster.software, PlanSoftware(running));
  const ParallelConfig& now = running.layout;
  Replan out;
  if (last_step != nullptr && !last_step->events.empty()) {
    // The fit is of the machine, not of a slow GPU: each pipeline rank's forwards and backwards
    // are first brought to the fastest rank's pace (the window's factors under the starting
    // profile), so that a straggler's slowness stays in its own factor below instead of being
    // spread over the GEMM and memory figures of every rank.
    PTDP_ASSIGN_OR_RETURN(const std::vector<double> modelled0,
                          ModelledStageCompute(running, cluster));
    PTDP_ASSIGN_OR_RETURN(const std::vector<double> pace,
                          PipelineFactors(now, RankFactors(report, modelled0, now.WorldSize())));
    const double fastest = *std::min_element(pace.begin(), pace.end());
    Timeline steady = *last_step;
    for (TimelineEvent& e : steady.events) {
      if (e.instr.op != Op::kForward && e.instr.op != Op::kBackward) continue;
      const double slow = pace[size_t(e.pp_rank)] / fastest;
      if (slow > 1) e.end_ns = e.start_ns + Nanoseconds(double(e.Duration()) / slow);
    }
    auto fit = costmodel::Calibrate(
        running.model, cluster, now, running.program, steady,
        "ptdp train --adapt, fitted to the window's last step of " + now.ToString());
    // A fit of one noisy step can be worse than the profile: kept only when it lowers the
    // compute instructions' median error.
    if (fit.ok()) {
      out.calibrated = fit->median_error_after < fit->median_error_before;
      if (out.calibrated) cluster.profile = fit->profile;
      out.calibrated_error_before = fit->median_error_before;
      out.calibrated_error_after = fit->median_error_after;
      out.calibration_summary = CalibrationSummary(fit->figures);
    }
  }
  PTDP_ASSIGN_OR_RETURN(const std::vector<double> modelled, ModelledStageCompute(running, cluster));
  out.rank_scale = RankFactors(report, modelled, now.WorldSize());
  PTDP_ASSIGN_OR_RETURN(out.scale, PipelineFactors(now, out.rank_scale));
  PTDP_ASSIGN_OR_RETURN(out.current_step_s,
                        SimulatedStep(running, cluster, now, out.rank_scale, /*memory_limit=*/0));
  out.layout = now;
  out.best_step_s = out.current_step_s;
  out.candidates = PickShortest(running, cluster, RunningShapeCandidates(running), out.rank_scale,
                                memory_limit, rejected, &out.layout, &out.best_step_s);
  out.candidates +=
      PickShortest(running, cluster, BalancedStageCandidates(running, cluster, out.rank_scale),
                   out.rank_scale, memory_limit, rejected, &out.layout, &out.best_step_s);
  ParallelConfig other;
  double other_step_s = out.current_step_s;  // only a shorter one counts
  out.other_candidates =
      PickShortest(running, cluster, OtherShapeCandidates(running), out.rank_scale, memory_limit,
                   rejected, &other, &other_step_s);
  if (other_step_s < out.current_step_s) {
    out.other = other;
    out.other_step_s = other_step_s;
  }
  return out;
}

}  // namespace ptdp::tools
