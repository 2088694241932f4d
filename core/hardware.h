// HardwareProfile and ClusterSpec: what the cost model knows about a machine, read from strict JSON
// (docs/profiles.md). Every number in a profile carries its unit in the key and a "source" string
// saying where it comes from (a published figure, a derivation from one, or a measured
// `ptdp profile` run); a profile without a source for a number is rejected.
// Ranges (finite numbers only): TFLOP/s figures (peak, attention, GEMM table entries) (0, 1e5];
// bandwidths in GB/s (0, 1e5]; memory and workspace in GiB (0, 1e5] / [0, 1e5]; latencies and
// kernel launch in us [0, 1e6]; gpus_per_node an integer in (0, 1024]; SM count and tile sizes
// (0, 1e5]; gemm_backward_efficiency (0, 100]; cross-entropy and GeLU rates (0, 1e5]; the GeLU
// epilogues' (0, 1e7] and the bias gradient's (0, 1e5] 1e9 elements/s; GEMM grid
// sizes (0, 1e9]; busbw curve sizes (0, 1e15] bytes, their busbw (0, 1e5] GB/s, ranks [0, 2^20].
// What the training software does (overlaps, fusions, gradient accumulation) is a software
// profile's (core/software.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/attention_table.h"
#include "core/gemm_points.h"
#include "core/json.h"
#include "core/precision.h"
#include "core/software.h"
#include "core/sourced.h"
#include "core/status.h"
#include "core/units.h"

namespace ptdp {

// Achieved GEMM throughput on a grid of (m, n, k), C[m,n] = A[m,k] B[k,n]; `tflops` is m-major:
// index (im * n.size() + in) * k.size() + ik. Axes are strictly increasing and positive.
struct GemmTable {
  std::string dtype;  // "fp16", "bf16" or "fp32": the dtype the table was measured in
  std::string source;
  std::vector<double> m, n, k;
  std::vector<double> tflops;
  double At(size_t im, size_t in, size_t ik) const {
    return tflops[(im * n.size() + in) * k.size() + ik];
  }
  bool empty() const { return tflops.empty(); }
};

// Bus bandwidth against message size for one collective on one link class, as nccl-tests prints
// it (`size` in bytes, `busbw` in GB/s), optionally for one group size: replaces the link's
// constant for that collective (costmodel/collectives.h interpolates it in log(bytes)). Sizes
// strictly increasing in (0, 1e15]; busbw in (0, 1e5]; at least one point. JSON: an entry of the
// link's optional "busbw_curves" list, {"collective", "ranks" (optional), "source", "bytes",
// "busbw_GBps"}; the source names the published table (document, section) or the `ptdp profile` run
// the points come from.
struct BusbwCurve {
  std::string collective;  // "all_reduce", "all_gather", "reduce_scatter" or "send_recv"
  int ranks = 0;           // the group size it was measured with; 0: any size
  std::string source;
  std::vector<double> bytes;
  std::vector<double> busbw_GBps;
};

// A link class (intra-node or inter-node) with alpha-beta costs per collective. Bus bandwidths
// are as nccl-tests reports them (busbw = algbw x factor, factors in costmodel/collectives.h).
// Intra-node figures are per GPU; inter-node figures are per node, for a group that has every GPU
// of the node in it (a group with fewer members per node gets its share: see costmodel).
struct LinkProfile {
  std::string name;    // "NVSwitch (NVLink3)", "8x HDR InfiniBand"
  Sourced latency_us;  // time of one small collective or message on the link
  Sourced all_reduce_busbw_GBps;
  Sourced all_gather_busbw_GBps;
  Sourced reduce_scatter_busbw_GBps;
  Sourced send_recv_GBps;  // one point-to-point stream, per GPU
  // Optional (empty when absent): busbw against size; a collective with a curve ignores its
  // constant above and its latency (a measured curve's time already holds it).
  std::vector<BusbwCurve> busbw_curves = {};
  // Optional, inter_node only: how NCCL runs a collective whose group spans nodes (costmodel/
  // collectives.h): "ring" (absent: a flat ring over all ranks, NCCL's choice for large messages
  // in the paper's 2021 software) or "hierarchical" (intra-node, then inter-node, then intra-node
  // phases, pipelined). JSON: "algorithm": {"value": "ring" | "hierarchical", "source": "..."}.
  std::string algorithm = {};
  std::string algorithm_source = {};
};
inline constexpr const char* kHierarchical = "hierarchical";

struct HardwareProfile {
  std::string name;
  std::string about;
  // The precision a layout on this machine trains in unless told otherwise (`ptdp plan
  // --precision`): the layout's ParallelConfig::precision is what the cost model prices. The GEMM
  // table is measured in a dtype of the same width. JSON: {"value": "fp16", "source": "..."}.
  Precision precision = Precision::kBf16;
  std::string precision_source;
  Sourced gpus_per_node;      // devices (or processes) per node
  Sourced peak_tflops;        // dense peak in the training dtype, per device
  Sourced memory_GiB;         // device memory capacity
  Sourced hbm_GBps;           // datasheet memory bandwidth
  Sourced memory_bound_GBps;  // achievable bandwidth of elementwise kernels
  Sourced workspace_GiB;      // per device: library workspaces, communicator buffers, fragments
  Sourced kernel_launch_us;   // fixed cost per kernel (launch + tail), charged per GEMM/op
  GemmTable gemm;             // in the training dtype
  // Optional (empty when absent): a Linear's two backward GEMMs as the layers run them, keyed by
  // the forward's (m, n, k) = (tokens, output features, input features) and counted as 2 m n k
  // FLOPs each: the input gradient dx[m][k] = dy[m][n] W[n][k] (gemm_backward_data) and the weight
  // gradient dW[n][k] += dy^T x, accumulated into fp32 main gradients (gemm_backward_weight).
  // Absent: the forward table at the transposed shapes prices them (costmodel/gemm.h).
  GemmTable gemm_backward_data;
  GemmTable gemm_backward_weight;
  // Optional (empty when absent; needs both backward tables, measured by the same kernels): the
  // three GEMMs at exact shapes (core/gemm_points.h), which price a Linear GEMM at such a shape
  // in place of the tables (costmodel/gemm.h); `ptdp profile --gemm-shapes-of` measures them.
  GemmPoints gemm_points;
  // Optional (0 when absent): achieved TFLOP/s of a fused (FlashAttention-class) causal attention
  // kernel per device, counted as FlashAttention's benchmarks count a causal kernel (half the
  // s^2 FLOPs of the full score matrix), used for layouts with fused_attention. Absent: the cost
  // model prices the fused kernel at the GEMM table's throughput for the unfused batched GEMMs of
  // the same shapes (costmodel/layer_cost.h FusedAttentionCost).
  Sourced attention_tflops;
  // Optional (0 when absent; needs attention_tflops): the same kernel and count with attention
  // dropout (p = 0.1 as `ptdp profile` times it), which draws a random number per score element
  // inside the kernel and runs measurably slower. Models with dropout > 0 are priced at this rate
  // where the profile has it (costmodel/layer_cost.h FusedAttentionTflops), else at
  // attention_tflops.
  Sourced attention_dropout_tflops;
  // Optional (empty when absent): the same kernel's rates on a grid of sequence length and head
  // dimension (core/attention_table.h), which FusedAttentionTflops prefers to the two figures above
  // (costmodel/layer_cost.h); `ptdp profile --attention-grid` measures it.
  AttentionTable attention_table;
  // Optional (0 when absent): logits per second, in billions, through the backend's
  // vocabulary-parallel cross-entropy, forward (row max, sum of exponentials, loss) and backward
  // (exponential again, scaled by the loss gradient) together; each direction is charged half.
  // On a CPU these passes are bound by the exponential, not by their bytes, so the memory-bound
  // figure (a GeLU kernel) prices them wrongly. Absent: the cross-entropy's bytes at
  // memory_bound_GBps (costmodel/layer_cost.h HeadCost).
  Sourced cross_entropy_Glogits_per_s;
  // Optional, both or neither (0 when absent): elements per second, in billions, through the
  // backend's GeLU forward (y = GeLU(x)) and backward (dx = dy GeLU'(x)), as `ptdp profile
  // --backend cpu` times the reference kernels. On a CPU the tanh bounds them, not their bytes
  // (0.086 forward, 0.066 backward G elements/s; 0.7 GB/s of the forward's bytes against 16 to 24
  // GB/s streamed), so a layer's GeLU pass costs its T f/t elements at these rates in place of its
  // bytes at memory_bound_GBps (costmodel/layer_cost.h GeluPassTime; SwiGLU keeps its bytes).
  // Absent (every shipped profile; a cuda profile, whose GeLU kernel is byte-bound): the bytes.
  Sourced gelu_forward_Gelems_per_s;
  Sourced gelu_backward_Gelems_per_s;
  // Optional (0 when absent): parameters per second, in billions, through the backend's whole
  // optimizer step as its runtime runs it per parameter (on the cpu: CpuOps' gradient sum of
  // squares for the global norm, then AdamW over weight, gradient, m and v), as `ptdp profile
  // --backend cpu` times it over parameters that leave the cache. On a CPU AdamW's square root and
  // division bound it, not its bytes (0.13 G parameters/s, about 4 GB/s of its 32 bytes per
  // parameter against 16 to 24 GB/s streamed), so the step costs its parameters at this rate in
  // place of OptimizerBytesPerParam at memory_bound_GBps (costmodel/estimate.cc
  // OptimizerStepTime). Absent (every shipped profile; a cuda profile, whose step is byte-bound):
  // the bytes.
  Sourced optimizer_Gparams_per_s;
  // Optional, the first two both or neither (0 when absent): what the Linears' fused elementwise
  // work adds to their GEMMs, as `ptdp profile --backend cuda` times the runtime's ops at a fc1 and
  // fc2 shape: 1e9 output elements per second of the time LinearForward with the GeLU epilogue
  // (cuBLASLt GELU_AUX_BIAS: the pre-activation and its GeLU written) takes beyond the same
  // LinearForward with its bias alone (gelu_epilogue), and of the time LinearBackwardDataGelu (the
  // DGELU epilogue) takes beyond LinearBackwardData (dgelu_epilogue), per element of the GeLU's
  // input; and 1e9 output-gradient elements per second summed by the Linear's bias gradient
  // (runtime/cuda/bias_grad.cu; bias_grad). Where a software profile runs the GeLU in the GEMMs'
  // epilogues (SoftwareProfile::gelu_gemm_epilogue) a GeLU layer's activation pass costs its
  // T f/t elements at the epilogue rates in place of the bias-GeLU bytes, and with bias_grad every
  // Linear's bias gradient costs its elements at that rate in place of its bytes at
  // memory_bound_GBps (costmodel/layer_cost.h). Absent (every shipped profile): the bytes.
  // Range (0, kMaxEpilogueGelemsPerSecond] for the epilogues (an added time per element can be
  // tiny), (0, 1e5] for the bias gradient.
  Sourced gelu_epilogue_Gelems_per_s;
  Sourced dgelu_epilogue_Gelems_per_s;
  Sourced bias_grad_Gelems_per_s;
  // Optional: dense FP8 peak per device (tensor cores, E4M3/E5M2 inputs, fp32 accumulation), what
  // fp8 training's Linear GEMMs run at: the `gemm` table's time scaled by peak_tflops /
  // fp8_peak_tflops, or by 1 / fp8_gemm_speedup where the profile has it (costmodel/layer_cost.h).
  // Absent: the profile refuses fp8 (CheckPrecision).
  Sourced fp8_peak_tflops;
  // Optional (0 when absent): how many times faster an FP8 Linear GEMM runs than the bf16 `gemm`
  // table says at the same shape, from a measurement of both (a published best-shape benchmark of
  // each, or a ptdp run); it replaces the assumption peak_tflops / fp8_peak_tflops (the same
  // fraction of peak in both precisions). Range (0, 10].
  Sourced fp8_gemm_speedup;
  // Optional (absent: 1): throughput of the backward GEMMs that the forward table prices (every
  // backward GEMM of a profile without gemm_backward_* tables; attention's batched products always)
  // as a multiple of that table's throughput at the transposed shapes. `ptdp calibrate` fits it
  // when measured backwards run faster or slower than the forward table says. Range (0, 100].
  Sourced gemm_backward_efficiency;
  // Optional (absent: 1, the whole device): the fraction of the device one rank gets when several
  // share it, as MPS clients limited to a share of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) or
  // MIG slices; every figure above stays the whole device's. A rank's kernel then runs as the
  // whole device would run 1 / share copies of it side by side (DeviceCopies): a GEMM at the
  // table's rate for 1 / share times its rows (its output tiles; the weight gradient's columns)
  // and 1 / share times as long, memory-bound work at share x memory_bound_GBps (the ranks stream
  // at once), every other rate at share x its value, and %peak and MFU of share x peak_tflops.
  // So small GEMMs saturate a share sooner than the whole device, which is what a microbatch
  // change on such ranks gains or not (bench/gpu/adapt_stage.sh). Range (0, 1].
  Sourced device_share;
  // 1 / device_share: how many copies of a rank's kernel the whole device runs in its time.
  double DeviceCopies() const {
    return device_share.value > 0 && device_share.value < 1 ? 1.0 / device_share.value : 1.0;
  }
  // Wave quantisation (optional, for derived tables only: a measured table already contains it).
  // A GEMM runs ceil(m/tile_m) ceil(n/tile_n) output tiles on sm_count multiprocessors in whole
  // waves; the last partial wave costs a full one. All zero: off.
  Sourced sm_count;
  Sourced gemm_tile_m;
  Sourced gemm_tile_n;
  LinkProfile intra_node;
  LinkProfile inter_node;
  // Optional (null when absent): what `ptdp calibrate` fitted and on which run, kept as JSON: an
  // object with at least the strings "tool", "date", "plan" and "trace" (docs/profiles.md).
  Json calibration;
};

// The largest GeLU-epilogue rate a profile may state, 1e9 elements/s: an epilogue that adds under
// 0.1 fs per element is noise, not a rate (`ptdp profile` then writes none).
inline constexpr double kMaxEpilogueGelemsPerSecond = 1e7;

// The upper bounds above that the profile's tables (core/gemm_points.cc, core/attention_table.cc)
// share with core/hardware.cc: a TFLOP/s figure and a GEMM grid size.
inline constexpr double kMaxProfileTflops = 1e5;
inline constexpr double kMaxProfileGemmDim = 1e9;

// A profile and how many nodes of it.
// OK when `profile` can price `precision`; fp8 needs fp8_peak_tflops. The error names both.
Status CheckPrecision(const HardwareProfile& profile, Precision precision);

struct ClusterSpec {
  std::string name;  // the preset or file it came from
  HardwareProfile profile;
  // The training stack the cluster runs (`ptdp plan --software`): what it overlaps and fuses.
  // Default-constructed: no stack facts (nothing overlapped, accumulation free), what unit tests
  // of the cost model's pieces get; every command sets a named profile.
  SoftwareProfile software;
  int gpus_per_node = 1;
  int nodes = 1;
  int Gpus() const { return gpus_per_node * nodes; }
};

// Strict readers: unknown keys, wrong types, a missing "source" or a non-positive value are errors
// naming the key path. `path` prefixes the key paths.
Result<HardwareProfile> HardwareProfileFromJson(const Json& j, const std::string& path);
OrderedJson HardwareProfileToJson(const HardwareProfile& p);
// Checks the GEMM grid: axes increasing and positive, tflops of size |m| |n| |k|, all positive.
Status ValidateGemmTable(const GemmTable& g, const std::string& path);

}  // namespace ptdp
