// The multi-token prediction depths on the head's stage (runtime/model/mtp.h): their weights by
// core/shapes.h's names, their inputs and targets, and their place in the microbatch's forward
// (after the head) and backward (before it: each depth's gradient of the hidden state it read
// joins the gradient of the head before it).
#include "core/shapes.h"
#include "runtime/executor/trainer.h"
#include "runtime/executor/trainer_state.h"
#include "runtime/model/wiring.h"

namespace ptdp::runtime {

void Trainer::WirePredictionDepths(int chunk) {
  mtp_weights_.clear();
  mtp_grads_.clear();
  // The word embedding: the first stage's own (one pipeline stage), else its tied copy (the output
  // matrix's, when the model ties the two).
  int wte = params_->Find(chunk, "mtp.embedding_copy");
  if (wte < 0) wte = params_->Find(chunk, "output.word_copy");
  if (wte < 0) wte = params_->Find(0, "embedding.word");
  PTDP_CHECK_MSG(wte >= 0, "the head's stage holds no word embedding for its prediction depths");
  const int out = OutputIndex(chunk);
  for (int d = 0; d < model_.mtp_layers; ++d) {
    const std::string p = "mtp" + std::to_string(d) + ".";
    const int layer = model_.layers + d;
    auto at = [&](const std::string& name) { return params_->Find(chunk, p + name); };
    MtpWeights w{params_->weight(at("enorm.weight")),
                 params_->weight(at("enorm.bias")),
                 params_->weight(at("hnorm.weight")),
                 params_->weight(at("hnorm.bias")),
                 params_->weight(at("eh_proj.weight")),
                 LayerWeightsOf(*params_, chunk, p),
                 {params_->weight(at("final_norm.weight")), params_->weight(at("final_norm.bias")),
                  params_->weight(out)},
                 params_->weight(wte)};
    w.layer.expert_bias = router_biases_.bias(layer);
    w.layer.expert_tokens = router_biases_.tokens(layer);
    mtp_weights_.push_back(std::move(w));
    mtp_grads_.push_back({params_->grad(at("enorm.weight")),
                          params_->grad(at("enorm.bias")),
                          params_->grad(at("hnorm.weight")),
                          params_->grad(at("hnorm.bias")),
                          params_->grad(at("eh_proj.weight")),
                          LayerGradsOf(*params_, chunk, p),
                          {params_->grad(at("final_norm.weight")),
                           params_->grad(at("final_norm.bias")), params_->grad(out)},
                          params_->grad(wte)});
  }
}

Status Trainer::ForwardPredictionDepths(MbState& st, const LayerCtx& c, int mb, int64_t step) {
  const bool recompute = cfg_.recompute == Recompute::kFull;
  st.mtp.resize(mtp_weights_.size());
  for (size_t d = 0; d < st.mtp.size(); ++d) {
    MtpStash& depth = st.mtp[d];
    const int shift = static_cast<int>(d) + 1;
    PTDP_RETURN_IF_ERROR(UploadTokens(mb, step, /*inputs=*/true, &depth.embedding.tokens, shift));
    PTDP_RETURN_IF_ERROR(UploadTokens(mb, step, /*inputs=*/false, &depth.head.targets, shift));
    const ConstRef hidden = d == 0 ? st.head.ln_out.cref() : st.mtp[d - 1].head.ln_out.cref();
    PTDP_RETURN_IF_ERROR(MtpForward(c, mtp_weights_[d], model_.layers + int(d), recompute, &depth,
                                    hidden, mtp_loss_sum_.slice(int64_t(d), 1)));
  }
  return Status::Ok();
}

// Depth by depth from the last. Depth k's tokens with a target are b (s - k) of the microbatch,
// so each weighs mtp_loss_scale / mtp_layers / (B (s - k)) in the objective (Megatron-Core's
// MTPLossAutoScaler: the depth's mean over its positions with a target, over the microbatches).
Status Trainer::BackwardPredictionDepths(MbState& st, const LayerCtx& c, Tensor* d_head_out) {
  const bool recompute = cfg_.recompute == Recompute::kFull;
  Tensor d_out;  // the gradient of the depth's ln_out, from the depth after it
  for (int d = static_cast<int>(st.mtp.size()) - 1; d >= 0; --d) {
    const double positions = double(cfg_.global_batch) * double(model_.seq_len - (d + 1));
    const double dloss = scaler_->scale() * opts_.mtp_loss_scale / model_.mtp_layers / positions;
    const ConstRef hidden = d == 0 ? st.head.ln_out.cref() : st.mtp[d - 1].head.ln_out.cref();
    Tensor dhidden;
    PTDP_RETURN_IF_ERROR(MtpBackward(c, mtp_weights_[d], mtp_grads_[d], model_.layers + d,
                                     recompute, dloss, &st.mtp[d], hidden, d_out.cref(), &dhidden));
    d_out = std::move(dhidden);
  }
  st.mtp.clear();
  *d_head_out = std::move(d_out);
  return Status::Ok();
}

}  // namespace ptdp::runtime
