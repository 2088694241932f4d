#include "runtime/model/moe_layer.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/model/layer_common.h"
#include "runtime/model/moe_route.h"
#include "runtime/model/moe_shared.h"

namespace ptdp::runtime {

using namespace layer_common;  // NOLINT(build/namespaces): the layers' shared helpers

namespace {

// The model's router (LayerArch's moe_* fields) with the layer's expert bias (or none).
MoeRouting RoutingOf(const LayerArch& a, const LayerWeights& w) {
  return {a.moe_experts,
          a.moe_topk,
          a.moe_router_groups,
          a.moe_router_group_topk,
          a.moe_router_pre_softmax,
          a.moe_router_sigmoid,
          a.moe_router_topk_scale,
          w.expert_bias};
}

// The router's choice from the stashed logits: index [R][k] (and probs, into `probs`).
Result<Tensor> Choose(const LayerCtx& c, const LayerWeights& w, ConstRef logits, TensorRef probs) {
  const int64_t R = c.d.R(), k = c.arch.moe_topk;
  PTDP_ASSIGN_OR_RETURN(Tensor index, Tmp(c, R * k, DType::kI32));
  PTDP_RETURN_IF_ERROR(
      c.dev->ops()->MoeRouterTopK(probs, index.ref(), logits, R, RoutingOf(c.arch, w)));
  return index;
}

// Rows [at, at + rows) of the expert side are local expert `expert`'s.
struct ExpertBlock {
  int expert = 0;
  int64_t at = 0, rows = 0;
};

// The expert side of a microbatch: the token copies this rank's experts process, in blocks, and
// each copy's probability, probs[slot[row]]. With ep = 1 these are the route's own copies (every
// expert here); with ep > 1 the copies of this rank's E / ep experts from every member of the
// expert-parallel group, member after member, each member's in expert order: member q is sent
// this rank's copies of q's experts (the route's rows [offsets[q El], offsets[(q + 1) El])), as
// Megatron-Core's alltoall dispatcher sends them.
struct ExpertSide {
  std::vector<ExpertBlock> blocks;
  int64_t rows = 0;
  std::vector<int64_t> send_rows, recv_rows;  // per member (ep > 1)
  Tensor own_probs, own_slot;                 // ep > 1: the received probabilities, 0..rows-1
  ConstRef probs, slot;
  bool exchanged() const { return !send_rows.empty(); }
};

bool ExpertParallel(const LayerCtx& c) {
  return c.ep != nullptr && c.ep->size() > 1;
}

// Sends member q send_rows[q] rows of `width` elements from `send` (member after member) and
// receives recv_rows[q] rows from each into `recv`: the dispatcher's all-to-all, as point-to-point
// sends started first and receives after (no member waits on a send).
Status ExchangeRows(const LayerCtx& c, const void* send, const std::vector<int64_t>& send_rows,
                    void* recv, const std::vector<int64_t>& recv_rows, int64_t width, DType t) {
  constexpr int kTag = 7;
  Communicator* ep = c.ep;
  const Bytes row = width * DTypeBytes(t);
  std::vector<int64_t> s_at(send_rows.size() + 1, 0), r_at(recv_rows.size() + 1, 0);
  for (size_t q = 0; q < send_rows.size(); ++q) s_at[q + 1] = s_at[q] + send_rows[q];
  for (size_t q = 0; q < recv_rows.size(); ++q) r_at[q + 1] = r_at[q] + recv_rows[q];
  const auto* from = static_cast<const char*>(send);
  auto* to = static_cast<char*>(recv);
  std::vector<std::unique_ptr<CommRequest>> sends;
  for (int q = 0; q < ep->size(); ++q) {
    if (q == ep->rank() || send_rows[size_t(q)] == 0) continue;
    PTDP_ASSIGN_OR_RETURN(auto req, ep->ISend(from + s_at[size_t(q)] * row,
                                              send_rows[size_t(q)] * width, t, q, kTag));
    sends.push_back(std::move(req));
  }
  const size_t me = size_t(ep->rank());
  if (send_rows[me] > 0)
    c.dev->Copy(to + r_at[me] * row, from + s_at[me] * row, send_rows[me] * row);
  for (int q = 0; q < ep->size(); ++q) {
    if (q == ep->rank() || recv_rows[size_t(q)] == 0) continue;
    PTDP_RETURN_IF_ERROR(
        ep->Recv(to + r_at[size_t(q)] * row, recv_rows[size_t(q)] * width, t, q, kTag));
  }
  for (auto& req : sends) PTDP_RETURN_IF_ERROR(req->Wait());
  return Status::Ok();
}

// The expert side of route `r`. With ep > 1: every member's counts per expert (an all-gather),
// and each copy's probability sent with it.
Result<ExpertSide> ExpertSideOf(const LayerCtx& c, const MoeRoute& r) {
  ExpertSide x;
  const int64_t experts = c.arch.moe_experts;
  if (!ExpertParallel(c)) {
    for (int64_t e = 0; e < experts; ++e) {
      const int64_t at = r.offsets[size_t(e)], n = r.offsets[size_t(e + 1)] - at;
      if (n > 0) x.blocks.push_back({int(e), at, n});
    }
    x.rows = r.copies();
    x.probs = r.probs.cref();
    x.slot = r.slot.cref();
    return x;
  }
  const int members = c.ep->size(), me = c.ep->rank();
  const int64_t local = experts / members;
  std::vector<int32_t> mine(static_cast<size_t>(experts)), all(size_t(members) * mine.size());
  for (int64_t e = 0; e < experts; ++e) {
    mine[size_t(e)] = int32_t(r.offsets[size_t(e + 1)] - r.offsets[size_t(e)]);
  }
  {
    PTDP_ASSIGN_OR_RETURN(Tensor counts, Tmp(c, members * experts, DType::kI32));
    char* at = static_cast<char*>(counts.data()) + me * experts * int64_t(sizeof(int32_t));
    c.dev->Upload(at, mine.data(), mine.size() * sizeof(int32_t));
    PTDP_RETURN_IF_ERROR(c.ep->AllGather(at, counts.data(), experts, DType::kI32));
    c.dev->Copy(all.data(), counts.data(), all.size() * sizeof(int32_t));
  }
  x.send_rows.assign(size_t(members), 0);
  x.recv_rows.assign(size_t(members), 0);
  for (int q = 0; q < members; ++q) {
    x.send_rows[size_t(q)] = r.offsets[size_t((q + 1) * local)] - r.offsets[size_t(q * local)];
    for (int64_t j = 0; j < local; ++j) {
      const int64_t n = all[size_t(q * experts + me * local + j)];
      if (n > 0) x.blocks.push_back({int(j), x.rows, n});
      x.recv_rows[size_t(q)] += n;
      x.rows += n;
    }
  }
  // Each copy's probability, probs[slot[i]] (the dispatch's permutation, rows of one), sent with
  // the copy.
  const int64_t copies = r.copies();
  const DType wide = r.probs.dtype();
  PTDP_ASSIGN_OR_RETURN(Tensor send, Tmp(c, copies, wide));
  PTDP_RETURN_IF_ERROR(
      c.dev->ops()->MoePermuteRows(send.ref(), r.probs.cref(), r.slot.cref(), copies, 1));
  PTDP_ASSIGN_OR_RETURN(x.own_probs, Tmp(c, x.rows, wide));
  PTDP_RETURN_IF_ERROR(
      ExchangeRows(c, send.data(), x.send_rows, x.own_probs.data(), x.recv_rows, 1, wide));
  std::vector<int32_t> identity(static_cast<size_t>(x.rows));
  for (int64_t i = 0; i < x.rows; ++i) identity[size_t(i)] = int32_t(i);
  PTDP_ASSIGN_OR_RETURN(x.own_slot, Tmp(c, x.rows, DType::kI32));
  c.dev->Upload(x.own_slot.data(), identity.data(), x.own_slot.bytes());
  x.probs = x.own_probs.cref();
  x.slot = x.own_slot.cref();
  return x;
}

// The route's copies [copies][width] (expert order) to the expert side, into `out` [rows][width];
// with ep = 1 `out` is `in` moved.
Result<Tensor> ToExperts(const LayerCtx& c, const ExpertSide& x, Tensor in, int64_t width,
                         MemTag tag) {
  if (!x.exchanged()) return in;
  PTDP_ASSIGN_OR_RETURN(Tensor out, Alloc(c, x.rows * width, in.dtype(), tag));
  PTDP_RETURN_IF_ERROR(
      ExchangeRows(c, in.data(), x.send_rows, out.data(), x.recv_rows, width, in.dtype()));
  return out;
}

// The way back: the expert side's rows [rows][width] to the route's copies [copies][width].
Result<Tensor> FromExperts(const LayerCtx& c, const ExpertSide& x, Tensor in, int64_t copies,
                           int64_t width) {
  if (!x.exchanged()) return in;
  PTDP_ASSIGN_OR_RETURN(Tensor out, Tmp(c, copies * width, in.dtype()));
  PTDP_RETURN_IF_ERROR(
      ExchangeRows(c, in.data(), x.recv_rows, out.data(), x.send_rows, width, in.dtype()));
  return out;
}

// out[rows of e] = in[rows of e] W_e^T for every block (fc1 and fc2 of the experts).
Status ExpertsForward(const LayerCtx& c, const ExpertSide& x, const std::vector<ConstRef>& w,
                      TensorRef out, ConstRef in, int64_t cols, int64_t oc) {
  for (const ExpertBlock& b : x.blocks) {
    PTDP_RETURN_IF_ERROR(c.dev->ops()->LinearForward(Rows(out, b.at, b.rows, oc), {},
                                                     Rows(in, b.at, b.rows, cols),
                                                     w[size_t(b.expert)], {}, b.rows, cols, oc));
  }
  return Status::Ok();
}

// The experts' backward of out = in W_e^T: din (overwritten) and dW_e (accumulated).
Status ExpertsBackward(const LayerCtx& c, const ExpertSide& x, const std::vector<ConstRef>& w,
                       const std::vector<TensorRef>& dw, TensorRef din, ConstRef dout, ConstRef in,
                       int64_t cols, int64_t oc) {
  Ops* ops = c.dev->ops();
  for (const ExpertBlock& b : x.blocks) {
    const ConstRef g = Rows(dout, b.at, b.rows, oc);
    const size_t e = size_t(b.expert);
    PTDP_RETURN_IF_ERROR(
        ops->LinearBackwardData(Rows(din, b.at, b.rows, cols), g, w[e], b.rows, cols, oc));
    PTDP_RETURN_IF_ERROR(
        ops->LinearBackwardWeight(dw[e], {}, g, Rows(in, b.at, b.rows, cols), b.rows, cols, oc));
  }
  return Status::Ok();
}

// The auxiliary load-balancing loss's gradient into dlogits [R][E], from the counts per expert of
// the microbatch (aux_loss) or of each of its sequences (seq_aux_loss, c.moe_aux_per_sequence):
// the route's (every token of the tensor group's rows) summed over the context group.
Status AuxLossBackward(const LayerCtx& c, const MoeRoute& r, const LayerStash* st,
                       TensorRef dlogits) {
  const int64_t experts = c.arch.moe_experts, R = c.d.R();
  const int64_t groups = c.moe_aux_per_sequence ? c.d.b : 1, count = groups * experts;
  // Each sequence's S rows in order ([b][S]); this rank's R rows from sp_rank R on.
  const MoeAuxGrouping g{c.moe_aux_per_sequence ? c.d.S() : 0, c.d.sp_rank * R,
                         c.arch.moe_router_sigmoid};
  // The counts in the wide dtype (fp32 in training, fp64 in the finite-difference tests).
  const bool fp64 = c.types.wide == DType::kFp64;
  std::vector<double> wide(static_cast<size_t>(count));
  std::vector<float> narrow(wide.size());
  for (int64_t i = 0; i < count; ++i) {
    wide[size_t(i)] =
        c.moe_aux_per_sequence ? double(r.per_sequence[size_t(i)]) : double(r.routed[size_t(i)]);
    narrow[size_t(i)] = float(wide[size_t(i)]);
  }
  const DType t = fp64 ? DType::kFp64 : DType::kFp32;
  PTDP_ASSIGN_OR_RETURN(Tensor counts, Tmp(c, count, t));
  c.dev->Upload(counts.data(), fp64 ? static_cast<const void*>(wide.data()) : narrow.data(),
                counts.bytes());
  if (c.cp != nullptr && c.cp->size() > 1) {
    PTDP_RETURN_IF_ERROR(c.cp->AllReduceSum(counts.data(), count, t));
  }
  PTDP_RETURN_IF_ERROR(c.dev->ops()->MoeAuxLossBackward(
      dlogits, st->router_logits.cref(), counts.cref(), c.moe_aux_grad, R, experts, g));
  // The loss's value, for the log: P_e over each group (the rank's rows summed over the tensor
  // group under sequence parallelism, and over the context group).
  PTDP_ASSIGN_OR_RETURN(Tensor probs, Tmp(c, count, t));
  PTDP_RETURN_IF_ERROR(
      c.dev->ops()->MoeRouterProbSums(probs.ref(), st->router_logits.cref(), R, experts, g));
  if (c.d.sp > 1) PTDP_RETURN_IF_ERROR(TpAllReduceSum(c.tp, probs.ref()));
  if (c.cp != nullptr && c.cp->size() > 1) {
    PTDP_RETURN_IF_ERROR(c.cp->AllReduceSum(probs.data(), count, t));
  }
  std::vector<double> p(static_cast<size_t>(count)), n(p.size());
  std::vector<float> p32(p.size()), n32(p.size());
  c.dev->Copy(fp64 ? static_cast<void*>(p.data()) : p32.data(), probs.data(), probs.bytes());
  c.dev->Copy(fp64 ? static_cast<void*>(n.data()) : n32.data(), counts.data(), counts.bytes());
  double value = 0;
  for (size_t e = 0; e < p.size(); ++e) {
    value += fp64 ? p[e] * n[e] : double(p32[e]) * double(n32[e]);
  }
  if (c.moe_aux_sum != nullptr) *c.moe_aux_sum += c.moe_aux_value_scale * value;
  return Status::Ok();
}

// fc2's input, p act(fc1 out), into the stash (tagged `tag`). The forward runs it, and the
// backward again under recompute_modules moe_act or moe (tagged activations: the ledger's working
// set of the backward, core/experts.h).
Status ExpertActForward(const LayerCtx& c, const ExpertSide& x, MemTag tag, LayerStash* st) {
  Ops* ops = c.dev->ops();
  const int64_t rows = x.rows, f = c.d.expert_f_local;
  PTDP_ASSIGN_OR_RETURN(st->gelu_out, Alloc(c, rows * f, c.types.act, tag));
  PTDP_RETURN_IF_ERROR(ops->SwigluForward(st->gelu_out.ref(), st->fc1_out.cref(), rows * f));
  return ops->MoeScaleRows(st->gelu_out.ref(), st->gelu_out.cref(), x.probs, x.slot, rows, f);
}

bool RedoesExpertAct(const LayerCtx& c) {
  return c.redo_moe_act || c.redo_moe_block;
}

// The router on this rank's rows into the stash (tagged `tag`): its logits kept wide and its
// top-k probabilities; returns the chosen experts (i32 [R][k]). The forward runs it, and the
// backward again under recompute_modules moe.
Result<Tensor> RouterForward(const LayerCtx& c, const LayerWeights& w, MemTag tag, LayerStash* st) {
  Ops* ops = c.dev->ops();
  const int64_t R = c.d.R(), h = c.d.h, experts = c.arch.moe_experts, k = c.arch.moe_topk;
  {
    PTDP_ASSIGN_OR_RETURN(Tensor logits, Tmp(c, R * experts, c.types.act));
    PTDP_RETURN_IF_ERROR(
        ops->LinearForward(logits.ref(), {}, st->ln2_out.cref(), w.router_w, {}, R, h, experts));
    PTDP_ASSIGN_OR_RETURN(st->router_logits, Alloc(c, R * experts, c.types.wide, tag));
    PTDP_RETURN_IF_ERROR(ops->Cast(st->router_logits.ref(), logits.cref()));
  }
  PTDP_ASSIGN_OR_RETURN(st->router_probs, Alloc(c, R * k, c.types.wide, tag));
  return Choose(c, w, st->router_logits.cref(), st->router_probs.ref());
}

// The dispatch and fc1 into the stash (tagged `tag`): the token copies in their experts' order
// (with ep > 1: sent to their experts' ranks), fc1's input, and fc1's output. The forward runs
// it, and the backward again under recompute_modules moe.
Status DispatchAndFc1(const LayerCtx& c, const LayerWeights& w, const MoeRoute& r,
                      const ExpertSide& x, MemTag tag, LayerStash* st) {
  const int64_t h = c.d.h, f = c.d.expert_f_local, copies = r.copies();
  {
    const MemTag local_tag = x.exchanged() ? MemTag::kWorkspace : tag;
    PTDP_ASSIGN_OR_RETURN(Tensor copied, Alloc(c, copies * h, c.types.act, local_tag));
    PTDP_ASSIGN_OR_RETURN(const FullRows ln2, GatherRows(c, st->ln2_out.cref()));
    PTDP_RETURN_IF_ERROR(
        c.dev->ops()->MoePermuteRows(copied.ref(), ln2.ref, r.token.cref(), copies, h));
    PTDP_ASSIGN_OR_RETURN(st->moe_in, ToExperts(c, x, std::move(copied), h, tag));
  }
  PTDP_ASSIGN_OR_RETURN(st->fc1_out, Alloc(c, x.rows * 2 * f, c.types.act, tag));
  return ExpertsForward(c, x, w.expert_fc1, st->fc1_out.ref(), st->moe_in.cref(), h, 2 * f);
}

// What recompute_modules moe rebuilds of the block (and shared_experts of the shared expert),
// dropped at the end of the forward and again at the end of the backward.
void DropMoeBlock(const LayerCtx& c, LayerStash* st) {
  if (c.redo_moe_block) {
    for (Tensor* t : {&st->router_logits, &st->router_probs, &st->moe_in, &st->fc1_out}) {
      t->Reset();
    }
  }
  if (RedoesSharedExpert(c)) {
    st->shared_fc1_out.Reset();
    st->shared_act.Reset();
  }
}

}  // namespace

Status MoeBlockForward(const LayerCtx& c, const LayerWeights& w, int layer, MemTag tag,
                       LayerStash* st, const LayerOutput& out, TensorRef y) {
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const int64_t N = d.N(), R = d.R(), h = d.h, f = d.expert_f_local;
  const DType a = c.types.act;
  PTDP_RETURN_IF_ERROR(NormForward(c, tag, st->x2.cref(), w.ln2_w, w.ln2_b,
                                   {&st->ln2_mean, &st->ln2_rstd, &st->ln2_out}));
  PTDP_ASSIGN_OR_RETURN(Tensor index, RouterForward(c, w, tag, st));
  PTDP_ASSIGN_OR_RETURN(const MoeRoute r, Route(c, index.cref(), st->router_probs.cref()));
  index.Reset();
  PTDP_ASSIGN_OR_RETURN(const ExpertSide x, ExpertSideOf(c, r));
  const int64_t rows = x.rows, copies = r.copies();
  // The experts, on the token copies in their order (with ep > 1: sent to their experts' ranks).
  PTDP_RETURN_IF_ERROR(DispatchAndFc1(c, w, r, x, tag, st));
  PTDP_RETURN_IF_ERROR(ExpertActForward(c, x, tag, st));
  PTDP_ASSIGN_OR_RETURN(Tensor expert_out, Tmp(c, rows * h, a));
  PTDP_RETURN_IF_ERROR(
      ExpertsForward(c, x, w.expert_fc2, expert_out.ref(), st->gelu_out.cref(), f, h));
  if (RedoesExpertAct(c)) st->gelu_out.Reset();  // rebuilt by the backward (ExpertActForward)
  PTDP_ASSIGN_OR_RETURN(expert_out, FromExperts(c, x, std::move(expert_out), copies, h));
  // The copies back into their tokens (partial sums over the tensor group), then g.
  PTDP_ASSIGN_OR_RETURN(Tensor mlp, Tmp(c, N * h, a));
  PTDP_RETURN_IF_ERROR(ops->Fill(mlp.ref(), 0.0));
  PTDP_RETURN_IF_ERROR(
      ops->MoeUnpermuteAddRows(mlp.ref(), expert_out.cref(), r.token.cref(), copies, h));
  expert_out.Reset();
  if (!w.shared_fc1.empty()) PTDP_RETURN_IF_ERROR(SharedForward(c, w, tag, st, mlp.ref()));
  DropMoeBlock(c, st);                       // rebuilt by the backward
  if (c.redo_moe_norm) st->ln2_out.Reset();  // rebuilt by the backward (NormRedoOutput)
  PTDP_ASSIGN_OR_RETURN(mlp, SumRows(c, std::move(mlp)));
  if (y.empty()) {
    PTDP_ASSIGN_OR_RETURN(y, out());
  }
  PTDP_ASSIGN_OR_RETURN(st->mlp_res_mask, Alloc(c, c.drop.p > 0 ? R * h : 0, DType::kU8, tag));
  return ops->BiasDropoutResidual(y, st->mlp_res_mask.ref(), mlp.cref(), {}, st->x2.cref(), R, h,
                                  HiddenDropout(c, Site(layer, "mlp_residual")));
}

Status MoeBlockBackward(const LayerCtx& c, const LayerWeights& w, const LayerGrads& g,
                        LayerStash* st, ConstRef dy, Tensor* dx2) {
  if (c.defer_weight_grads != nullptr) {
    return Status::Internal("a mixture of experts in a split backward");
  }
  Ops* ops = c.dev->ops();
  const LayerDims& d = c.d;
  const int64_t N = d.N(), R = d.R(), h = d.h, f = d.expert_f_local;
  const int64_t experts = c.arch.moe_experts, k = c.arch.moe_topk;
  const DType a = c.types.act, wide = c.types.wide;
  if (c.redo_moe_norm) {  // the router's and the shared expert's input again
    PTDP_RETURN_IF_ERROR(NormRedoOutput(c, MemTag::kActivations, st->x2.cref(), w.ln2_w, w.ln2_b,
                                        {&st->ln2_mean, &st->ln2_rstd, &st->ln2_out}));
  }
  PTDP_ASSIGN_OR_RETURN(Tensor dbranch, Tmp(c, R * h, a));
  PTDP_RETURN_IF_ERROR(
      ops->DropoutBackward(dbranch.ref(), {}, dy, st->mlp_res_mask.cref(), R, h, c.drop.p));
  PTDP_ASSIGN_OR_RETURN(FullRows dfull, GatherRows(c, dbranch.cref()));
  if (c.redo_moe_block) {  // the router's logits and probabilities again
    PTDP_ASSIGN_OR_RETURN(const Tensor chosen, RouterForward(c, w, MemTag::kActivations, st));
  }
  // The forward's route again, from the stashed logits.
  PTDP_ASSIGN_OR_RETURN(Tensor probs_again, Tmp(c, R * k, wide));
  PTDP_ASSIGN_OR_RETURN(Tensor index, Choose(c, w, st->router_logits.cref(), probs_again.ref()));
  PTDP_ASSIGN_OR_RETURN(const MoeRoute r, Route(c, index.cref(), st->router_probs.cref()));
  if (c.moe_routed_copies != nullptr) {  // once a microbatch, as the expert bias's counts
    *c.moe_routed_copies += double(N * k);
    *c.moe_dropped_copies += double(N * k - (r.copies() - r.padding));
  }
  // The expert bias's counts: the microbatch's tokens per expert, once (the backward runs once per
  // microbatch, the forward twice under recomputation).
  if (w.expert_tokens != nullptr) {
    for (int64_t e = 0; e < experts; ++e) {
      w.expert_tokens[e] += r.offsets[size_t(e + 1)] - r.offsets[size_t(e)];
    }
  }
  PTDP_ASSIGN_OR_RETURN(const ExpertSide x, ExpertSideOf(c, r));
  const int64_t rows = x.rows, copies = r.copies();
  // A shared expert's backward first, while the gathered gradient lives: its input gradient
  // starts dln.
  if (c.redo_moe_block) {  // the dispatch (its all-to-all with ep > 1) and fc1 again
    PTDP_RETURN_IF_ERROR(DispatchAndFc1(c, w, r, x, MemTag::kActivations, st));
  }
  Tensor dln;
  if (!w.shared_fc1.empty()) {
    if (RedoesSharedExpert(c)) {
      PTDP_RETURN_IF_ERROR(SharedInsideForward(c, w, MemTag::kActivations, st, nullptr));
    }
    PTDP_ASSIGN_OR_RETURN(dln, Tmp(c, N * h, a));
    PTDP_RETURN_IF_ERROR(ops->Fill(dln.ref(), 0.0));
    PTDP_RETURN_IF_ERROR(SharedBackward(c, w, g, st, dfull.ref, dln.ref()));
  }
  // The combine's backward: each copy gets its token's gradient (sent to its expert's rank with
  // ep > 1); fc2's backward.
  PTDP_ASSIGN_OR_RETURN(Tensor dout, Tmp(c, copies * h, a));
  PTDP_RETURN_IF_ERROR(ops->MoePermuteRows(dout.ref(), dfull.ref, r.token.cref(), copies, h));
  dfull = {};
  dbranch.Reset();
  PTDP_ASSIGN_OR_RETURN(dout, ToExperts(c, x, std::move(dout), h, MemTag::kWorkspace));
  PTDP_ASSIGN_OR_RETURN(Tensor dact, Tmp(c, rows * f, a));
  if (RedoesExpertAct(c)) {
    PTDP_RETURN_IF_ERROR(ExpertActForward(c, x, MemTag::kActivations, st));
  }
  PTDP_RETURN_IF_ERROR(ExpertsBackward(c, x, w.expert_fc2, g.expert_fc2, dact.ref(), dout.cref(),
                                       st->gelu_out.cref(), f, h));
  if (RedoesExpertAct(c)) st->gelu_out.Reset();
  dout.Reset();
  // The probabilities' gradient, <d(act p), act> summed over the tensor group (each rank holds
  // f/t of the features), then the activation's, p d(act p).
  PTDP_ASSIGN_OR_RETURN(Tensor dprobs, Tmp(c, r.slots, wide));  // the padding's slot ignored
  {
    PTDP_ASSIGN_OR_RETURN(Tensor act, Tmp(c, rows * f, a));
    PTDP_RETURN_IF_ERROR(ops->SwigluForward(act.ref(), st->fc1_out.cref(), rows * f));
    if (!x.exchanged()) {
      PTDP_RETURN_IF_ERROR(ops->Fill(dprobs.ref(), 0.0));
      PTDP_RETURN_IF_ERROR(ops->MoeRowDots(dprobs.ref(), dact.cref(), act.cref(), x.slot, rows, f));
    } else {
      PTDP_ASSIGN_OR_RETURN(Tensor drow, Tmp(c, rows, wide));
      PTDP_RETURN_IF_ERROR(ops->Fill(drow.ref(), 0.0));
      PTDP_RETURN_IF_ERROR(ops->MoeRowDots(drow.ref(), dact.cref(), act.cref(), x.slot, rows, f));
      // Back to the route's copies, then into their slots (each slot has one copy).
      PTDP_ASSIGN_OR_RETURN(drow, FromExperts(c, x, std::move(drow), copies, 1));
      PTDP_RETURN_IF_ERROR(ops->Fill(dprobs.ref(), 0.0));
      PTDP_RETURN_IF_ERROR(
          ops->MoeUnpermuteAddRows(dprobs.ref(), drow.cref(), r.slot.cref(), copies, 1));
    }
  }
  PTDP_RETURN_IF_ERROR(TpAllReduceSum(c.tp, dprobs.ref()));
  PTDP_RETURN_IF_ERROR(ops->MoeScaleRows(dact.ref(), dact.cref(), x.probs, x.slot, rows, f));
  PTDP_ASSIGN_OR_RETURN(Tensor dfc1, Tmp(c, rows * 2 * f, a));
  PTDP_RETURN_IF_ERROR(ops->SwigluBackward(dfc1.ref(), st->fc1_out.cref(), dact.cref(), rows * f));
  dact.Reset();
  PTDP_ASSIGN_OR_RETURN(Tensor din, Tmp(c, rows * h, a));
  PTDP_RETURN_IF_ERROR(ExpertsBackward(c, x, w.expert_fc1, g.expert_fc1, din.ref(), dfc1.cref(),
                                       st->moe_in.cref(), h, 2 * f));
  dfc1.Reset();
  PTDP_ASSIGN_OR_RETURN(din, FromExperts(c, x, std::move(din), copies, h));
  // The dispatch's backward (partial sums over the tensor group), then f's backward.
  if (dln.empty()) {
    PTDP_ASSIGN_OR_RETURN(dln, Tmp(c, N * h, a));
    PTDP_RETURN_IF_ERROR(ops->Fill(dln.ref(), 0.0));
  }
  PTDP_RETURN_IF_ERROR(ops->MoeUnpermuteAddRows(dln.ref(), din.cref(), r.token.cref(), copies, h));
  din.Reset();
  PTDP_ASSIGN_OR_RETURN(dln, SumRows(c, std::move(dln)));
  // The router's backward on this rank's rows (its part of the probabilities' gradient).
  {
    PTDP_ASSIGN_OR_RETURN(Tensor dlogits, Tmp(c, R * experts, wide));
    PTDP_RETURN_IF_ERROR(ops->MoeRouterTopKBackward(
        dlogits.ref(), Rows(dprobs.cref(), d.sp_rank * R, R, k), st->router_probs.cref(),
        index.cref(), st->router_logits.cref(), R, RoutingOf(c.arch, w)));
    if (c.moe_aux_grad != 0) PTDP_RETURN_IF_ERROR(AuxLossBackward(c, r, st, dlogits.ref()));
    if (c.moe_z_grad != 0) {  // the z-loss on this rank's rows (their share of the microbatch's)
      PTDP_ASSIGN_OR_RETURN(Tensor sum_sq, Tmp(c, 1, wide));
      PTDP_RETURN_IF_ERROR(ops->MoeZLossBackward(
          dlogits.ref(), sum_sq.ref(), st->router_logits.cref(), c.moe_z_grad, R, experts));
      if (c.moe_z_sum != nullptr) {
        double z = 0;
        float z32 = 0;
        const bool fp64 = wide == DType::kFp64;
        c.dev->Copy(fp64 ? static_cast<void*>(&z) : &z32, sum_sq.data(), sum_sq.bytes());
        *c.moe_z_sum += c.moe_z_value_scale * (fp64 ? z : double(z32));
      }
    }
    PTDP_ASSIGN_OR_RETURN(Tensor dlogits_act, Tmp(c, R * experts, a));
    PTDP_RETURN_IF_ERROR(ops->Cast(dlogits_act.ref(), dlogits.cref()));
    PTDP_ASSIGN_OR_RETURN(Tensor drouter, Tmp(c, R * h, a));
    PTDP_RETURN_IF_ERROR(
        ops->LinearBackwardData(drouter.ref(), dlogits_act.cref(), w.router_w, R, h, experts));
    PTDP_RETURN_IF_ERROR(ops->LinearBackwardWeight(g.router_w, {}, dlogits_act.cref(),
                                                   st->ln2_out.cref(), R, h, experts));
    PTDP_RETURN_IF_ERROR(ops->Add(dln.ref(), dln.cref(), drouter.cref()));
  }
  PTDP_ASSIGN_OR_RETURN(*dx2, Tmp(c, R * h, a));
  PTDP_RETURN_IF_ERROR(NormBackward(c, dx2->ref(), g.ln2_w, g.ln2_b, dln.cref(), st->x2.cref(),
                                    w.ln2_w, st->ln2_mean.cref(), st->ln2_rstd.cref()));
  // Dropped again before the attention side rebuilds its own (core/shapes.h: one side at a time).
  DropMoeBlock(c, st);
  if (c.redo_moe_norm) st->ln2_out.Reset();
  return ops->Add(dx2->ref(), dx2->cref(), dy);  // the residual path
}

}  // namespace ptdp::runtime
