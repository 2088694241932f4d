// SoftwareProfile: what the training stack does, beside the hardware profile's machine
// (docs/profiles.md, "Software profiles"). Facts of the software, each a Sourced value: which
// communication it overlaps with compute and how much, how it accumulates gradients, and which of
// the later Megatron-LM options its runs use (the planner searches those by default). Read from
// strict JSON like hardware profiles; the shipped ones (profiles/software/*.json: megatron-lm-2021,
// megatron-core, ptdp) are embedded at build time.
//
// JSON: {"name", "about",
//   "tp_comm_overlap_fraction": {value in [0, 1], source},
//   "overlap_compute_slowdown": {value in [0, 1], source},
//   "overlap_grad_reduce": {value: bool, source}, "overlap_param_gather": {value: bool, source},
//   "grad_bucket_params": {value in [1, 1e12], source},
//   "grad_bucket_params_per_dp_rank": {value in [0, 1e12], source},
//   "grad_accumulate_bytes_per_param": {value in [0, 64], source},
//   "ddp_grad_copy_bytes_per_param": {value in [0, 64], source},
//   "host_sync_gaps_per_pass": {value in [0, 100], source},
//   "optimizer_small_allreduces": {value in [0, 100], source},
//   "loss_dp_allreduces_per_microbatch": {value in [0, 100], source},
//   optional "gelu_gemm_epilogue": {value: bool, source} (absent: false),
//   optional "te_layer": {value: bool, source} (absent: false),
//   optional "context_parallel_collectives": {value: bool, source} (absent: false),
//   optional "grad_buffer_passes", "grad_scale_passes": {value in [0, 100], source} (absent: 0),
//   optional "fused_cross_entropy", "fused_optimizer_step", "optimizer_main_grads_in_place":
//     {value: bool, source} (absent: false),
//   optional "torch_ddp": {"about", "overlap_grad_reduce", "grad_bucket_params",
//     "grad_bucket_params_per_dp_rank", "ddp_grad_copy_bytes_per_param",
//     "overlap_compute_slowdown"} (the same forms and ranges as above),
//   "search": {"sequence_parallel", "selective_recompute", "distributed_optimizer",
//              "fused_attention", "grad_accumulation_fusion": {value: bool, source} each;
//              optional "context_parallel"}}
// Every key but the optional ones is required: a stack states each fact, even "not done".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/sourced.h"
#include "core/status.h"

namespace ptdp {

// A yes/no fact with its provenance.
struct SourcedFlag {
  bool value = false;
  std::string source;
};

// The later Megatron-LM options a stack's runs use: `ptdp plan` searches each one that is on
// (core/parallel.h has what each does).
struct SoftwareSearchDefaults {
  SourcedFlag sequence_parallel;
  SourcedFlag selective_recompute;
  SourcedFlag distributed_optimizer;
  SourcedFlag fused_attention;
  SourcedFlag grad_accumulation_fusion;
  SourcedFlag context_parallel;  // optional ("context_parallel"); false when absent
};

// Another data-parallel wrapper some of a stack's runs use instead of its default (the paper's
// rows up to 18B ran torch DDP, examples/sc21/run_table_1.sh), as the facts it replaces.
struct DdpVariant {
  std::string about;
  SourcedFlag overlap_grad_reduce;
  Sourced grad_bucket_params;
  Sourced grad_bucket_params_per_dp_rank;
  Sourced ddp_grad_copy_bytes_per_param;
  Sourced overlap_compute_slowdown;
};

struct SoftwareProfile {
  std::string name;  // "megatron-core"; empty for the default-constructed "no facts" profile
  std::string about;
  // Share of a transformer layer's tensor-parallel collectives hidden behind the layer's GEMMs
  // (Megatron-Core --tp-comm-overlap: Transformer Engine's userbuffers pipeline each all-gather
  // and reduce-scatter with the GEMM beside it). Applies with sequence parallelism only, as
  // Megatron-LM allows the overlap only then; never hides more than the layer's GEMM time.
  Sourced tp_comm_overlap_fraction;
  // Overlap is not free: a collective's kernels running beside compute take SMs and memory
  // bandwidth, so compute that would take C alone takes (1 + s) C while one runs. Charged on every
  // second of communication this stack hides (tensor- and data-parallel): H hidden seconds cost
  // H s / (1 + s) (costmodel::OverlapStretch).
  Sourced overlap_compute_slowdown;
  // The data-parallel gradient reduction (all-reduce, or the distributed optimizer's
  // reduce-scatter) runs bucket by bucket during the last backward (--overlap-grad-reduce).
  SourcedFlag overlap_grad_reduce;
  // The distributed optimizer's all-gather of updated weights runs bucket by bucket during the
  // next iteration's first forward (--overlap-param-gather).
  SourcedFlag overlap_param_gather;
  // Parameters per bucket: max(grad_bucket_params, grad_bucket_params_per_dp_rank x d).
  Sourced grad_bucket_params;
  Sourced grad_bucket_params_per_dp_rank;
  // Bytes moved per parameter element per microbatch after the first when the weight gradients
  // are added to the accumulated ones by a separate elementwise kernel (layouts without
  // grad_accumulation_fusion); 0: nothing charged.
  Sourced grad_accumulate_bytes_per_param;
  // Bytes moved per parameter element per iteration by the data-parallel wrapper's own gradient
  // copies around the reduction (2021 local DDP: flatten, divide by d, copy back) for layouts
  // without grad_accumulation_fusion (whose contiguous main-gradient buffer needs no copies);
  // 0: nothing charged. One launch per parameter tensor.
  Sourced ddp_grad_copy_bytes_per_param;
  // Host synchronisations that leave the GPU idle before each forward and each backward pass of a
  // chunk (2021 timers' torch.cuda.synchronize()); each gap is charged at the hardware profile's
  // kernel_launch_us (the first kernel after a sync is not queued behind others).
  Sourced host_sync_gaps_per_pass;
  // Small (one float) all-reduces over the model-parallel group (tensor x pipeline ranks) per
  // optimizer step, each read back by the host (.item()): the inf check and the gradient norm.
  // Each costs the collective's time plus one host-sync gap.
  Sourced optimizer_small_allreduces;
  // One-float all-reduces over the data-parallel group in each microbatch's loss (2021
  // pretrain_gpt.py averages the loss for logging): on the last stage's forward, blocking.
  Sourced loss_dp_allreduces_per_microbatch;
  // Optional (absent: false, not written): the stack runs a GeLU MLP's bias-GeLU in fc1's GEMM
  // epilogue and its backward in fc2's input-gradient GEMM epilogue (ptdp's CUDA runtime:
  // cuBLASLt GELU_AUX_BIAS and DGELU), so that no separate GeLU pass runs. Priced only where the
  // hardware profile measured those epilogues (HardwareProfile::gelu_epilogue_Gelems_per_s).
  SourcedFlag gelu_gemm_epilogue;
  // Optional (absent: false, not written): the stack runs the transformer layer on Transformer
  // Engine (Megatron-Core's TE layer spec): QKV bias in the GEMM epilogues, one-pass LayerNorm
  // backward, autograd's residual-gradient adds, and fused attention's bshd copies
  // (costmodel::LayerMemoryBytesOf).
  SourcedFlag te_layer;
  // Optional (absent: false, not written): the stack's context-parallel attention runs on
  // collectives, not Transformer Engine's point-to-point ring (ptdp's runtime:
  // runtime/model/context_attention.h): forward, an all-gather of every rank's keys and values;
  // backward, per source rank a broadcast of its keys and values and a reduce of their gradient;
  // nothing hidden behind the attention blocks and no partial results to merge
  // (costmodel::AddContextCollectives).
  SourcedFlag context_parallel_collectives;
  // Optional (absent: 0, not written): element passes the data-parallel wrapper makes over the
  // rank's whole gradient buffer once per iteration (Megatron-Core: the zero_ before the first
  // microbatch and the NaN check's norm), and the passes of its scaling by 1/d before the
  // reduction, made only where d > 1 (read and write: 2). Each moves the gradient's bytes
  // (core/ledger.h) per parameter, charged with the optimizer step.
  Sourced grad_buffer_passes;
  Sourced grad_scale_passes;
  // Optional (absent: false, not written): the stack's cross-entropy reads the logits once forward
  // (row max, sum of exponentials and target logit in one pass) and once backward (writing their
  // gradient), in the type the logits GEMM wrote them, fp32 (ptdp's runtime: runtime/model/
  // gpt_layers.cc HeadForward): none of Megatron-LM's logits.float() copy and in-place fp32
  // passes (costmodel::HeadCost).
  SourcedFlag fused_cross_entropy;
  // Optional (absent: false, not written): the stack's optimizer step reads the fp32 main
  // gradients directly for the norm and in AdamW, scales them (clipping) inside AdamW, and writes
  // the 16-bit weight copy in AdamW's pass (ptdp's runtime: kernels/cuda/optimizer.cu): none of
  // Megatron-LM's gradient copy, unscale pass and separate cast (costmodel OptimizerBytesPerParam).
  SourcedFlag fused_optimizer_step;
  // Optional (absent: false, not written): the optimizer takes the fp32 main gradients where the
  // data-parallel buffer holds them (no copy from 16-bit gradients) and, in bf16 and fp8, has no
  // loss scaler (no unscale and inf-check pass; fp16 keeps it); the gradient norm, Adam and the
  // copy back to the 16-bit weights remain (Megatron-Core: 38 bytes a parameter in bf16).
  SourcedFlag optimizer_main_grads_in_place;
  SoftwareSearchDefaults search;
  // Optional ("torch_ddp"): the facts of torch.nn.parallel.DistributedDataParallel in this stack.
  std::optional<DdpVariant> torch_ddp;

  // This profile with torch_ddp's facts in place of its own; an error naming the profile when it
  // states none.
  Result<SoftwareProfile> WithTorchDdp() const;

  // Parameters per data-parallel bucket for data-parallel size d (at least 1).
  double BucketParams(int dp) const;
};

struct EmbeddedSoftware {
  const char* name;
  const char* json;
};
// Generated from profiles/software/*.json (core/CMakeLists.txt).
const std::vector<EmbeddedSoftware>& EmbeddedSoftwareProfiles();

// The stack `ptdp plan` assumes unless --software says otherwise, and the paper's.
inline constexpr const char* kDefaultSoftware = "megatron-core";
inline constexpr const char* kPaperSoftware = "megatron-lm-2021";

// Strict reader: unknown or missing keys, wrong types, an empty source or a value out of range
// are errors naming the key path. `path` prefixes the key paths.
Result<SoftwareProfile> SoftwareProfileFromJson(const Json& j, const std::string& path);
OrderedJson SoftwareProfileToJson(const SoftwareProfile& p);
// A shipped profile's name or a path to a software profile JSON file (`--software`).
Result<SoftwareProfile> LoadSoftware(const std::string& name_or_path);

}  // namespace ptdp
