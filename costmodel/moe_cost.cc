#include "costmodel/moe_cost.h"

#include <algorithm>
#include <cmath>

#include "core/experts.h"
#include "costmodel/gemm.h"

namespace ptdp::costmodel {

Seconds AllToAllTime(const HardwareProfile& hw, Bytes bytes, const GroupSpan& span) {
  const int n = span.ranks;
  if (n < 2 || bytes <= 0) return 0;
  const double per_peer = double(bytes) / n;
  const int g = span.members_per_node;
  const Bytes intra_bytes = Bytes(per_peer * (g - 1)), inter_bytes = Bytes(per_peer * (n - g));
  const Seconds intra = SendRecvLink(hw, false, intra_bytes).Time(intra_bytes);
  const Seconds inter =
      span.inter_node() ? SendRecvLink(hw, true, inter_bytes).Time(inter_bytes) : 0.0;
  return std::max(intra, inter);
}

Seconds DeepEpAllToAllTime(const HardwareProfile& hw, const ModelSpec& m, const ParallelConfig& c,
                           const GroupSpan& span) {
  const int e = ComputeBytes(c.precision);
  if (!span.inter_node()) return AllToAllTime(hw, DispatchBytes(m, c, e), span);
  const double n = span.ranks, g = span.members_per_node;
  const double token = double(RoutedTokens(m, c)) * double(m.hidden) * e;
  const double k = m.moe_topk;
  // Over NVLink: the copies for the other GPUs of its own node, and of those that reach this
  // node over RDMA (one in g through this GPU), the ones for the others.
  const Bytes intra = Bytes(token * k * ((g - 1) / n + (n - g) / n * (g - 1) / g));
  const Bytes inter = Bytes(token * RemoteNodesPerToken(m, span.nodes));
  return std::max(SendRecvLink(hw, false, intra).Time(intra),
                  SendRecvLink(hw, true, inter).Time(inter));
}

ExpertComm ExpertCommTimes(const ModelSpec& m, const HardwareProfile& hw, const ParallelConfig& c,
                           int gpus_per_node) {
  ExpertComm comm;
  if (!m.IsMoe()) return comm;
  const int G = gpus_per_node, e = ComputeBytes(c.precision);
  const Bytes dispatch = DispatchBytes(m, c, e);
  const GroupSpan ep_span = SpanOf(ExpertParallelGroup(c), G);
  comm.all_to_all = c.moe_dispatcher == MoeDispatcher::kDeepEp
                        ? DeepEpAllToAllTime(hw, m, c, ep_span)
                        : AllToAllTime(hw, dispatch, ep_span);
  if (c.ExpertTp() > 1) {
    // The token copies a rank received, gathered over the expert tensor group: etp of them.
    const GroupSpan span = SpanOf(ExpertTensorGroup(c), G);
    const Bytes gathered = dispatch * c.ExpertTp();
    comm.etp_allgather = CollectiveTime(hw, Collective::kAllGather, gathered, span, G);
    comm.etp_reduce_scatter = CollectiveTime(hw, Collective::kReduceScatter, gathered, span, G);
  }
  return comm;
}

ExpertMlpParts ExpertMlpPartsOf(const ModelSpec& m, const HardwareProfile& hw,
                                const ParallelConfig& layout) {
  ExpertMlpParts parts;
  if (!m.IsMoe()) return parts;
  // `m` is already one context-parallel rank's s / cp: its shapes are those of cp = 1.
  ParallelConfig c = layout;
  c.cp = 1;
  const double e = ComputeBytes(c.precision), lin = LinearGemmScale(hw, c.precision);
  const int64_t h = m.hidden, E = m.moe_experts, et = c.ExpertTp();
  const int64_t f = m.MoeFfnHidden() / et, fc1 = 2 * f;
  const int64_t routed = RoutedTokens(m, c), copies = ExpertTokens(m, c);
  const int local = LocalExperts(m, c);
  // Each expert's rows: N / E_l, rounded up (a GEMM runs whole rows), at least one.
  const int64_t rows = std::max<int64_t>(1, (copies + local - 1) / local);
  const double T0 = double(routed), N = double(copies), Tk = double(RoutedCopies(m, c));

  PieceCost& route = parts.routing;
  route.forward.gemm = GemmTime(hw, routed, E, h);
  route.backward.gemm = GemmBackwardTime(hw, routed, E, h);
  route.weight_grad.gemm = GemmBackwardWeightTime(hw, routed, E, h);
  PieceCost& run = parts.experts;
  run.forward.gemm = local * lin * (GemmTime(hw, rows, fc1, h) + GemmTime(hw, rows, h, f));
  run.backward.gemm =
      local * lin * (GemmBackwardTime(hw, rows, fc1, h) + GemmBackwardTime(hw, rows, h, f));
  run.weight_grad.gemm =
      local * lin *
      (GemmBackwardWeightTime(hw, rows, fc1, h) + GemmBackwardWeightTime(hw, rows, h, f));

  // Megatron-Core's "permutation 2" (MoEAlltoAllTokenDispatcher's dispatch_postprocess and
  // combine_preprocess, token_dispatcher.py at d98e8a64): with more than one local expert the
  // received copies are sorted by local expert after the all-to-all and put back in source order
  // before the one back, a read and a write of the N h copies each (a copy of the padded
  // capacity view when dropping); backward the two again. One local expert: neither.
  const bool sort_local = local > 1 && c.moe_dispatcher == MoeDispatcher::kAllToAll;
  const double local_sort = sort_local ? 2 * (2 * e * N * h) : 0.0;
  const int route_kernels = 3 + 1 + 2 * sort_local;
  // Router softmax and top-k (fp32) and the permute; backward the same scatter.
  route.forward.memory =
      MemoryBoundTime(hw, 16 * T0 * E + 2 * e * Tk * h + local_sort, route_kernels);
  route.backward.memory =
      MemoryBoundTime(hw, 12 * T0 * E + 2 * e * Tk * h + local_sort, route_kernels);
  double forward = 3 * e * N * f               // SwiGLU
                   + e * Tk * h + e * T0 * h;  // unpermute
  double backward = 5 * e * N * f + e * T0 * h + 2 * e * Tk * h;
  int forward_kernels = 2, backward_kernels = 2;
  if (c.precision == Precision::kFp8) {
    // cast-transposes: read 2, write the copy and its transpose (Fp8CastBytesOf's terms).
    const double weights = double(local) * double(fc1 + f) * double(h);
    forward += 4 * (N * h + N * f) + 4 * weights;
    backward += 4 * (N * fc1 + N * h);
    forward_kernels += 2 * local + 2;
    backward_kernels += 2;
  }
  run.forward.memory = MemoryBoundTime(hw, forward, forward_kernels);
  run.backward.memory = MemoryBoundTime(hw, backward, backward_kernels);
  return parts;
}

PieceCost ExpertMlpCost(const ModelSpec& m, const HardwareProfile& hw, const ParallelConfig& layout,
                        const ExpertComm& comm) {
  PieceCost cost;
  if (!m.IsMoe()) return cost;
  const ExpertMlpParts parts = ExpertMlpPartsOf(m, hw, layout);
  for (const PieceCost* part : {&parts.routing, &parts.experts}) {
    cost.forward.gemm += part->forward.gemm;
    cost.forward.memory += part->forward.memory;
    cost.backward.gemm += part->backward.gemm;
    cost.backward.memory += part->backward.memory;
    cost.weight_grad.gemm += part->weight_grad.gemm;
  }
  const Seconds exchange = 2 * comm.all_to_all + comm.etp_allgather + comm.etp_reduce_scatter;
  cost.forward.tp_comm = exchange;
  cost.backward.tp_comm = exchange;
  return cost;
}

SharedExpertHalves SharedExpertHalvesOf(const ModelSpec& m, const HardwareProfile& hw,
                                        const ParallelConfig& c, Seconds tp_ag, Seconds tp_rs,
                                        Seconds tp_ar) {
  SharedExpertHalves halves;
  if (!m.IsMoe() || !m.HasSharedExpert()) return halves;
  // `m` is one context-parallel rank's s / cp, as for ExpertMlpCost.
  const double e = ComputeBytes(c.precision), lin = LinearGemmScale(hw, c.precision);
  const int64_t T = int64_t(c.mbs) * m.seq_len, h = m.hidden;
  const int64_t f = m.moe_shared_ffn_hidden / c.tp, fc1 = 2 * f;
  const double Th = double(T) * h, Tf = double(T) * f;
  const double Th_seq = c.sequence_parallel ? Th / c.tp : Th;
  const bool fp8 = c.precision == Precision::kFp8;  // Fp8CastBytesOf's terms for one MLP
  PieceCost& up = halves.up;
  up.forward.gemm = lin * GemmTime(hw, T, fc1, h);
  up.backward.gemm = lin * GemmBackwardTime(hw, T, fc1, h);
  up.weight_grad.gemm = lin * GemmBackwardWeightTime(hw, T, fc1, h);
  // SwiGLU forward 3e T f, backward 5e T f; the casts of fc1's input and weight, of its output
  // gradient.
  up.forward.memory =
      MemoryBoundTime(hw, 3 * e * Tf + (fp8 ? 4 * (Th + double(fc1) * h) : 0.0), fp8 ? 3 : 1);
  up.backward.memory =
      MemoryBoundTime(hw, 5 * e * Tf + (fp8 ? 4 * double(T) * fc1 : 0.0), fp8 ? 2 : 1);
  PieceCost& down = halves.down;
  down.forward.gemm = lin * GemmTime(hw, T, h, f);
  down.backward.gemm = lin * GemmBackwardTime(hw, T, h, f);
  down.weight_grad.gemm = lin * GemmBackwardWeightTime(hw, T, h, f);
  // The add to the routed experts' output (read 2e, write e); the casts of fc2's input and
  // weight, of its output gradient.
  down.forward.memory =
      MemoryBoundTime(hw, 3 * e * Th_seq + (fp8 ? 4 * (Tf + double(f) * h) : 0.0), fp8 ? 3 : 1);
  down.backward.memory = fp8 ? MemoryBoundTime(hw, 4 * Th, 1) : 0.0;
  if (c.tp > 1) {  // the all-gather's backward is a reduce-scatter and the other way round
    const Seconds in = c.sequence_parallel ? tp_ag : 0.0;
    const Seconds out = c.sequence_parallel ? tp_rs : tp_ar;
    up.forward.tp_comm = up.backward.tp_comm = in;
    down.forward.tp_comm = down.backward.tp_comm = out;
  }
  return halves;
}

PieceCost SharedExpertCost(const ModelSpec& m, const HardwareProfile& hw, const ParallelConfig& c,
                           Seconds tp_ag, Seconds tp_rs, Seconds tp_ar) {
  const SharedExpertHalves halves = SharedExpertHalvesOf(m, hw, c, tp_ag, tp_rs, tp_ar);
  PieceCost cost;
  cost.forward = Add(halves.up.forward, halves.down.forward);
  cost.backward = Add(halves.up.backward, halves.down.backward);
  cost.weight_grad = Add(halves.up.weight_grad, halves.down.weight_grad);
  return cost;
}

void OverlapSharedExpert(const SharedExpertHalves& shared, const ExpertComm& comm, double slowdown,
                         PieceCost* layer) {
  const Seconds dispatch = comm.all_to_all + comm.etp_allgather;
  const Seconds combine = comm.all_to_all + comm.etp_reduce_scatter;
  auto beside = [&](const ComputeBreakdown& half, Seconds exchange, ComputeBreakdown* to) {
    *to = Add(*to, half);
    const Seconds hidden = std::min(exchange, half.Total());
    to->tp_comm -= hidden;
    to->gemm += hidden * OverlapStretch(slowdown);
  };
  beside(shared.up.forward, dispatch, &layer->forward);
  beside(shared.down.forward, combine, &layer->forward);
  beside(shared.down.backward, combine, &layer->backward);
  beside(shared.up.backward, dispatch, &layer->backward);
  layer->weight_grad = Add(layer->weight_grad, shared.up.weight_grad);
  layer->weight_grad = Add(layer->weight_grad, shared.down.weight_grad);
}

PieceCost MtpDepthCost(const ModelSpec& m, const HardwareProfile& hw, const ParallelConfig& c,
                       const PieceCost& layer, const PieceCost& embed, const PieceCost& head,
                       Seconds tp_allgather, Seconds tp_reduce_scatter) {
  const double e = ComputeBytes(c.precision), lin = LinearGemmScale(hw, c.precision);
  const int64_t T = int64_t(c.mbs) * m.seq_len, h = m.hidden;
  const double Th_seq = double(T) * h / (c.sequence_parallel ? c.tp : 1);
  PieceCost cost;
  cost.forward.gemm = lin * GemmTime(hw, T, h / c.tp, 2 * h);
  cost.backward.gemm = lin * GemmBackwardTime(hw, T, h / c.tp, 2 * h);
  cost.weight_grad.gemm = lin * GemmBackwardWeightTime(hw, T, h / c.tp, 2 * h);
  cost.forward.memory = MemoryBoundTime(hw, 2 * (2 * e * Th_seq) + 2 * e * 2 * Th_seq, 3);
  cost.backward.memory = MemoryBoundTime(hw, 2 * (3 * e * Th_seq) + 2 * e * 2 * Th_seq, 3);
  if (c.tp > 1) {
    cost.forward.tp_comm = tp_allgather;
    cost.backward.tp_comm = tp_reduce_scatter;
  }
  auto add = [](ComputeBreakdown* to, const ComputeBreakdown& from) {
    to->gemm += from.gemm;
    to->memory += from.memory;
    to->tp_comm += from.tp_comm;
  };
  for (const PieceCost* piece : {&layer, &embed, &head}) {
    add(&cost.forward, piece->forward);
    add(&cost.backward, piece->backward);
    add(&cost.weight_grad, piece->weight_grad);
  }
  return cost;
}

}  // namespace ptdp::costmodel
