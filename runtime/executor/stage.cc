// The model wiring of one pipeline rank: which layers a chunk runs, their weights and gradients,
// the per-(microbatch, chunk) stash, and the token upload. Memory follows core/ledger.h's order:
// the forward makes the chunk's whole stash live (embedding, layers, head); the backward frees the
// head's stash first, then layer by layer (rebuilding a layer's working set first under
// recomputation) and the embedding's last.
#include "core/shapes.h"
#include "kernels/reference/context_chunks.h"
#include "runtime/executor/trainer.h"
#include "runtime/executor/trainer_state.h"
#include "runtime/model/wiring.h"

namespace ptdp::runtime {

LayerCtx Trainer::Ctx(int mb, int64_t step) {
  LayerCtx c;
  c.dev = dev_.get();
  c.tp = tp_.get();
  c.cp = cp_.get();
  c.ep = ep_.get();
  c.d = dims_;
  c.arch = ArchOf(model_);
  c.types = types_;
  c.drop.p = evaluating_ != nullptr ? 0.0 : model_.dropout;  // eval mode: no dropout
  c.fused_attention = cfg_.fused_attention;
  c.redo_attention_core = cfg_.Recomputes(kRecomputeCoreAttn);
  c.redo_mlp = cfg_.Recomputes(kRecomputeMlp);
  c.redo_mla_up_proj = cfg_.Recomputes(kRecomputeMlaUpProj);
  c.redo_moe_act = cfg_.Recomputes(kRecomputeMoeAct);
  c.redo_moe_norm = cfg_.Recomputes(kRecomputeLayernorm);
  c.redo_moe_block = cfg_.Recomputes(kRecomputeMoe);
  c.redo_shared_expert = cfg_.Recomputes(kRecomputeSharedExperts);
  if (model_.IsMla()) c.mla_indices = &mla_indices_;
  c.drop.step = step;
  c.drop.seq0 = int64_t(DataRank()) * (cfg_.global_batch / cfg_.dp) + int64_t(mb) * cfg_.mbs;
  // The auxiliary loss of each mixture layer and microbatch, coeff E / (T^2 k) sum_e P_e c_e over
  // the microbatch's T tokens, weighs mbs / B in the objective, as a microbatch's mean token loss
  // does (Megatron-Core's MoEAuxLossAutoScaler: the loss scale over the microbatch count). The
  // value reported leaves coeff out, as Megatron-Core logs aux_loss / coeff.
  const double weight = scaler_->scale() * double(cfg_.mbs) / double(cfg_.global_batch);
  // With seq_aux_loss each of the mbs sequences' S tokens, the mean over them: E / (S^2 k mbs).
  if (opts_.moe_aux_loss_coeff > 0 && evaluating_ == nullptr && model_.IsMoe()) {
    const double s = double(model_.seq_len), b = double(cfg_.mbs);
    c.moe_aux_per_sequence = opts_.MoeAuxPerSequence();
    c.moe_aux_value_scale =
        model_.moe_experts / (s * s * model_.moe_topk * (c.moe_aux_per_sequence ? b : b * b));
    c.moe_aux_grad = weight * opts_.moe_aux_loss_coeff * c.moe_aux_value_scale;
    // Each tensor and context group computes the value once per layer and microbatch.
    if (coord_.tp == 0 && ContextRank() == 0) c.moe_aux_sum = &moe_aux_sum_;
  }
  // Token dropping's share: each group of routed tokens (a context rank's rows of a data rank's
  // sequences, the same on every tensor rank) counted once.
  if (model_.DropsTokens() && evaluating_ == nullptr && coord_.tp == 0) {
    c.moe_routed_copies = &moe_routed_copies_;
    c.moe_dropped_copies = &moe_dropped_copies_;
  }
  // The router's z-loss of each mixture layer and microbatch, coeff / T sum_t lse_t^2 over its T
  // tokens (Megatron-Core's z_loss_func: coeff / (t cp) times the mean over a rank's rows), weighed
  // as the auxiliary loss and reported without coeff. Every rank computes it on its own rows: the
  // tensor ranks' rows differ under sequence parallelism (and are all of them, alike, without),
  // the context ranks' always.
  if (opts_.moe_z_loss_coeff > 0 && evaluating_ == nullptr && model_.IsMoe()) {
    c.moe_z_value_scale = 1.0 / (double(cfg_.mbs) * double(model_.seq_len));
    c.moe_z_grad = weight * opts_.moe_z_loss_coeff * c.moe_z_value_scale;
    if (cfg_.sequence_parallel || coord_.tp == 0) c.moe_z_sum = &moe_z_sum_;
  }
  return c;
}

// The microbatch's inputs (or targets) read on the host and uploaded into a device tensor tagged
// as the stash lists it (embedding.tokens, output.targets): under context parallelism, this
// rank's positions of each sequence (kernels/reference/context_chunks.h).
Status Trainer::UploadTokens(int mb, int64_t step, bool inputs, Tensor* out, int shift) {
  const int64_t s = model_.seq_len, b = cfg_.mbs;
  const int64_t seq0 = Ctx(mb, step).drop.seq0;
  TokenSet& data = evaluating_ != nullptr ? *evaluating_ : *data_;
  const kernels::ContextChunks chunks{s, cfg_.cp, ContextRank()};
  const int64_t local = chunks.Local();
  std::vector<int32_t> seq(static_cast<size_t>(s + 1)), host(static_cast<size_t>(b * local));
  for (int64_t i = 0; i < b; ++i) {
    PTDP_RETURN_IF_ERROR(data.ReadSequence(opts_.data_seed, step, seq0 + i, s, seq.data()));
    for (int64_t t = 0; t < local; ++t) {
      // Position p's input is token p + shift, its target p + shift + 1 (of the s + 1 read); an
      // input past the s inputs is 0 and a target past them none, as Megatron-Core's roll_tensor
      // fills and masks them.
      const int64_t p = chunks.Position(t) + shift;
      int32_t token = inputs ? 0 : -1;
      if (p < s) token = seq[static_cast<size_t>(inputs ? p : p + 1)];
      host[static_cast<size_t>(i * local + t)] = token;
    }
  }
  PTDP_ASSIGN_OR_RETURN(*out,
                        Tensor::Make(dev_.get(), b * local, DType::kI32, MemTag::kActivations));
  dev_->Upload(out->data(), host.data(), out->bytes());
  return Status::Ok();
}

int Trainer::OutputIndex(int chunk) const {
  for (const char* n : {"output.weight", "output.word_copy", "embedding.word"}) {
    const int i = params_->Find(chunk, n);
    if (i >= 0) return i;
  }
  // In a V the head shares rank 0 with the embedding (chunk 0), whose matrix it multiplies by.
  if (const int i = params_->Find(0, "embedding.word"); i >= 0) return i;
  PTDP_CHECK_MSG(false, "the last chunk holds no output matrix");
  return -1;
}

HeadWeights Trainer::HeadW(int chunk) const {
  return {params_->weight(params_->Find(chunk, "final_ln.weight")),
          params_->weight(params_->Find(chunk, "final_ln.bias")),
          params_->weight(OutputIndex(chunk))};
}

// The local chunk holding virtual stage `stage`, or -1 when another rank holds it (or there is
// no such stage): the other side of the turn of a V (schedule::LocalBoundary).
int Trainer::LocalChunkOfStage(int stage) const {
  if (stage < 0 || stage >= cfg_.VirtualStages()) return -1;
  const StageHolder h = HolderOfStage(cfg_.schedule, cfg_.pp, stage);
  return h.pp_rank == coord_.pp ? h.chunk : -1;
}

// The chunk's layers, each writing the next one's input (or the head's input, or the outgoing
// message). Under full recomputation (and in evaluation) a layer's stash is transient (workspace)
// and dropped at once.
Status Trainer::ForwardLayers(MbState& st, int chunk, const LayerCtx& c, bool last) {
  const int nl = static_cast<int>(chunk_layers_[chunk].size());
  const int64_t nh = dims_.R() * dims_.h;
  const bool recompute = cfg_.recompute == Recompute::kFull || evaluating_ != nullptr;
  for (int li = 0; li < nl; ++li) {
    const LayerOutput y = [&, li]() -> Result<TensorRef> {
      if (li + 1 < nl) {
        PTDP_RETURN_IF_ERROR(AllocLayerInput(c, &st.layers[li + 1]));
        return st.layers[li + 1].x.ref();
      }
      Tensor* out = last ? &st.head.x : &st.out;
      PTDP_ASSIGN_OR_RETURN(*out, Tensor::Make(dev_.get(), nh, types_.act,
                                               last ? MemTag::kActivations : MemTag::kWorkspace));
      return out->ref();
    };
    const MemTag tag = recompute ? MemTag::kWorkspace : MemTag::kActivations;
    PTDP_RETURN_IF_ERROR(
        LayerForward(c, weights_[chunk][li], chunk_layers_[chunk][li], tag, &st.layers[li], y));
    if (recompute) DropLayerActivations(&st.layers[li]);  // keep only the layer's input
  }
  return Status::Ok();
}

Status Trainer::Forward(int mb, int chunk, int64_t step) {
  PTDP_RETURN_IF_ERROR(WaitForWeights(chunk));  // the last update's gather (overlap_param_gather)
  MbState* st = NewState(mb, chunk);
  const int vs = VirtualStage(cfg_, coord_.pp, chunk);
  const bool first = vs == 0, last = vs == cfg_.VirtualStages() - 1;
  const LayerCtx c = Ctx(mb, step);
  if (first) {
    PTDP_RETURN_IF_ERROR(UploadTokens(mb, step, /*inputs=*/true, &st->embedding.tokens));
    PTDP_RETURN_IF_ERROR(AllocLayerInput(c, &st->layers[0]));
    const int wte = params_->Find(0, "embedding.word"),
              wpe = params_->Find(0, "embedding.position");
    PTDP_RETURN_IF_ERROR(EmbeddingForwardTp(c, params_->weight(wte), params_->weight(wpe),
                                            &st->embedding, st->layers[0].x.ref()));
  } else if (const int below = LocalChunkOfStage(vs - 1); below >= 0) {
    // The turn of a V: the previous stage's output on this rank is the input, no message.
    MbState* from = FindState(mb, below);
    if (from == nullptr || from->out.empty()) {
      return Status::Internal("forward of (" + std::to_string(mb) + ", " + std::to_string(chunk) +
                              ") before the forward of its local previous stage");
    }
    PTDP_RETURN_IF_ERROR(AllocLayerInput(c, &st->layers[0]));
    dev_->Copy(st->layers[0].x.data(), from->out.data(), from->out.bytes());
    from->out.Reset();
  } else if (st->layers[0].x.empty()) {
    return Status::Internal("forward of (" + std::to_string(mb) + ", " + std::to_string(chunk) +
                            ") before its input arrived");
  }
  PTDP_RETURN_IF_ERROR(ForwardLayers(*st, chunk, c, last));
  if (last) {
    PTDP_RETURN_IF_ERROR(UploadTokens(mb, step, /*inputs=*/false, &st->head.targets));
    PTDP_RETURN_IF_ERROR(HeadForward(c, HeadW(chunk), &st->head, loss_sum_.ref()));
    if (!mtp_weights_.empty() && evaluating_ == nullptr) {
      PTDP_RETURN_IF_ERROR(ForwardPredictionDepths(*st, c, mb, step));
    }
  }
  Record(Op::kForward, *st);
  return Status::Ok();
}

// Layer by layer from the last: rebuild (recompute), backward, free the layer's stash, and tell the
// gradient reduction the layer's gradients are written (grad_reduce.cc: in the chunk's last
// backward of the step, its buckets start).
Status Trainer::BackwardLayers(MbState& st, int chunk, const LayerCtx& c, bool recompute,
                               Tensor* dy) {
  const int64_t nh = dims_.R() * dims_.h;
  for (int li = static_cast<int>(chunk_layers_[chunk].size()) - 1; li >= 0; --li) {
    const int layer = chunk_layers_[chunk][li];
    // The Program's recomputing backward: the whole layer under full recomputation; under
    // selective, the attention core inside LayerBackward (LayerCtx::redo_attention_core).
    if (recompute && cfg_.recompute == Recompute::kFull) {
      PTDP_ASSIGN_OR_RETURN(Tensor y, Tensor::Make(dev_.get(), nh, types_.act, MemTag::kWorkspace));
      PTDP_RETURN_IF_ERROR(LayerForward(c, weights_[chunk][li], layer, MemTag::kActivations,
                                        &st.layers[li], y.ref()));
    }
    PTDP_ASSIGN_OR_RETURN(Tensor dx, Tensor::Make(dev_.get(), nh, types_.act, MemTag::kWorkspace));
    PTDP_RETURN_IF_ERROR(LayerBackward(c, weights_[chunk][li], grads_[chunk][li], layer,
                                       &st.layers[li], dy->cref(), dx.ref()));
    st.layers[li].x.Reset();
    *dy = std::move(dx);
    // The input half of a split backward defers the weight gradients: nothing final yet.
    if (c.defer_weight_grads == nullptr) {
      PTDP_RETURN_IF_ERROR(ChunkGradsFinalFrom(chunk, "layer" + std::to_string(layer) + "."));
    }
  }
  return Status::Ok();
}

Status Trainer::Backward(int mb, int chunk, bool recompute, int64_t step, bool split) {
  MbState* st = FindState(mb, chunk);
  if (st == nullptr) {
    return Status::Internal("backward of (" + std::to_string(mb) + ", " + std::to_string(chunk) +
                            ") without its forward");
  }
  const int vs = VirtualStage(cfg_, coord_.pp, chunk);
  const bool first = vs == 0, last = vs == cfg_.VirtualStages() - 1;
  LayerCtx c = Ctx(mb, step);
  if (split) {
    if (st->weight_half_pending) return Status::Internal("a second backward_input");
    c.defer_weight_grads = &st->weight_grads;
    st->weight_half_pending = true;
  }
  Tensor dy;
  if (last) {
    Tensor d_head_out;  // the prediction depths' gradient of the head's ln_out (first: no dy yet)
    if (!st->mtp.empty()) PTDP_RETURN_IF_ERROR(BackwardPredictionDepths(*st, c, &d_head_out));
    PTDP_ASSIGN_OR_RETURN(
        dy, Tensor::Make(dev_.get(), dims_.R() * dims_.h, types_.act, MemTag::kWorkspace));
    const int lw = params_->Find(chunk, "final_ln.weight"),
              lb = params_->Find(chunk, "final_ln.bias"), wo = OutputIndex(chunk);
    // Each token's loss gradient, times the loss scale (fp16; 1 otherwise).
    const double dloss = scaler_->scale() / (double(cfg_.global_batch) * double(model_.seq_len));
    const HeadGrads g{params_->grad(lw), params_->grad(lb), params_->grad(wo)};
    PTDP_RETURN_IF_ERROR(
        HeadBackward(c, HeadW(chunk), g, dloss, &st->head, dy.ref(), d_head_out.cref()));
    if (!split) PTDP_RETURN_IF_ERROR(ChunkGradsFinalFrom(chunk, "final_ln."));
  } else if (const int above = LocalChunkOfStage(vs + 1); above >= 0) {
    // The turn of a V: the next stage's input gradient on this rank, no message.
    MbState* from = FindState(mb, above);
    if (from == nullptr || from->dgrad.empty()) {
      return Status::Internal("backward of (" + std::to_string(mb) + ", " + std::to_string(chunk) +
                              ") before its local next stage's");
    }
    dy = std::move(from->dgrad);
    if (!from->weight_half_pending) live_.erase(Key(mb, above));
  } else {
    if (st->dout.empty()) return Status::Internal("backward before its output gradient arrived");
    dy = std::move(st->dout);
  }
  PTDP_RETURN_IF_ERROR(BackwardLayers(*st, chunk, c, recompute, &dy));
  Record(split ? Op::kBackwardInput : Op::kBackward, *st);
  if (first) {
    const int wte = params_->Find(0, "embedding.word"),
              wpe = params_->Find(0, "embedding.position");
    PTDP_RETURN_IF_ERROR(
        EmbeddingBackwardTp(c, params_->grad(wte), params_->grad(wpe), &st->embedding, dy.cref()));
    if (!split) live_.erase(Key(mb, chunk));
  } else {
    st->dgrad = std::move(dy);  // kSendGrad follows
  }
  return Status::Ok();
}

// The weight half: the queued GEMMs, then the stashes they read. The state goes once its input
// gradient has been sent too (kSendGrad may come after the W).
Status Trainer::BackwardWeight(int mb, int chunk, int64_t step) {
  MbState* st = FindState(mb, chunk);
  if (st == nullptr || !st->weight_half_pending) {
    return Status::Internal("backward_weight of (" + std::to_string(mb) + ", " +
                            std::to_string(chunk) + ") without its backward_input");
  }
  PTDP_RETURN_IF_ERROR(RunWeightGrads(Ctx(mb, step), chunk, &st->weight_grads));
  for (LayerStash& l : st->layers) DropLayerActivations(&l);
  st->head.ln_out.Reset();
  st->weight_half_pending = false;
  Record(Op::kBackwardWeight, *st);
  if (st->dgrad.empty()) live_.erase(Key(mb, chunk));
  return Status::Ok();
}

}  // namespace ptdp::runtime
