// A mixture layer's shared expert (runtime/model/moe_shared.h).
#include "runtime/model/moe_shared.h"

#include <cstdint>
#include <vector>

#include "runtime/model/layer_common.h"

namespace ptdp::runtime {

using namespace layer_common;  // NOLINT(build/namespaces): the layers' shared helpers

namespace {

// The gate of each of the N gathered rows x: sigmoid(x w_gate^T) (wide [N]), recomputed in the
// backward rather than kept (a GEMV of N x h), so that the stash stays the ledger's list.
Result<Tensor> SharedGate(const LayerCtx& c, const LayerWeights& w, ConstRef x) {
  const int64_t N = c.d.N(), h = c.d.h;
  PTDP_ASSIGN_OR_RETURN(Tensor logit, Tmp(c, N, c.types.act));
  PTDP_RETURN_IF_ERROR(c.dev->ops()->LinearForward(logit.ref(), {}, x, w.shared_gate, {}, N, h, 1));
  PTDP_ASSIGN_OR_RETURN(Tensor gate, Tmp(c, N, c.types.wide));
  PTDP_RETURN_IF_ERROR(c.dev->ops()->MoeGateSigmoid(gate.ref(), logit.cref(), N));
  return gate;
}

// 0, 1, ..., n - 1 (i32): the slots of rows scaled or dotted each by its own token's value.
Result<Tensor> Identity(const LayerCtx& c, int64_t n) {
  std::vector<int32_t> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[size_t(i)] = static_cast<int32_t>(i);
  PTDP_ASSIGN_OR_RETURN(Tensor ids, Tmp(c, n, DType::kI32));
  c.dev->Upload(ids.data(), host.data(), ids.bytes());
  return ids;
}

// The gate's backward from u = dout w_fc2 [N][fs] (the gradient of the ungated output reaching
// fc2's input): dgate = <dout, y> = <u, act> per token (this rank's partial sum over its fs
// features; the gate's weight and input gradients it gives are partial sums too, summed over the
// tensor group with the rest: GradIsPartialOverTensorGroup, the g reduction), into g.shared_gate
// and dln. Scales u by the gate (the gradient at fc2's input) and dout (for fc2's weight).
Status SharedGateBackward(const LayerCtx& c, const LayerWeights& w, const LayerGrads& g,
                          const LayerStash* st, ConstRef x, TensorRef u, TensorRef dout_gated,
                          ConstRef dout, TensorRef dln) {
  Ops* ops = c.dev->ops();
  const int64_t N = c.d.N(), h = c.d.h, fs = c.d.shared_f_local;
  PTDP_ASSIGN_OR_RETURN(const Tensor gate, SharedGate(c, w, x));
  PTDP_ASSIGN_OR_RETURN(const Tensor ids, Identity(c, N));
  PTDP_ASSIGN_OR_RETURN(Tensor dgate, Tmp(c, N, c.types.wide));
  PTDP_RETURN_IF_ERROR(ops->MoeRowDots(dgate.ref(), u, st->shared_act.cref(), ids.cref(), N, fs));
  PTDP_RETURN_IF_ERROR(ops->MoeScaleRows(u, u, gate.cref(), ids.cref(), N, fs));
  PTDP_RETURN_IF_ERROR(ops->MoeScaleRows(dout_gated, dout, gate.cref(), ids.cref(), N, h));
  PTDP_ASSIGN_OR_RETURN(Tensor dlogit, Tmp(c, N, c.types.act));
  PTDP_RETURN_IF_ERROR(ops->MoeGateSigmoidBackward(dlogit.ref(), gate.cref(), dgate.cref(), N));
  PTDP_RETURN_IF_ERROR(ops->LinearBackwardWeight(g.shared_gate, {}, dlogit.cref(), x, N, h, 1));
  PTDP_ASSIGN_OR_RETURN(Tensor dx, Tmp(c, N * h, c.types.act));
  PTDP_RETURN_IF_ERROR(ops->LinearBackwardData(dx.ref(), dlogit.cref(), w.shared_gate, N, h, 1));
  return ops->Add(dln, dln, dx.cref());
}

}  // namespace

// The shared expert's inside into the stash (tagged `tag`): fc1 on the gathered router input,
// then SwiGLU; with `gate`, the gate of each row too (it reads the same gathered input). The
// forward runs it, and the backward again under recompute_modules shared_experts or moe.
Status SharedInsideForward(const LayerCtx& c, const LayerWeights& w, MemTag tag, LayerStash* st,
                           Tensor* gate) {
  Ops* ops = c.dev->ops();
  const int64_t N = c.d.N(), h = c.d.h, fs = c.d.shared_f_local;
  const DType a = c.types.act;
  PTDP_ASSIGN_OR_RETURN(st->shared_fc1_out, Alloc(c, N * 2 * fs, a, tag));
  PTDP_ASSIGN_OR_RETURN(st->shared_act, Alloc(c, N * fs, a, tag));
  {
    PTDP_ASSIGN_OR_RETURN(const FullRows ln2, GatherRows(c, st->ln2_out.cref()));
    PTDP_RETURN_IF_ERROR(
        ops->LinearForward(st->shared_fc1_out.ref(), {}, ln2.ref, w.shared_fc1, {}, N, h, 2 * fs));
    if (gate != nullptr && !w.shared_gate.empty()) {
      PTDP_ASSIGN_OR_RETURN(*gate, SharedGate(c, w, ln2.ref));
    }
  }
  return ops->SwigluForward(st->shared_act.ref(), st->shared_fc1_out.cref(), N * fs);
}

bool RedoesSharedExpert(const LayerCtx& c) {
  return c.redo_shared_expert || c.redo_moe_block;
}

Status SharedForward(const LayerCtx& c, const LayerWeights& w, MemTag tag, LayerStash* st,
                     TensorRef mlp) {
  Ops* ops = c.dev->ops();
  const int64_t N = c.d.N(), h = c.d.h, fs = c.d.shared_f_local;
  const DType a = c.types.act;
  Tensor gate;
  PTDP_RETURN_IF_ERROR(SharedInsideForward(c, w, tag, st, &gate));
  PTDP_ASSIGN_OR_RETURN(Tensor out, Tmp(c, N * h, a));
  PTDP_RETURN_IF_ERROR(
      ops->LinearForward(out.ref(), {}, st->shared_act.cref(), w.shared_fc2, {}, N, fs, h));
  if (RedoesSharedExpert(c)) {  // rebuilt by the backward (SharedInsideForward)
    st->shared_fc1_out.Reset();
    st->shared_act.Reset();
  }
  if (!gate.empty()) {
    PTDP_ASSIGN_OR_RETURN(const Tensor ids, Identity(c, N));
    PTDP_RETURN_IF_ERROR(ops->MoeScaleRows(out.ref(), out.cref(), gate.cref(), ids.cref(), N, h));
  }
  return ops->Add(mlp, mlp, out.cref());
}

// Its backward from the gathered output gradient dout [N][h]: its weights' gradients, and its
// input gradient's partial sums into dln [N][h].
Status SharedBackward(const LayerCtx& c, const LayerWeights& w, const LayerGrads& g,
                      const LayerStash* st, ConstRef dout, TensorRef dln) {
  Ops* ops = c.dev->ops();
  const int64_t N = c.d.N(), h = c.d.h, fs = c.d.shared_f_local;
  const DType a = c.types.act;
  PTDP_ASSIGN_OR_RETURN(Tensor dact, Tmp(c, N * fs, a));
  PTDP_RETURN_IF_ERROR(ops->LinearBackwardData(dact.ref(), dout, w.shared_fc2, N, fs, h));
  ConstRef dy = dout;  // what reaches fc2's output: dout, times the gate with one
  Tensor dout_gated;
  // The gathered input: early with a gate (which needs it before fc1's backward, and keeps it
  // for fc1's weight gradient: one all-gather), else only for fc1's weight gradient.
  FullRows ln2;
  if (!w.shared_gate.empty()) {
    PTDP_ASSIGN_OR_RETURN(dout_gated, Tmp(c, N * h, a));
    PTDP_ASSIGN_OR_RETURN(ln2, GatherRows(c, st->ln2_out.cref()));
    PTDP_RETURN_IF_ERROR(
        SharedGateBackward(c, w, g, st, ln2.ref, dact.ref(), dout_gated.ref(), dout, dln));
    dy = dout_gated.cref();
  }
  PTDP_RETURN_IF_ERROR(
      ops->LinearBackwardWeight(g.shared_fc2, {}, dy, st->shared_act.cref(), N, fs, h));
  dout_gated.Reset();
  PTDP_ASSIGN_OR_RETURN(Tensor dfc1, Tmp(c, N * 2 * fs, a));
  PTDP_RETURN_IF_ERROR(
      ops->SwigluBackward(dfc1.ref(), st->shared_fc1_out.cref(), dact.cref(), N * fs));
  dact.Reset();
  PTDP_ASSIGN_OR_RETURN(Tensor din, Tmp(c, N * h, a));
  PTDP_RETURN_IF_ERROR(ops->LinearBackwardData(din.ref(), dfc1.cref(), w.shared_fc1, N, h, 2 * fs));
  if (w.shared_gate.empty()) {
    PTDP_ASSIGN_OR_RETURN(ln2, GatherRows(c, st->ln2_out.cref()));
  }
  PTDP_RETURN_IF_ERROR(
      ops->LinearBackwardWeight(g.shared_fc1, {}, dfc1.cref(), ln2.ref, N, h, 2 * fs));
  ln2 = {};
  return ops->Add(dln, dln, din.cref());
}

}  // namespace ptdp::runtime
