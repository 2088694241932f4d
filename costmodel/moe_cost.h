// A mixture of experts' MLP on one rank (ModelSpec::moe_experts > 0; core/experts.h has the
// shapes, docs/moe.md the sources), added to the layer TransformerLayerCost priced without a
// dense MLP. What Megatron-Core's MoELayer runs per microbatch with the alltoall token dispatcher
// and grouped GEMM (megatron/core/transformer/moe/: router.py, token_dispatcher.py, experts.py),
// with T0 the rank's routed tokens, k the top-k, N = T0 k etp its experts' token copies, E_l =
// E / ep local experts and f = moe_ffn_hidden:
//   router      [T0, E] = [T0, h] x [h, E] (and its backward); softmax and top-k over T0 E fp32
//               logits (write 4, read 4 write 4, read 4: 16 bytes each), backward 12
//   permute     gather each token's k copies in expert order (read and write e T0 k h), with etp >
//   1
//               sorted again after the gather (2e N h); backward the same scatter
//   dispatch    all-to-all of the T0 k h copies over the ep group; with etp > 1 an all-gather of
//               them over the etp group (forward); the combine mirrors both (all-to-all back, a
//               reduce-scatter); backward the four again
//   experts     E_l grouped GEMMs of N / E_l tokens each: fc1 [n, 2f/etp] = [n, h] x [h, 2f/etp],
//               fc2 [n, h] = [n, f/etp] x [f/etp, h], each expert's GEMMs at their own shape
//               (the grouped GEMM's rate is its members'), at the FP8 rate in fp8 training
//   SwiGLU      3e N f/etp forward, 5e backward (the dense layer's terms on N tokens)
//   unpermute   the probability-weighted sum of each token's k outputs: read e T0 k h, write e T0
//   h;
//               backward reads dy and the k outputs (the probabilities' gradient), writes k copies
//   fp8         Transformer Engine's casts of the experts' inputs (N h, N f/etp) and weights
//               forward, of their output gradients (N 2f/etp, N h) backward, as the dense layer's.
// The dispatch and combine are on the critical path (Megatron-Core of 2024 runs them on the
// compute stream) and go to the piece's tensor-parallel communication time (tp_comm: the
// collectives inside a layer); the combined 1F1B hides some of them behind another microbatch's
// compute (costmodel/a2a_overlap.h). Every expert gets N / E_l tokens: a balanced router
// (core/experts.h).
#pragma once

#include "core/hardware.h"
#include "core/model.h"
#include "core/parallel.h"
#include "costmodel/collectives.h"
#include "costmodel/layer_cost.h"

namespace ptdp::costmodel {

// One all-to-all in which each of the group's n ranks sends `bytes` in all, 1/n to each member
// (its own share stays): (g - 1)/n of it over NVLink to the g - 1 others on its node, (n - g)/n
// over its NIC to the other nodes, the two at once (each GPU has its own NIC, core/hardware.h's
// inter-node figures per GPU), at the profile's point-to-point rates; one latency each.
Seconds AllToAllTime(const HardwareProfile& hw, Bytes bytes, const GroupSpan& span);

// One dispatch of the DeepEP dispatcher (ParallelConfig::moe_dispatcher) over an expert-parallel
// group spanning `span`: within a node as AllToAllTime; across nodes its kernels send each token
// over RDMA once to each other node that holds one of its experts (RemoteNodesPerToken,
// core/experts.h) and forward it there over NVLink, the two at once at the profile's
// point-to-point rates (deepseek-ai/DeepEP's README measures its inter-node kernels at 43-46 GB/s
// per 50 GB/s NIC on H800, as near line rate as the profile's 48).
Seconds DeepEpAllToAllTime(const HardwareProfile& hw, const ModelSpec& m, const ParallelConfig& c,
                           const GroupSpan& span);

// The expert layer's communication times, per microbatch: one all-to-all of the dispatch (and as
// much for each of the other three), one all-gather of the gathered tokens over etp and one
// reduce-scatter (0 with etp = 1).
struct ExpertComm {
  Seconds all_to_all = 0;
  Seconds etp_allgather = 0;
  Seconds etp_reduce_scatter = 0;
};
ExpertComm ExpertCommTimes(const ModelSpec& m, const HardwareProfile& hw, const ParallelConfig& c,
                           int gpus_per_node);

// The MoE block's compute in two parts, for `m` as one context-parallel rank sees it (seq_len
// s / cp): `routing` the router and the permute (what runs before the dispatch), `experts` the
// grouped GEMMs, SwiGLU, the unpermute and the FP8 casts (what runs between the dispatch and the
// combine, the unpermute taken with it). No communication.
struct ExpertMlpParts {
  PieceCost routing, experts;
};
ExpertMlpParts ExpertMlpPartsOf(const ModelSpec& m, const HardwareProfile& hw,
                                const ParallelConfig& c);

// The MoE block's time (above): the two parts and the communication.
PieceCost ExpertMlpCost(const ModelSpec& m, const HardwareProfile& hw, const ParallelConfig& c,
                        const ExpertComm& comm);

// A shared expert (ModelSpec::moe_shared_ffn_hidden > 0; Megatron-Core's SharedExpertMLP): a
// dense SwiGLU MLP of f_s on all T = b s tokens of the microbatch, split over the tensor group as
// the dense layer's MLP: fc1 [T, 2 f_s/t] = [T, h] x [h, 2 f_s/t], fc2 [T, h] = [T, f_s/t] x
// [f_s/t, h] at the Linears' rate, SwiGLU 3e T f_s/t forward and 5e backward, in fp8 training
// Transformer Engine's casts of its two inputs and weights forward and its two output gradients
// backward, and its output added to the routed experts' (read 2e, write e over the rank's T h or
// T h / t). Its tensor-parallel pair each way, as the dense MLP's: under sequence parallelism an
// all-gather of its input (`tp_ag`) and a reduce-scatter of its output (`tp_rs`), else one
// all-reduce of its output (`tp_ar`). Zero without one. In two halves, as
// --moe-shared-expert-overlap runs them (ParallelConfig::moe_shared_expert_overlap): `up` the
// all-gather, fc1 and the activation (and their fp8 casts), `down` fc2, the reduce-scatter or
// all-reduce and the add; each half's backward is its own ops' backward.
struct SharedExpertHalves {
  PieceCost up, down;
};
SharedExpertHalves SharedExpertHalvesOf(const ModelSpec& m, const HardwareProfile& hw,
                                        const ParallelConfig& c, Seconds tp_ag, Seconds tp_rs,
                                        Seconds tp_ar);
// The two halves together.
PieceCost SharedExpertCost(const ModelSpec& m, const HardwareProfile& hw, const ParallelConfig& c,
                           Seconds tp_ag, Seconds tp_rs, Seconds tp_ar);

// --moe-shared-expert-overlap on a mixture layer's price `layer` (its experts' exchange in
// tp_comm, ExpertMlpCost; the shared expert not yet in it): the shared expert's halves added, each
// beside one exchange on a second stream (megatron/core/transformer/moe/token_dispatcher.py at
// d98e8a64: fc1 and the activation beside the dispatch's all-to-all, fc2 and the reduce-scatter
// beside the combine's; the backward in the mirrored order, which the autograd sequence numbers
// shared_experts.py sets make it run in). Each half hides min(its time, the exchange's) of the
// exchange, which then costs OverlapStretch(slowdown) of its seconds of compute beside it (the
// convention of every overlap here): the pair takes max(a, b) + min(a, b) s / (1 + s).
void OverlapSharedExpert(const SharedExpertHalves& shared, const ExpertComm& comm, double slowdown,
                         PieceCost* layer);

// One multi-token prediction depth (ModelSpec::mtp_layers; Megatron-Core's
// MultiTokenPredictionLayer) on the head's stage, per microbatch: the embedding's lookup of the
// shifted tokens (`embed`), the two input norms and their concatenation (2 x 2e and 2e over the
// rank's T h, or T h / t under sequence parallelism; backward 3e, 3e and the split 2e),
// eh_proj [T, h/t] = [T, 2h] x [2h, h/t] at the Linears' rate with its output all-gathered over
// the tensor group forward (reduce-scattered backward), its transformer `layer`, the final norm
// and the output layer with its cross-entropy (`head`, whose final norm stands for it).
PieceCost MtpDepthCost(const ModelSpec& m, const HardwareProfile& hw, const ParallelConfig& c,
                       const PieceCost& layer, const PieceCost& embed, const PieceCost& head,
                       Seconds tp_allgather, Seconds tp_reduce_scatter);

}  // namespace ptdp::costmodel
