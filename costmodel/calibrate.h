// Calibration: fit a hardware profile's effective figures to a measured run of one plan
// (`ptdp calibrate`, docs/compare.md). The prediction of each measured instruction is the cost
// model's own (BuildCostTable on the profile being fitted), so the fitted profile is priced by
// the same functions that `ptdp plan` and `ptdp simulate` use.
//
// What is fitted, each as a multiple of the starting profile's figure (1 = unchanged):
//   gemm_forward     the forward GEMM table's throughput (every entry scaled)
//   gemm_backward    the backward GEMMs' throughput (the gemm_backward_* tables when the profile
//                    has them, else gemm_backward_efficiency over the forward table)
//                    (a profile's gemm_points move with their kind's table: forward_tflops by
//                    gemm_forward, the backward rates by gemm_backward, each by gemm_size about
//                    the mean of its own table, costmodel/calibrate.cc ScalePoints)
//   gemm_size        the GEMM efficiency by size: each table entry's throughput times this per
//                    doubling of its FLOPs (a machine whose large GEMMs lose more than the table
//                    says: caches, clocks); told apart from the scale by the GEMMs of other sizes
//                    within a run (the logits against the layers) and across runs (microbatches)
//   memory_bound     memory_bound_GBps (elementwise ops, and the optimizer step when the profile
//                    has no optimizer_Gparams_per_s)
//   optimizer        optimizer_Gparams_per_s, only when the profile has it (a cpu profile: the
//                    step priced by its parameters, costmodel/estimate.cc OptimizerStepTime).
//                    Unlike the GeLU's rates (below) it is identified: the optimizer-step
//                    instructions are classes of their own (one per pipeline rank) whose time,
//                    the data-parallel copies and small all-reduces aside, only this multiple
//                    prices, and it prices nothing else: it cannot trade against the GEMMs or
//                    memory_bound. Kept as measured, the step's share of a run's
//                    slowdown (load, the trace's cache state) would stay in its residual instead;
//                    fitted, it is the run's own step rate and nothing else moves with it.
// Kept as measured, with no multiple of their own: attention_tflops and attention_dropout_tflops
// (so models with and without dropout keep their ratio), cross_entropy_Glogits_per_s and
// the GeLU's rates (gelu_forward/backward_Gelems_per_s). The GeLU's are the rates of a kernel its
// tanh bounds, not a bandwidth: scaled with memory_bound they would tie the GeLU back to the bytes
// the profile now keeps apart; fitted on their own they
// could not be told from the GEMM multiples, since within one layout every layer class holds its
// GEMMs and its GeLU elements in one ratio (the launch cost's trade, below). The cost of keeping
// them: a slowdown the GeLU shares with the GEMMs (load) is taken by the GEMM multiples alone.
// An op table (`ptdp calibrate --op-times`, costmodel/calibrate_ops.h) times each op alone and
// fits the attention and epilogue rates, and GEMM multiples this fit then starts from.
// from the forward, backward and optimizer-step instructions (the compute stream, where a rank
// never waits for another), by Levenberg-Marquardt least squares on log time: one residual per
// instruction class (pipeline rank, op, chunk, recompute), the log of a quantile of the class's
// measured durations (`quantile`: the median on a machine of its own; a lower one on a shared
// machine, where preemption only ever adds time), weighted by the square root
// of its count, plus a weak pull of each multiplier towards 1 (a figure the run does not pin down
// stays where it was). kernel_launch_us is kept: within one layout every class mixes kernels and
// FLOPs in nearly the same ratio, so a launch cost trades against GEMM throughput at the same
// residual (on CPU runs of `tiny` a free launch cost went from 1 to 12 us with GEMMs 10 to 45x
// faster). Then per link class (intra-, inter-node):
//   p2p              send_recv_GBps, from the receives
//   collective       the all-reduce, all-gather and reduce-scatter bus bandwidths, from
//   reduce-grads
// A measured reduce-grads includes the time its rank stood blocked waiting for the other ranks, so
// the collectives are fitted to the fastest instance of the class (the one that waited least); a
// measured receive is its transfer, its wait for the sender kept apart (TimelineEvent::wait_ns), so
// send_recv is fitted to the receives' `quantile`, as the compute classes are: the scale at
// which that instance takes exactly its predicted time. With one message size per class latency
// and bandwidth cannot be told apart: latency_us is kept unless the fitted instance is shorter than
// the latency alone, when the latency is halved until it is not (several runs with messages of
// other sizes fit it: the overload over runs below). Sends (a measured send carries its
// receive's transfer) are not fitted again.
#pragma once

#include <string>
#include <vector>

#include "core/hardware.h"
#include "core/model.h"
#include "core/parallel.h"
#include "core/program.h"
#include "core/status.h"
#include "core/timeline.h"
#include "costmodel/cost_table.h"

namespace ptdp::costmodel {

// Multiples of the starting profile's figures.
struct CalibrationParams {
  double gemm_forward = 1;
  double gemm_backward = 1;
  // The GEMM tables' shape dependence: every entry's throughput times this per doubling of its
  // FLOPs (2 m n k) against the table's geometric mean, so 1 keeps the table's own shape.
  double gemm_size = 1;
  double memory_bound = 1;
  double optimizer = 1;           // optimizer_Gparams_per_s, fitted only when the profile has it
  double kernel_launch = 1;       // applied, never fitted (above)
  double p2p[2] = {1, 1};         // [0] intra-node, [1] inter-node
  double collective[2] = {1, 1};  // [0] intra-node, [1] inter-node
  double latency[2] = {1, 1};     // latency_us, lowered only (see above)
};

// The starting profile with `x` applied; `source` is appended to the source of every figure it
// changes (a multiplier of exactly 1 leaves the figure and its source alone).
HardwareProfile ApplyCalibration(const HardwareProfile& start, const CalibrationParams& x,
                                 const std::string& source);

// The predicted duration of a Program instruction under a CostTable, as the simulator times it for
// the compute stream and reduce-grads, and as one transfer alone on its link for a receive
// (-1 for a send, which is not predicted here).
Seconds PredictedInstructionTime(const CostTable& t, int pp_rank, const Instr& in);

// One fitted quantity, for the report and the profile's calibration block.
struct FittedFigure {
  std::string name;  // the profile key path: "memory_bound_GBps", "intra_node.send_recv_GBps"
  double before = 0, after = 0;
  std::string unit;
  int64_t instructions = 0;  // measured instructions it was fitted to
};

// Median |predicted - measured| / measured over one op kind's measured instructions.
struct OpKindError {
  Op op = Op::kForward;
  int64_t count = 0;
  double before = 0, after = 0;
};

struct CalibrationResult {
  CalibrationParams params;
  HardwareProfile profile;  // ApplyCalibration(start, params, source)
  std::vector<FittedFigure> figures;
  std::vector<OpKindError> by_op;  // forward, backward, optimizer step, receives, reduce-grads
  // Median |error| over the measured forward, backward and optimizer-step instructions.
  double median_error_before = 0, median_error_after = 0;
  double rms_log_residual = 0;  // of the compute fit, unweighted over classes
  int64_t compute_instructions = 0;
  int iterations = 0;  // Levenberg-Marquardt steps taken
};

// Checks that `measured` is a run of `program` (same pp, vp and microbatches; every event an
// instruction of the Program on its rank) and fits. `source` names the run in the fitted figures'
// sources; `quantile` (in (0, 1]) is the quantile of each class's measured durations the fit
// matches. REQUIRES: layout.Validate(model) ok, layout.WorldSize() == cluster.Gpus().
// One run: Calibrate({run}, cluster.profile, ...).
Result<CalibrationResult> Calibrate(const ModelSpec& model, const ClusterSpec& cluster,
                                    const ParallelConfig& layout, const Program& program,
                                    const Timeline& measured, const std::string& source,
                                    double quantile = 0.5);

// One measured run of a plan for the fit over several: what BuildCostTable needs and the trace.
// Pointers, not copies: they must outlive the call.
struct CalibrationRun {
  const ModelSpec* model = nullptr;
  ClusterSpec cluster;  // its profile is ignored: every run is priced with `start`
  ParallelConfig layout;
  const Program* program = nullptr;
  const Timeline* measured = nullptr;
};

// The fit over several runs on one machine (layouts, microbatch sizes, models): the compute
// classes of every run together, each link class's receives and reduce-grads pooled. Messages of
// sizes that differ by 1.5x or more (another microbatch size, another hidden size) tell a link's
// latency from its bandwidth, which one size cannot: latency_us is then fitted too. A run that
// does not match its Program is refused, naming it ("run 2: ..."). REQUIRES: each run as in
// Calibrate above.
Result<CalibrationResult> Calibrate(const std::vector<CalibrationRun>& runs,
                                    const HardwareProfile& start, const std::string& source,
                                    double quantile = 0.5);

}  // namespace ptdp::costmodel
