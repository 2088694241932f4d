// The `ptdp profile` sweep: GEMMs over an (m, n, k) grid, memory-bound bandwidth (a streaming add
// and the GeLU kernel), causal attention, a tiny-op launch cost, and, when several ranks take
// part, all-reduce / all-gather / reduce-scatter / send-recv by message size with nccl-tests-style
// algorithm and bus bandwidth (bus_bandwidth.h). The result converts into a HardwareProfile
// (core/hardware.h) in which every number's source reads
//   "ptdp profile run on <device> (<host>), <date>: <what was measured>".
//
// Collective protocol: every rank of `data_comm` calls RunProfile; all ranks measure compute at
// the same time (as training would run them) and rank 0's figures are reported; collective times
// are the maximum over ranks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/hardware.h"
#include "core/json.h"
#include "profiler/backend.h"
#include "profiler/bus_bandwidth.h"
#include "runtime/comm/communicator.h"

namespace ptdp::profiler {

// The attention dropout `ptdp profile` times attention with a second time: Megatron-LM's default
// --attention-dropout, which the GPT presets and the published GPT runs train with.
inline constexpr double kProfileAttentionDropout = 0.1;

struct ProfileOptions {
  bool quick = false;                          // a small grid that runs in seconds (CI)
  std::vector<double> gemm_m, gemm_n, gemm_k;  // empty: the backend's default grid
  Bytes max_message_bytes = 0;                 // 0: the default for the backend
  // The attention shape to time (b, s, heads, head dim); empty: the backend's default. Attention
  // at a short sequence is bound by per-head overhead, not FLOPs, so a rate measured at s = 512
  // does not carry to s = 32.
  std::vector<int64_t> attention;
  // --attention-grid: sequence lengths and head dimensions (each increasing; both empty: no
  // grid) at which attention is timed again, every s with every d, for the profile's
  // attention_table (profiler/attention_grid.h says how each point's batch and heads are chosen).
  std::vector<int64_t> attention_grid_s, attention_grid_d;
  // --gemm-shapes-of: Linear GEMM shapes (m, n, k) timed exactly, beside the grid, by the grid's
  // three kernels and timing, for the profile's gemm_points (profiler/gemm_shapes.h); empty: none.
  // gemm_shapes_of says whose shapes they are, for the points' source.
  std::vector<GemmShape> gemm_shapes;
  std::string gemm_shapes_of;
  std::string host;  // host name, for sources
  std::string date;  // "YYYY-MM-DD", for sources
};

struct GemmSample {
  int64_t m = 0, n = 0, k = 0;
  Seconds seconds = 0;
  double tflops = 0;
};

// One exact shape of --gemm-shapes-of: the forward, input-gradient and weight-gradient GEMMs,
// keyed by the forward's (m, n, k) as the backward grid tables are.
struct GemmPointSample {
  int64_t m = 0, n = 0, k = 0;
  Seconds forward = 0, backward_data = 0, backward_weight = 0;
};

struct CollectiveSample {
  Collective op = Collective::kAllReduce;
  int ranks = 0;
  Bytes size = 0;       // nccl-tests' S (bus_bandwidth.h)
  Seconds seconds = 0;  // max over ranks
  double algbw_GBps = 0;
  double busbw_GBps = 0;
};

// One point of --attention-grid: attention at (b, s, heads, d) forward + backward, without and
// with dropout, each rate at the causal count of attention_tflops.
struct AttentionGridSample {
  int64_t b = 0, s = 0, heads = 0, d = 0;
  Seconds forward = 0, backward = 0;
  double tflops = 0;  // 0: left out (why in `note`)
  Seconds dropout_forward = 0, dropout_backward = 0;
  double dropout_tflops = 0;  // 0: not measured (why in `dropout_note`)
  std::string note, dropout_note;
};

struct ProfileReport {
  std::string backend, device, host, date, gemm_dtype;
  Precision precision = Precision::kFp32;
  int ranks = 1;
  std::vector<double> gemm_m, gemm_n, gemm_k;
  std::vector<GemmSample> gemm;  // m-major over the grid, as GemmTable
  // The backward GEMMs on the same grid, keyed by the forward's (m, n, k); empty when the backend
  // does not measure them.
  std::vector<GemmSample> gemm_backward_data, gemm_backward_weight;
  // --gemm-shapes-of's shapes in the order asked for (empty: none asked for), and whose they are.
  std::vector<GemmPointSample> gemm_points;
  std::string gemm_points_of;
  Bytes stream_bytes = 0;
  double stream_add_GBps = 0;
  double gelu_GBps = 0;
  int64_t att_b = 0, att_s = 0, att_heads = 0, att_d = 0;
  Seconds att_seconds = 0;
  double att_tflops = 0;  // causal: half of 4 b s^2 heads d FLOPs
  // The backward (0: not measured) and forward + backward together: half of 14 b s^2 heads d
  // FLOPs (5 GEMMs backward, Dao 2023), the rate the cost model applies to both.
  Seconds att_backward_seconds = 0;
  double att_train_tflops = 0;
  std::string attention_kind;
  // The same attention with dropout att_dropout_p (kProfileAttentionDropout; 0: not measured),
  // forward, backward and their rate counted as att_train_tflops.
  double att_dropout_p = 0;
  Seconds att_dropout_seconds = 0, att_dropout_backward_seconds = 0;
  double att_dropout_train_tflops = 0;
  std::string attention_dropout_kind;
  // --attention-grid's points, s-major (empty: no grid asked for); each call holds about
  // att_grid_tokens tokens (b s) and att_grid_width (heads d), those of the shape above.
  std::vector<AttentionGridSample> att_grid;
  int64_t att_grid_tokens = 0, att_grid_width = 0;
  std::string att_grid_dropout_kind;  // the dropout kernel of every point's dropout rate
  // The cross-entropy over ce_rows x ce_vocab logits, forward and backward (0: not measured).
  int64_t ce_rows = 0, ce_vocab = 0;
  Seconds ce_seconds = 0;
  // The GeLU forward and backward over gelu_elements elements (0: not timed, the cuda backend).
  int64_t gelu_elements = 0;
  Seconds gelu_forward_seconds = 0, gelu_backward_seconds = 0;
  // The whole optimizer step over optimizer_params parameters (0: not timed, the cuda backend).
  int64_t optimizer_params = 0;
  Seconds optimizer_seconds = 0;
  // The GeLU epilogues and the bias gradient at the fc1 and fc2 shapes of the attention shape's
  // model: epi_tokens T = att_b att_s, epi_hidden h = att_heads att_d, epi_ffn f = 4h
  // (profiler/epilogues.h; all 0: not timed, the cpu backend).
  int64_t epi_tokens = 0, epi_hidden = 0, epi_ffn = 0;
  EpilogueTimes gelu_epilogue;    // fc1's LinearForward (T x h -> f), with and without the GeLU
  EpilogueTimes dgelu_epilogue;   // fc2's LinearBackwardData (T x h -> f), with and without GeLU'
  Seconds bias_grad_seconds = 0;  // fc1's bias gradient over T x f
  double launch_us = 0;
  double memory_bytes = 0;
  double workspace_bytes = 0;
  std::vector<CollectiveSample> collectives;  // empty with one rank
};

// `data_comm` moves the backend's buffers (MPI for cpu, NCCL for cuda); `host_comm` is a host
// communicator over the same ranks, used to agree on iteration counts and to take maxima. Both may
// be size 1.
Result<ProfileReport> RunProfile(ProfileBackend& backend, runtime::Communicator& data_comm,
                                 runtime::Communicator& host_comm, const ProfileOptions& opts);

// Where the link figures of a profile come from when the run cannot measure them.
struct LinkFallback {
  const HardwareProfile* from = nullptr;  // --links-from: copy its links with their sources
  std::string from_path;
};

// The profile file: peak_tflops is the best measured GEMM throughput unless `peak` is given (a
// datasheet figure with its source). Links: measured intra-node figures when ranks > 1, inter-node
// copied from `fallback` or, for a one-node run, from the intra-node figures with a source saying
// so; with one rank the links come from `fallback`, and without one the run fails
// (kInvalidArgument) on the cuda backend, while the cpu backend derives them from the measured
// memory bandwidth and says so in each source.
Result<HardwareProfile> ToHardwareProfile(const ProfileReport& r, const std::string& name,
                                          const std::optional<Sourced>& peak,
                                          const LinkFallback& fallback);

// Every measurement (the full collective sweep, attention), for --raw.
OrderedJson ReportToJson(const ProfileReport& r);
// nccl-tests-style text table of the measurements.
std::string ReportToText(const ProfileReport& r);

}  // namespace ptdp::profiler
