#include "costmodel/calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "core/checked.h"
#include "core/rank_grid.h"
#include "core/shapes.h"
#include "costmodel/calibrate_fit.h"
#include "costmodel/collectives.h"
#include "costmodel/estimate.h"

namespace ptdp::costmodel {
namespace {

using namespace calibrate_fit;

// Scales `f` by `x` and says so in its source.
void Scale(Sourced* f, double x, const std::string& source) {
  if (x == 1.0) return;
  const double before = f->value;
  f->value = before * x;
  f->source = source + ": " + FormatDouble(before) + " x " + FormatDouble(x) +
              " (starting figure: " + f->source + ")";
}

// The mean of log2(2 m n k) over a table's entries: where gemm_size's per-doubling factor is 1.
double Log2MeanFlops(const GemmTable& t) {
  double log2_mean = 0;
  for (double m : t.m)
    for (double n : t.n)
      for (double k : t.k) log2_mean += std::log2(2 * m * n * k);
  return log2_mean / double(t.tflops.size());
}

// What a GEMM of (m, n, k) is multiplied by: x, and per_doubling for each doubling of its FLOPs
// above the table's mean.
double SizeScale(double m, double n, double k, double x, double per_doubling, double log2_mean) {
  return x * std::pow(per_doubling, std::log2(2 * m * n * k) - log2_mean);
}

std::string ScaleNote(double x, double per_doubling, double log2_mean) {
  return "x " + FormatDouble(x) +
         (per_doubling == 1.0 ? std::string()
                              : " x " + FormatDouble(per_doubling) + "^log2(2mnk / 2^" +
                                    FormatDouble(log2_mean) + ")");
}

// Every entry times x, and times per_doubling for each doubling of its FLOPs (2 m n k) above the
// table's geometric mean (fewer below it).
void ScaleTable(GemmTable* t, double x, double per_doubling, const std::string& source) {
  if ((x == 1.0 && per_doubling == 1.0) || t->empty()) return;
  const double log2_mean = Log2MeanFlops(*t);
  size_t i = 0;
  for (double m : t->m)
    for (double n : t->n)
      for (double k : t->k) t->tflops[i++] *= SizeScale(m, n, k, x, per_doubling, log2_mean);
  t->source = source + ": every entry " + ScaleNote(x, per_doubling, log2_mean) +
              " (starting table: " + t->source + ")";
}

// The exact points priced in place of the tables move as the tables do: each rate by its kind's
// multiple and gemm_size about the mean of its own table, so a shape priced from a point and one
// priced from the grid beside it keep their ratio (the means: ScaleTable's, from the axes alone).
void ScalePoints(const HardwareProfile& start, const CalibrationParams& x,
                 const std::string& source, GemmPoints* points) {
  const bool unit = x.gemm_forward == 1.0 && x.gemm_backward == 1.0 && x.gemm_size == 1.0;
  if (points->empty() || unit) return;
  const double fwd_mean = Log2MeanFlops(start.gemm);
  // A profile read from JSON has both backward tables beside its points (core/hardware.cc).
  const auto mean_of = [&](const GemmTable& t) { return t.empty() ? fwd_mean : Log2MeanFlops(t); };
  const double data_mean = mean_of(start.gemm_backward_data);
  const double weight_mean = mean_of(start.gemm_backward_weight);
  for (GemmPoint& p : points->points) {
    const double m = double(p.m), n = double(p.n), k = double(p.k);
    p.forward_tflops *= SizeScale(m, n, k, x.gemm_forward, x.gemm_size, fwd_mean);
    p.backward_data_tflops *= SizeScale(m, n, k, x.gemm_backward, x.gemm_size, data_mean);
    p.backward_weight_tflops *= SizeScale(m, n, k, x.gemm_backward, x.gemm_size, weight_mean);
  }
  points->source = source + ": forward_tflops " + ScaleNote(x.gemm_forward, x.gemm_size, fwd_mean) +
                   ", backward_data_tflops " + ScaleNote(x.gemm_backward, x.gemm_size, data_mean) +
                   ", backward_weight_tflops " +
                   ScaleNote(x.gemm_backward, x.gemm_size, weight_mean) +
                   " (starting points: " + points->source + ")";
}

// A busbw curve is a link's figure for its collective: scaled with the constant it replaces.
void ScaleCurve(BusbwCurve* c, double x, const std::string& source) {
  if (x == 1.0) return;
  for (double& v : c->busbw_GBps) v *= x;
  c->source =
      source + ": every point x " + FormatDouble(x) + " (starting curve: " + c->source + ")";
}

void ScaleLink(LinkProfile* l, double p2p, double collective, double latency,
               const std::string& source) {
  for (BusbwCurve& c : l->busbw_curves) {
    ScaleCurve(&c, c.collective == "send_recv" ? p2p : collective, source);
  }
  Scale(&l->send_recv_GBps, p2p, source);
  Scale(&l->all_reduce_busbw_GBps, collective, source);
  Scale(&l->all_gather_busbw_GBps, collective, source);
  Scale(&l->reduce_scatter_busbw_GBps, collective, source);
  Scale(&l->latency_us, latency, source);
}

// The compute instructions (core/program.h IsComputeOrOptimizerStep) the fit explains: all but the
// split backward's halves, which PredictedInstructionTime does not price one by one (their
// classes would have no prediction to scale), so a zero-bubble run's halves are left out of the
// fit.
bool IsFittedCompute(Op op) {
  return IsComputeOrOptimizerStep(op) && op != Op::kBackwardInput && op != Op::kBackwardWeight;
}
bool IsRecv(Op op) {
  return op == Op::kRecvAct || op == Op::kRecvGrad;
}

double RelativeError(Seconds predicted, Seconds measured) {
  return std::fabs(predicted - measured) / measured;
}

double Median(std::vector<double> v) {
  return Quantile(std::move(v), 0.5);
}

using ClassKey = std::tuple<int, int32_t, Op, int32_t, bool>;  // run, rank, op, chunk, recompute

// ---- Compute: Levenberg-Marquardt on log time ----

constexpr int kComputeParams = 6;
constexpr int kOptimizerParam = 5;  // fitted only when the profile has the step's rate
double* ComputeParam(CalibrationParams& x, int i) {
  double* p[kComputeParams] = {&x.gemm_forward,  &x.gemm_backward, &x.memory_bound,
                               &x.kernel_launch, &x.gemm_size,     &x.optimizer};
  return p[i];
}
double ComputeParamValue(CalibrationParams x, int i) {
  return *ComputeParam(x, i);
}

// Weight of the pull of each fitted multiplier towards 1 (in log space): a figure the run pins down
// only weakly stays near the starting profile's instead of trading against another to absorb
// noise. Against the data's weights (sqrt(count) per class, 2.8 for 8 microbatches) it moves a
// well-determined figure by a fraction of a percent.
constexpr double kPrior = 0.01;

// Residuals, one per class: sqrt(count) (log predicted - log typical measured); then one per active
// multiplier: kPrior log(multiplier).
std::vector<double> ComputeResiduals(FitContext& f, const CalibrationParams& x,
                                     const std::vector<int>& active) {
  const std::vector<CostTable> t = f.TablesFor(x);
  std::vector<double> r;
  for (const ComputeClass& c : f.classes) {
    const Seconds p = PredictedInstructionTime(t[size_t(c.run)], c.pp_rank, c.instr);
    const double w = std::sqrt(double(c.measured_s.size()));
    r.push_back(w * (std::log(std::max(p, 1e-15)) - std::log(c.typical_s)));
  }
  for (int i : active) r.push_back(kPrior * std::log(ComputeParamValue(x, i)));
  return r;
}

double SumSquares(const std::vector<double>& r) {
  double s = 0;
  for (double v : r) s += v * v;
  return s;
}

// Solves A d = b for a small dense system (Gaussian elimination, partial pivoting); false when
// singular.
bool Solve(std::vector<std::vector<double>> A, std::vector<double> b, std::vector<double>* d) {
  const size_t n = b.size();
  for (size_t c = 0; c < n; ++c) {
    size_t piv = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::fabs(A[r][c]) > std::fabs(A[piv][c])) piv = r;
    if (std::fabs(A[piv][c]) < 1e-300) return false;
    std::swap(A[c], A[piv]);
    std::swap(b[c], b[piv]);
    for (size_t r = c + 1; r < n; ++r) {
      const double k = A[r][c] / A[c][c];
      for (size_t j = c; j < n; ++j) A[r][j] -= k * A[c][j];
      b[r] -= k * b[c];
    }
  }
  d->assign(n, 0.0);
  for (size_t c = n; c-- > 0;) {
    double s = b[c];
    for (size_t j = c + 1; j < n; ++j) s -= A[c][j] * (*d)[j];
    (*d)[c] = s / A[c][c];
  }
  return true;
}

// The active parameters in log space, applied to a copy of `base`.
CalibrationParams WithLogs(const CalibrationParams& base, const std::vector<int>& active,
                           const std::vector<double>& logs) {
  CalibrationParams x = base;
  for (size_t i = 0; i < active.size(); ++i) {
    *ComputeParam(x, active[i]) = std::clamp(std::exp(logs[i]), kMinScale, kMaxScale);
  }
  return x;
}

using Matrix = std::vector<std::vector<double>>;

// The Gauss-Newton normal equations at `logs`: A = J^T J and g = -J^T r, with the Jacobian J of
// the residuals by forward differences in log space.
void NormalEquations(FitContext& f, const CalibrationParams& x, const std::vector<int>& active,
                     const std::vector<double>& logs, const std::vector<double>& r, Matrix* A,
                     std::vector<double>* g) {
  const size_t n = active.size();
  constexpr double h = 1e-6;
  Matrix J(r.size(), std::vector<double>(n));
  for (size_t j = 0; j < n; ++j) {
    std::vector<double> moved = logs;
    moved[j] += h;
    const std::vector<double> r2 = ComputeResiduals(f, WithLogs(x, active, moved), active);
    for (size_t i = 0; i < r.size(); ++i) J[i][j] = (r2[i] - r[i]) / h;
  }
  A->assign(n, std::vector<double>(n, 0.0));
  g->assign(n, 0.0);
  for (size_t i = 0; i < r.size(); ++i) {
    for (size_t a = 0; a < n; ++a) {
      (*g)[a] -= J[i][a] * r[i];
      for (size_t b = 0; b < n; ++b) (*A)[a][b] += J[i][a] * J[i][b];
    }
  }
}

// One Levenberg-Marquardt step: raises the damping until a step lowers the cost. Returns the
// largest change of a log multiplier taken (0: none lowered it, or too little to matter).
double DampedStep(FitContext& f, const CalibrationParams& x, const std::vector<int>& active,
                  const Matrix& A, const std::vector<double>& g, double* lambda,
                  std::vector<double>* logs, std::vector<double>* r, double* cost) {
  const size_t n = active.size();
  for (; *lambda < 1e12; *lambda *= 4) {
    Matrix D = A;
    for (size_t a = 0; a < n; ++a) D[a][a] += *lambda * std::max(A[a][a], 1e-12);
    std::vector<double> d;
    if (!Solve(D, g, &d)) continue;
    std::vector<double> next = *logs;
    for (size_t a = 0; a < n; ++a) {
      next[a] = std::clamp(next[a] + d[a], std::log(kMinScale), std::log(kMaxScale));
    }
    std::vector<double> r2 = ComputeResiduals(f, WithLogs(x, active, next), active);
    const double c2 = SumSquares(r2);
    if (c2 >= *cost) continue;
    double moved = 0;
    for (size_t a = 0; a < n; ++a) moved = std::max(moved, std::fabs(next[a] - (*logs)[a]));
    const bool negligible = *cost - c2 < 1e-15 * (1 + c2);
    *logs = std::move(next), *r = std::move(r2), *cost = c2;
    *lambda = std::max(*lambda / 3, 1e-9);
    return negligible ? 0.0 : moved;
  }
  return 0.0;
}

// Minimises ComputeResiduals over the active parameters; returns the steps taken.
int FitCompute(FitContext& f, const std::vector<int>& active, CalibrationParams* x) {
  std::vector<double> logs;
  for (int i : active) logs.push_back(std::log(*ComputeParam(*x, i)));
  std::vector<double> r = ComputeResiduals(f, WithLogs(*x, active, logs), active);
  double cost = SumSquares(r), lambda = 1e-3;
  int steps = 0;
  for (; steps < 200; ++steps) {
    Matrix A;
    std::vector<double> g;
    NormalEquations(f, *x, active, logs, r, &A, &g);
    if (DampedStep(f, *x, active, A, g, &lambda, &logs, &r, &cost) < 1e-10) break;
  }
  *x = WithLogs(*x, active, logs);
  return steps;
}

// ---- Reading the run ----

// Checks the run against the Program; fills the fit's samples and `all` (every measured
// instruction of positive duration).
Status Gather(int run, const Program& program, const Timeline& measured,
              const CostTable& start_table, const std::vector<int>& reduce_class, double quantile,
              FitContext* f, std::vector<Sample>* all) {
  if (measured.pp != program.pp || measured.vp != program.vp ||
      measured.microbatches != program.microbatches) {
    return Status::Invalid(
        "the measured trace is of another layout: pp " + std::to_string(measured.pp) + " vp " +
        std::to_string(measured.vp) + " microbatches " + std::to_string(measured.microbatches) +
        ", the plan's pp " + std::to_string(program.pp) + " vp " + std::to_string(program.vp) +
        " microbatches " + std::to_string(program.microbatches));
  }
  std::set<std::tuple<int32_t, Op, int32_t, int32_t, int32_t>> in_program;
  for (const RankProgram& rp : program.ranks) {
    for (const Instr& in : rp.instrs) {
      in_program.insert({rp.pp_rank, in.op, in.microbatch, in.chunk, in.peer});
    }
  }
  std::map<ClassKey, ComputeClass> classes;
  for (const TimelineEvent& e : measured.events) {
    const Instr& in = e.instr;
    if (!in_program.count({e.pp_rank, in.op, in.microbatch, in.chunk, in.peer})) {
      return Status::Invalid("the measured trace's " + InstrToText(in) + " on pp rank " +
                             std::to_string(e.pp_rank) + " is not in the plan's Program");
    }
    const Seconds d = ToSeconds(e.Duration());
    if (!(d > 0)) continue;  // a zero-length mark says nothing of a rate
    const Sample s{run, e.pp_rank, in, d};
    all->push_back(s);
    if (IsFittedCompute(in.op)) {
      ComputeClass& c = classes[{run, e.pp_rank, in.op, in.chunk, in.recompute}];
      c.run = run, c.pp_rank = e.pp_rank, c.instr = in;
      c.measured_s.push_back(d);
    } else if (IsRecv(in.op)) {
      const int link = in.op == Op::kRecvAct ? in.peer : e.pp_rank;
      f->recvs[start_table.p2p_link[link].inter_node ? 1 : 0].push_back(s);
    } else if (in.op == Op::kReduceGrads) {
      f->reduces[reduce_class[e.pp_rank]].push_back(s);
    }
  }
  for (auto& [k, c] : classes) {
    c.typical_s = Quantile(c.measured_s, quantile);
    f->classes.push_back(c);
  }
  if (classes.empty()) {
    return Status::Invalid(
        "the measured trace has no forward, backward or optimizer-step "
        "instruction with a positive duration");
  }
  return Status::Ok();
}

// The link class of each pipeline rank's reduce-grads: inter-node when the data-parallel or the
// embedding group of its first GPU spans nodes.
std::vector<int> ReduceGradsLinkClass(const ClusterSpec& cluster, const ParallelConfig& c,
                                      const ModelSpec& m) {
  const RankGrid grid = *RankGrid::Create(c.tp, c.WeightReplicas(), c.pp);  // as BuildCostTable
  std::vector<int> out(c.pp, 0);
  for (int r = 0; r < c.pp; ++r) {
    const int rank = grid.Rank({0, 0, r});
    bool inter = SpanOf(grid.DataGroup(rank), cluster.gpus_per_node).inter_node();
    if (InTiedEmbeddingGroup(m, c, r)) {
      inter = inter || SpanOf(grid.EmbeddingGroup(rank), cluster.gpus_per_node).inter_node();
    }
    out[r] = inter ? 1 : 0;
  }
  return out;
}

}  // namespace

HardwareProfile ApplyCalibration(const HardwareProfile& start, const CalibrationParams& x,
                                 const std::string& source) {
  HardwareProfile p = start;
  ScalePoints(start, x, source, &p.gemm_points);
  ScaleTable(&p.gemm, x.gemm_forward, x.gemm_size, source);
  if (!p.gemm_backward_data.empty() && !p.gemm_backward_weight.empty()) {
    ScaleTable(&p.gemm_backward_data, x.gemm_backward, x.gemm_size, source);
    ScaleTable(&p.gemm_backward_weight, x.gemm_backward, x.gemm_size, source);
  }
  // Backward GEMMs priced from the forward table move with its scale; the efficiency makes their
  // throughput gemm_backward times the starting one.
  const double efficiency = x.gemm_backward / x.gemm_forward;
  if (efficiency != 1.0) {
    if (p.gemm_backward_efficiency.source.empty()) {
      p.gemm_backward_efficiency = {1.0, "absent: the forward table's throughput"};
    }
    Scale(&p.gemm_backward_efficiency, efficiency, source);
  }
  Scale(&p.memory_bound_GBps, x.memory_bound, source);
  Scale(&p.optimizer_Gparams_per_s, x.optimizer, source);
  Scale(&p.kernel_launch_us, x.kernel_launch, source);
  ScaleLink(&p.intra_node, x.p2p[0], x.collective[0], x.latency[0], source);
  ScaleLink(&p.inter_node, x.p2p[1], x.collective[1], x.latency[1], source);
  return p;
}

Seconds PredictedInstructionTime(const CostTable& t, int pp_rank, const Instr& in) {
  switch (in.op) {
    case Op::kForward:
      return t.Chunk(pp_rank, in.chunk).ForwardTime();
    case Op::kBackward: {
      const ChunkCost& c = t.Chunk(pp_rank, in.chunk);
      return c.backward.Total() + (in.recompute ? c.recompute.Total() : 0.0);
    }
    case Op::kOptimizerStep:
      return t.optimizer[pp_rank];
    case Op::kReduceGrads:
      return t.dp_allreduce[pp_rank] + t.embedding_allreduce[pp_rank];
    case Op::kRecvAct:
    case Op::kRecvGrad: {
      // Activations come over the sender's link, gradients over this rank's (simulator.cc).
      const int link = in.op == Op::kRecvAct ? in.peer : pp_rank;
      return t.p2p_link[link].Time(in.bytes) + (in.bytes > 0 ? t.p2p_allgather : 0.0);
    }
    case Op::kSendAct:
    case Op::kSendGrad:
    case Op::kBackwardInput:  // not fitted (IsFittedCompute)
    case Op::kBackwardWeight:
      return -1;
  }
  return -1;
}

namespace {

// Median error per op kind and over the compute instructions, before and after.
void ReportErrors(const std::vector<Sample>& all, const std::vector<CostTable>& before,
                  const std::vector<CostTable>& after, CalibrationResult* res) {
  std::map<Op, std::pair<std::vector<double>, std::vector<double>>> by_op;
  std::vector<double> compute_before, compute_after;
  for (const Sample& s : all) {
    const Seconds pb = PredictedInstructionTime(before[size_t(s.run)], s.pp_rank, s.instr),
                  pa = PredictedInstructionTime(after[size_t(s.run)], s.pp_rank, s.instr);
    if (pb < 0) continue;
    const double eb = RelativeError(pb, s.measured_s), ea = RelativeError(pa, s.measured_s);
    by_op[s.instr.op].first.push_back(eb);
    by_op[s.instr.op].second.push_back(ea);
    if (IsFittedCompute(s.instr.op)) compute_before.push_back(eb), compute_after.push_back(ea);
  }
  for (const auto& [op, e] : by_op) {
    res->by_op.push_back({op, int64_t(e.first.size()), Median(e.first), Median(e.second)});
  }
  res->median_error_before = Median(compute_before);
  res->median_error_after = Median(compute_after);
  res->compute_instructions = int64_t(compute_before.size());
}

void ListFigures(const FitContext& f, const CalibrationParams& x, const HardwareProfile& p,
                 CalibrationResult* res) {
  const HardwareProfile& s = f.start;
  const int64_t n = res->compute_instructions;
  res->figures.push_back({"gemm (forward throughput, multiple)", 1, x.gemm_forward, "x", n});
  res->figures.push_back({"backward GEMM throughput (multiple)", 1, x.gemm_backward, "x", n});
  if (x.gemm_size != 1.0) {
    res->figures.push_back(
        {"GEMM throughput per doubling of its FLOPs (multiple)", 1, x.gemm_size, "x", n});
  }
  res->figures.push_back(
      {"memory_bound_GBps", s.memory_bound_GBps.value, p.memory_bound_GBps.value, "GB/s", n});
  if (s.optimizer_Gparams_per_s.value > 0) {
    res->figures.push_back({"optimizer_Gparams_per_s", s.optimizer_Gparams_per_s.value,
                            p.optimizer_Gparams_per_s.value, "G params/s", n});
  }
  if (x.kernel_launch != 1.0) {
    res->figures.push_back(
        {"kernel_launch_us", s.kernel_launch_us.value, p.kernel_launch_us.value, "us", n});
  }
  const char* names[2] = {"intra_node", "inter_node"};
  const LinkProfile* before[2] = {&s.intra_node, &s.inter_node};
  const LinkProfile* after[2] = {&p.intra_node, &p.inter_node};
  for (int c = 0; c < 2; ++c) {
    const std::string l = names[c];
    if (x.p2p[c] != 1.0) {
      res->figures.push_back({l + ".send_recv_GBps", before[c]->send_recv_GBps.value,
                              after[c]->send_recv_GBps.value, "GB/s", int64_t(f.recvs[c].size())});
    }
    if (x.collective[c] != 1.0) {
      res->figures.push_back({l + ".all_reduce_busbw_GBps (and all-gather, reduce-scatter)",
                              before[c]->all_reduce_busbw_GBps.value,
                              after[c]->all_reduce_busbw_GBps.value, "GB/s",
                              int64_t(f.reduces[c].size())});
    }
    if (x.latency[c] != 1.0) {
      res->figures.push_back({l + ".latency_us", before[c]->latency_us.value,
                              after[c]->latency_us.value, "us",
                              int64_t(f.recvs[c].size() + f.reduces[c].size())});
    }
  }
}

}  // namespace

Result<CalibrationResult> Calibrate(const std::vector<CalibrationRun>& runs,
                                    const HardwareProfile& start, const std::string& source,
                                    double quantile) {
  if (!(quantile > 0 && quantile <= 1)) {
    return Status::Invalid("quantile: must be in (0, 1], got " + std::to_string(quantile));
  }
  if (runs.empty()) return Status::Invalid("no measured run to calibrate on");
  FitContext f;
  f.start = start;
  std::vector<Sample> all;
  for (size_t i = 0; i < runs.size(); ++i) {
    const CalibrationRun& run = runs[i];
    RunContext rc{run.model, run.cluster, run.layout, StageParameterCounts(*run.model, run.layout)};
    rc.cluster.profile = start;
    const CostTable start_table =
        BuildCostTable(*rc.model, rc.cluster, rc.layout, &rc.param_counts);
    const std::vector<int> reduce_class = ReduceGradsLinkClass(rc.cluster, rc.layout, *rc.model);
    f.runs.push_back(std::move(rc));
    Status s =
        Gather(int(i), *run.program, *run.measured, start_table, reduce_class, quantile, &f, &all);
    if (!s.ok()) {
      return runs.size() == 1 ? s : s.WithPrefix("run " + std::to_string(i + 1));
    }
  }
  CalibrationParams x;
  // Links first: their predictions do not depend on the compute figures, while a forward's
  // tensor-parallel all-reduces depend on theirs.
  FitLinks(f, quantile, &x);
  // Not the launch cost (index 3): see calibrate.h. The GEMM size dependence (index 4) only from
  // runs whose GEMMs differ in size by 1.5x or more (microbatch tokens times hidden over t): within
  // one run every layer has the same GEMMs, and the fit trades that dependence against the scale.
  std::vector<int> active = {0, 1, 2};
  int64_t fewest = INT64_MAX, most = 0;
  for (const CalibrationRun& run : runs) {
    const int64_t size = int64_t(run.layout.mbs) * run.model->seq_len * run.model->hidden /
                         std::max(run.layout.tp, 1);
    fewest = std::min(fewest, size), most = std::max(most, size);
  }
  if (double(most) >= 1.5 * double(fewest)) active.push_back(4);
  // The optimizer step's own rate where the profile prices the step by it (calibrate.h).
  if (start.optimizer_Gparams_per_s.value > 0) active.push_back(kOptimizerParam);
  CalibrationResult res;
  res.iterations = FitCompute(f, active, &x);
  // A change under 0.1% is below what a trace resolves (nanosecond marks on transfers of a few
  // microseconds): it leaves the figure and its source alone.
  for (double* m :
       {&x.gemm_forward, &x.gemm_backward, &x.gemm_size, &x.memory_bound, &x.optimizer, &x.p2p[0],
        &x.p2p[1], &x.collective[0], &x.collective[1], &x.latency[0], &x.latency[1]}) {
    if (std::fabs(std::log(*m)) < 1e-3) *m = 1.0;
  }
  res.params = x;
  res.profile = ApplyCalibration(f.start, x, source);
  const std::vector<CostTable> fitted = f.TablesFor(x);
  ReportErrors(all, f.TablesFor(CalibrationParams{}), fitted, &res);
  double ss = 0;
  for (const ComputeClass& c : f.classes) {
    const double r = std::log(PredictedInstructionTime(fitted[size_t(c.run)], c.pp_rank, c.instr)) -
                     std::log(c.typical_s);
    ss += r * r;
  }
  res.rms_log_residual = std::sqrt(ss / double(f.classes.size()));
  ListFigures(f, x, res.profile, &res);
  return res;
}

Result<CalibrationResult> Calibrate(const ModelSpec& model, const ClusterSpec& cluster,
                                    const ParallelConfig& layout, const Program& program,
                                    const Timeline& measured, const std::string& source,
                                    double quantile) {
  return Calibrate({CalibrationRun{&model, cluster, layout, &program, &measured}}, cluster.profile,
                   source, quantile);
}

}  // namespace ptdp::costmodel
