#include "runtime/backend/guard_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "runtime/backend/cpu_ops.h"

namespace ptdp::runtime {
namespace {

size_t PageRound(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

// CpuOps with the pages open for each call.
class GuardOps final : public Ops {
 public:
  explicit GuardOps(std::shared_ptr<GuardState> s) : state_(std::move(s)) {}
  const char* name() const override { return "cpu-guard"; }
  Status LayerNormForward(TensorRef out, TensorRef mean, TensorRef rstd, ConstRef x, ConstRef w,
                          ConstRef b, int64_t n, int64_t c, double weight_offset) override {
    GuardWindow open(state_.get());
    return inner_->LayerNormForward(out, mean, rstd, x, w, b, n, c, weight_offset);
  }
  Status LayerNormBackward(TensorRef dx, TensorRef dw, TensorRef db, ConstRef dout, ConstRef x,
                           ConstRef w, ConstRef mean, ConstRef rstd, int64_t n, int64_t c,
                           bool accumulate_dx, double weight_offset) override {
    GuardWindow open(state_.get());
    return inner_->LayerNormBackward(dx, dw, db, dout, x, w, mean, rstd, n, c, accumulate_dx,
                                     weight_offset);
  }
  Status LinearForward(TensorRef out, TensorRef gelu_out, ConstRef x, ConstRef w, ConstRef bias,
                       int64_t n, int64_t c, int64_t oc) override {
    GuardWindow open(state_.get());
    return inner_->LinearForward(out, gelu_out, x, w, bias, n, c, oc);
  }
  Status LinearBackwardData(TensorRef dx, ConstRef dout, ConstRef w, int64_t n, int64_t c,
                            int64_t oc) override {
    GuardWindow open(state_.get());
    return inner_->LinearBackwardData(dx, dout, w, n, c, oc);
  }
  Status LinearBackwardWeight(TensorRef dw, TensorRef dbias, ConstRef dout, ConstRef x, int64_t n,
                              int64_t c, int64_t oc) override {
    GuardWindow open(state_.get());
    return inner_->LinearBackwardWeight(dw, dbias, dout, x, n, c, oc);
  }
  Status GeluBackward(TensorRef dpre, ConstRef pre, ConstRef dgelu, int64_t count) override {
    GuardWindow open(state_.get());
    return inner_->GeluBackward(dpre, pre, dgelu, count);
  }
  bool FusesLinearGeluBackward(DType t) const override {
    return inner_->FusesLinearGeluBackward(t);
  }
  Status LinearBackwardDataGelu(TensorRef dpre, ConstRef dout, ConstRef w, ConstRef pre, int64_t n,
                                int64_t c, int64_t oc) override {
    GuardWindow open(state_.get());
    return inner_->LinearBackwardDataGelu(dpre, dout, w, pre, n, c, oc);
  }
  Status BiasDropoutResidual(TensorRef out, TensorRef mask, ConstRef x, ConstRef bias,
                             ConstRef residual, int64_t n, int64_t c,
                             const DropoutSpec& drop) override {
    GuardWindow open(state_.get());
    return inner_->BiasDropoutResidual(out, mask, x, bias, residual, n, c, drop);
  }
  Status DropoutBackward(TensorRef dx, TensorRef dbias, ConstRef dy, ConstRef mask, int64_t n,
                         int64_t c, double p) override {
    GuardWindow open(state_.get());
    return inner_->DropoutBackward(dx, dbias, dy, mask, n, c, p);
  }
  Status Add(TensorRef out, ConstRef a, ConstRef b) override {
    GuardWindow open(state_.get());
    return inner_->Add(out, a, b);
  }
  Status AttentionForward(TensorRef out, AttentionStash* stash, ConstRef qkv,
                          const AttentionShape& shape, const DropoutSpec& drop) override {
    GuardWindow open(state_.get());
    return inner_->AttentionForward(out, stash, qkv, shape, drop);
  }
  Status AttentionBackward(TensorRef dqkv, ConstRef dout, ConstRef qkv, const AttentionStash& stash,
                           const AttentionShape& shape, double p) override {
    GuardWindow open(state_.get());
    return inner_->AttentionBackward(dqkv, dout, qkv, stash, shape, p);
  }
  Status RmsNormForward(TensorRef out, TensorRef rstd, ConstRef x, ConstRef w, int64_t n, int64_t c,
                        double eps) override {
    GuardWindow open(state_.get());
    return inner_->RmsNormForward(out, rstd, x, w, n, c, eps);
  }
  Status RmsNormBackward(TensorRef dx, TensorRef dw, ConstRef dout, ConstRef x, ConstRef w,
                         ConstRef rstd, int64_t n, int64_t c) override {
    GuardWindow open(state_.get());
    return inner_->RmsNormBackward(dx, dw, dout, x, w, rstd, n, c);
  }
  Status MoeRouterTopK(TensorRef probs, TensorRef index, ConstRef logits, int64_t n,
                       const MoeRouting& routing) override {
    GuardWindow open(state_.get());
    return inner_->MoeRouterTopK(probs, index, logits, n, routing);
  }
  Status MoeRouterTopKBackward(TensorRef dlogits, ConstRef dprobs, ConstRef probs, ConstRef index,
                               ConstRef logits, int64_t n, const MoeRouting& routing) override {
    GuardWindow open(state_.get());
    return inner_->MoeRouterTopKBackward(dlogits, dprobs, probs, index, logits, n, routing);
  }
  Status MoeZLossBackward(TensorRef dlogits, TensorRef sum_sq, ConstRef logits, double scale,
                          int64_t n, int64_t experts) override {
    GuardWindow open(state_.get());
    return inner_->MoeZLossBackward(dlogits, sum_sq, logits, scale, n, experts);
  }
  Status MoeAuxLossBackward(TensorRef dlogits, ConstRef logits, ConstRef counts, double scale,
                            int64_t n, int64_t experts, const MoeAuxGrouping& grouping) override {
    GuardWindow open(state_.get());
    return inner_->MoeAuxLossBackward(dlogits, logits, counts, scale, n, experts, grouping);
  }
  Status MoeRouterProbSums(TensorRef out, ConstRef logits, int64_t n, int64_t experts,
                           const MoeAuxGrouping& grouping) override {
    GuardWindow open(state_.get());
    return inner_->MoeRouterProbSums(out, logits, n, experts, grouping);
  }
  Status MoePermuteRows(TensorRef out, ConstRef x, ConstRef rows, int64_t n,
                        int64_t width) override {
    GuardWindow open(state_.get());
    return inner_->MoePermuteRows(out, x, rows, n, width);
  }
  Status MoeUnpermuteAddRows(TensorRef out, ConstRef y, ConstRef rows, int64_t n,
                             int64_t width) override {
    GuardWindow open(state_.get());
    return inner_->MoeUnpermuteAddRows(out, y, rows, n, width);
  }
  Status MoeScaleRows(TensorRef out, ConstRef in, ConstRef weight, ConstRef slot, int64_t n,
                      int64_t width) override {
    GuardWindow open(state_.get());
    return inner_->MoeScaleRows(out, in, weight, slot, n, width);
  }
  Status MoeRowDots(TensorRef out, ConstRef a, ConstRef b, ConstRef slot, int64_t n,
                    int64_t width) override {
    GuardWindow open(state_.get());
    return inner_->MoeRowDots(out, a, b, slot, n, width);
  }
  Status MoeGateSigmoid(TensorRef gate, ConstRef logit, int64_t n) override {
    GuardWindow open(state_.get());
    return inner_->MoeGateSigmoid(gate, logit, n);
  }
  Status MoeGateSigmoidBackward(TensorRef dlogit, ConstRef gate, ConstRef dgate,
                                int64_t n) override {
    GuardWindow open(state_.get());
    return inner_->MoeGateSigmoidBackward(dlogit, gate, dgate, n);
  }
  Status SwigluForward(TensorRef out, ConstRef in, int64_t count) override {
    GuardWindow open(state_.get());
    return inner_->SwigluForward(out, in, count);
  }
  Status SquaredReluForward(TensorRef out, ConstRef in, int64_t count) override {
    GuardWindow open(state_.get());
    return inner_->SquaredReluForward(out, in, count);
  }
  Status SquaredReluBackward(TensorRef din, ConstRef in, ConstRef dout, int64_t count) override {
    GuardWindow open(state_.get());
    return inner_->SquaredReluBackward(din, in, dout, count);
  }
  Status SwigluBackward(TensorRef din, ConstRef in, ConstRef dout, int64_t count) override {
    GuardWindow open(state_.get());
    return inner_->SwigluBackward(din, in, dout, count);
  }
  Status RotaryEmbedding(TensorRef qkv, const AttentionShape& a, const RopeSpec& rope,
                         bool inverse) override {
    GuardWindow open(state_.get());
    return inner_->RotaryEmbedding(qkv, a, rope, inverse);
  }
  Status QkNormForward(TensorRef qkv, TensorRef qk_in, TensorRef rstd, ConstRef q_w, ConstRef k_w,
                       const AttentionShape& a, double eps) override {
    GuardWindow open(state_.get());
    return inner_->QkNormForward(qkv, qk_in, rstd, q_w, k_w, a, eps);
  }
  Status QkNormBackward(TensorRef dqkv, TensorRef dq_w, TensorRef dk_w, ConstRef qk_in,
                        ConstRef rstd, ConstRef q_w, ConstRef k_w,
                        const AttentionShape& a) override {
    GuardWindow open(state_.get());
    return inner_->QkNormBackward(dqkv, dq_w, dk_w, qk_in, rstd, q_w, k_w, a);
  }
  Status ContextKvPack(TensorRef kv, ConstRef qkv, const AttentionShape& a) override {
    GuardWindow open(state_.get());
    return inner_->ContextKvPack(kv, qkv, a);
  }
  Status ContextKvUnpack(TensorRef dqkv, ConstRef dkv, const AttentionShape& a) override {
    GuardWindow open(state_.get());
    return inner_->ContextKvUnpack(dqkv, dkv, a);
  }
  Status ContextAttentionForward(TensorRef out, TensorRef lse, ConstRef qkv, ConstRef kv_all,
                                 const AttentionShape& a, const DropoutSpec& drop) override {
    GuardWindow open(state_.get());
    return inner_->ContextAttentionForward(out, lse, qkv, kv_all, a, drop);
  }
  Status ContextAttentionBackward(TensorRef dqkv, TensorRef dkv_src, ConstRef dout, ConstRef out,
                                  ConstRef qkv, ConstRef kv_src, ConstRef lse,
                                  const AttentionShape& a, int src,
                                  const DropoutSpec& drop) override {
    GuardWindow open(state_.get());
    return inner_->ContextAttentionBackward(dqkv, dkv_src, dout, out, qkv, kv_src, lse, a, src,
                                            drop);
  }
  Status EmbeddingForward(TensorRef out, ConstRef tokens, ConstRef wte, ConstRef wpe, int64_t b,
                          int64_t s, int64_t c, int64_t vocab_begin, int64_t vocab_end) override {
    GuardWindow open(state_.get());
    return inner_->EmbeddingForward(out, tokens, wte, wpe, b, s, c, vocab_begin, vocab_end);
  }
  Status EmbeddingBackward(TensorRef dwte, TensorRef dwpe, ConstRef dout, ConstRef tokens,
                           int64_t b, int64_t s, int64_t c, int64_t vocab_begin,
                           int64_t vocab_end) override {
    GuardWindow open(state_.get());
    return inner_->EmbeddingBackward(dwte, dwpe, dout, tokens, b, s, c, vocab_begin, vocab_end);
  }
  Status Dropout(TensorRef x, TensorRef mask, const DropoutSpec& drop) override {
    GuardWindow open(state_.get());
    return inner_->Dropout(x, mask, drop);
  }
  Status CrossEntropyLocalStats(TensorRef row_max, TensorRef sums, ConstRef logits,
                                ConstRef targets, const VocabShard& v) override {
    GuardWindow open(state_.get());
    return inner_->CrossEntropyLocalStats(row_max, sums, logits, targets, v);
  }
  Status CrossEntropyRescaleSums(TensorRef sums, ConstRef local_max, ConstRef global_max,
                                 const VocabShard& v) override {
    GuardWindow open(state_.get());
    return inner_->CrossEntropyRescaleSums(sums, local_max, global_max, v);
  }
  Status CrossEntropyLoss(TensorRef row_sum, TensorRef loss_sum, ConstRef sums, ConstRef row_max,
                          ConstRef targets, const VocabShard& v) override {
    GuardWindow open(state_.get());
    return inner_->CrossEntropyLoss(row_sum, loss_sum, sums, row_max, targets, v);
  }
  Status CrossEntropyBackward(TensorRef dlogits, ConstRef logits, ConstRef row_max,
                              ConstRef row_sum, ConstRef targets, double dloss,
                              const VocabShard& v) override {
    GuardWindow open(state_.get());
    return inner_->CrossEntropyBackward(dlogits, logits, row_max, row_sum, targets, dloss, v);
  }
  Status AdamW(TensorRef param, TensorRef compute_copy, ConstRef grad, TensorRef m, TensorRef v,
               const AdamWHyper& h) override {
    GuardWindow open(state_.get());
    return inner_->AdamW(param, compute_copy, grad, m, v, h);
  }
  Status SumSquares(TensorRef acc, ConstRef x) override {
    GuardWindow open(state_.get());
    return inner_->SumSquares(acc, x);
  }
  bool FusesMultiTensor() const override { return inner_->FusesMultiTensor(); }
  Status AdamWMany(std::span<const AdamWTensor> tensors, const AdamWHyper& h) override {
    GuardWindow open(state_.get());
    return inner_->AdamWMany(tensors, h);
  }
  Status SumSquaresMany(TensorRef acc, std::span<const ConstRef> xs) override {
    GuardWindow open(state_.get());
    return inner_->SumSquaresMany(acc, xs);
  }
  Status Scale(TensorRef x, double factor) override {
    GuardWindow open(state_.get());
    return inner_->Scale(x, factor);
  }
  Status FlagNonFinite(TensorRef flag, ConstRef x) override {
    GuardWindow open(state_.get());
    return inner_->FlagNonFinite(flag, x);
  }
  Status Cast(TensorRef dst, ConstRef src) override {
    GuardWindow open(state_.get());
    return inner_->Cast(dst, src);
  }
  Status Fill(TensorRef dst, double value) override {
    GuardWindow open(state_.get());
    return inner_->Fill(dst, value);
  }
  Status FillNormal(TensorRef out, uint64_t key, int64_t cols, int64_t global_cols, int64_t col0,
                    int64_t row0, double mean, double stddev) override {
    GuardWindow open(state_.get());
    return inner_->FillNormal(out, key, cols, global_cols, col0, row0, mean, stddev);
  }

 private:
  std::shared_ptr<GuardState> state_;
  std::unique_ptr<Ops> inner_ = std::make_unique<CpuOps>();
};

class GuardRequest final : public CommRequest {
 public:
  GuardRequest(std::unique_ptr<CommRequest> r, std::shared_ptr<GuardState> s)
      : inner_(std::move(r)), state_(std::move(s)) {}
  ~GuardRequest() override {
    GuardWindow open(state_.get());  // a destructor may still complete the send
    inner_.reset();
  }
  Status Wait() override {
    GuardWindow open(state_.get());
    return inner_->Wait();
  }
  Result<bool> Test() override {
    GuardWindow open(state_.get());
    return inner_->Test();
  }

 private:
  std::unique_ptr<CommRequest> inner_;
  std::shared_ptr<GuardState> state_;
};

class GuardComm final : public Communicator {
 public:
  GuardComm(std::unique_ptr<Communicator> owned, Communicator* inner, std::shared_ptr<GuardState> s)
      : owned_(std::move(owned)), inner_(inner), state_(std::move(s)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::vector<int>& members() const override { return inner_->members(); }
  Status AllReduceSum(void* data, int64_t count, DType dtype) override {
    GuardWindow open(state_.get());
    return inner_->AllReduceSum(data, count, dtype);
  }
  Result<std::unique_ptr<CommRequest>> AllReduceSumAsync(void* data, int64_t count,
                                                         DType dtype) override {
    GuardWindow open(state_.get());
    PTDP_ASSIGN_OR_RETURN(auto r, inner_->AllReduceSumAsync(data, count, dtype));
    return std::unique_ptr<CommRequest>(std::make_unique<GuardRequest>(std::move(r), state_));
  }
  Result<std::unique_ptr<CommRequest>> ReduceSumAsync(void* data, int64_t count, DType dtype,
                                                      int root) override {
    GuardWindow open(state_.get());
    PTDP_ASSIGN_OR_RETURN(auto r, inner_->ReduceSumAsync(data, count, dtype, root));
    return std::unique_ptr<CommRequest>(std::make_unique<GuardRequest>(std::move(r), state_));
  }
  Status AllReduceMax(void* data, int64_t count, DType dtype) override {
    GuardWindow open(state_.get());
    return inner_->AllReduceMax(data, count, dtype);
  }
  Status AllGather(const void* send, void* recv, int64_t count, DType dtype) override {
    GuardWindow open(state_.get());
    return inner_->AllGather(send, recv, count, dtype);
  }
  Status ReduceScatterSum(const void* send, void* recv, int64_t count, DType dtype) override {
    GuardWindow open(state_.get());
    return inner_->ReduceScatterSum(send, recv, count, dtype);
  }
  Result<std::unique_ptr<CommRequest>> BroadcastAsync(void* data, int64_t count, DType dtype,
                                                      int root) override {
    GuardWindow open(state_.get());
    PTDP_ASSIGN_OR_RETURN(auto r, inner_->BroadcastAsync(data, count, dtype, root));
    return std::unique_ptr<CommRequest>(std::make_unique<GuardRequest>(std::move(r), state_));
  }
  Status Broadcast(void* data, int64_t count, DType dtype, int root) override {
    GuardWindow open(state_.get());
    return inner_->Broadcast(data, count, dtype, root);
  }
  Status Barrier() override {
    GuardWindow open(state_.get());
    return inner_->Barrier();
  }
  Result<std::unique_ptr<CommRequest>> ISend(const void* data, int64_t count, DType dtype, int peer,
                                             int tag) override {
    GuardWindow open(state_.get());
    PTDP_ASSIGN_OR_RETURN(auto r, inner_->ISend(data, count, dtype, peer, tag));
    return std::unique_ptr<CommRequest>(std::make_unique<GuardRequest>(std::move(r), state_));
  }
  Status Recv(void* data, int64_t count, DType dtype, int peer, int tag) override {
    GuardWindow open(state_.get());
    return inner_->Recv(data, count, dtype, peer, tag);
  }
  // Open too: waiting in MPI may progress a pending send, which reads its tensor.
  Result<bool> WaitForMessage(int peer, int tag) override {
    GuardWindow open(state_.get());
    return inner_->WaitForMessage(peer, tag);
  }

 private:
  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
  std::shared_ptr<GuardState> state_;
};

}  // namespace

void GuardState::Open() {
  if (depth_++ > 0) return;
  for (auto& [p, bytes] : pages_) mprotect(p, bytes, PROT_READ | PROT_WRITE);
}

void GuardState::Close() {
  if (--depth_ > 0) return;
  for (auto& [p, bytes] : pages_) mprotect(p, bytes, PROT_NONE);
}

GuardDevice::GuardDevice()
    : state_(std::make_shared<GuardState>()), ops_(std::make_unique<GuardOps>(state_)) {}

GuardDevice::~GuardDevice() = default;

Result<void*> GuardDevice::Alloc(Bytes bytes, MemTag tag) {
  PTDP_CHECK(bytes >= 0);
  if (bytes == 0) return static_cast<void*>(nullptr);
  const size_t len = PageRound(static_cast<size_t>(bytes));
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::DoesNotFit("guard device: cannot map " + std::to_string(bytes) + " bytes for " +
                              MemTagName(tag));
  }
  std::memset(p, 0xFF, len);  // poison, as CpuDevice does (Device::Alloc)
  if (!state_->open()) mprotect(p, len, PROT_NONE);
  state_->Add(p, len);
  Account(bytes, tag);
  return p;
}

void GuardDevice::Free(void* p, Bytes bytes, MemTag tag) {
  if (p == nullptr) return;
  state_->Remove(p);
  munmap(p, PageRound(static_cast<size_t>(bytes)));
  Account(-bytes, tag);
}

void GuardDevice::Copy(void* dst, const void* src, Bytes bytes) {
  GuardWindow open(state_.get());
  if (bytes > 0) std::memmove(dst, src, static_cast<size_t>(bytes));
}

void GuardDevice::Fill(void* dst, int value, Bytes bytes) {
  GuardWindow open(state_.get());
  if (bytes > 0) std::memset(dst, value, static_cast<size_t>(bytes));
}

std::unique_ptr<Communicator> GuardCommunicator(std::unique_ptr<Communicator> inner,
                                                std::shared_ptr<GuardState> state) {
  if (inner == nullptr) return nullptr;
  Communicator* raw = inner.get();
  return std::make_unique<GuardComm>(std::move(inner), raw, std::move(state));
}

std::unique_ptr<Communicator> GuardCommunicatorView(Communicator* inner,
                                                    std::shared_ptr<GuardState> state) {
  return std::make_unique<GuardComm>(nullptr, inner, std::move(state));
}

}  // namespace ptdp::runtime
