// UnimplementedOps: an Ops whose every operation fails with a clear error naming the backend and
// the operation. The CUDA device hands it out until the CUDA Ops (kernels/cuda + cuBLASLt) are
// written; nothing can silently compute on the wrong device.
#pragma once

#include <string>

#include "runtime/backend/ops.h"

namespace ptdp::runtime {

class UnimplementedOps final : public Ops {
 public:
  explicit UnimplementedOps(std::string backend) : backend_(std::move(backend)) {}
  const char* name() const override { return backend_.c_str(); }
  Status LayerNormForward(TensorRef, TensorRef, TensorRef, ConstRef, ConstRef, ConstRef, int64_t,
                          int64_t, double) override {
    return Fail("LayerNormForward");
  }
  Status LayerNormBackward(TensorRef, TensorRef, TensorRef, ConstRef, ConstRef, ConstRef, ConstRef,
                           ConstRef, int64_t, int64_t, bool, double) override {
    return Fail("LayerNormBackward");
  }
  Status LinearForward(TensorRef, TensorRef, ConstRef, ConstRef, ConstRef, int64_t, int64_t,
                       int64_t) override {
    return Fail("LinearForward");
  }
  Status LinearBackwardData(TensorRef, ConstRef, ConstRef, int64_t, int64_t, int64_t) override {
    return Fail("LinearBackwardData");
  }
  Status LinearBackwardWeight(TensorRef, TensorRef, ConstRef, ConstRef, int64_t, int64_t,
                              int64_t) override {
    return Fail("LinearBackwardWeight");
  }
  Status GeluBackward(TensorRef, ConstRef, ConstRef, int64_t) override {
    return Fail("GeluBackward");
  }
  Status BiasDropoutResidual(TensorRef, TensorRef, ConstRef, ConstRef, ConstRef, int64_t, int64_t,
                             const DropoutSpec&) override {
    return Fail("BiasDropoutResidual");
  }
  Status DropoutBackward(TensorRef, TensorRef, ConstRef, ConstRef, int64_t, int64_t,
                         double) override {
    return Fail("DropoutBackward");
  }
  Status Add(TensorRef, ConstRef, ConstRef) override { return Fail("Add"); }
  Status AttentionForward(TensorRef, AttentionStash*, ConstRef, const AttentionShape&,
                          const DropoutSpec&) override {
    return Fail("AttentionForward");
  }
  Status AttentionBackward(TensorRef, ConstRef, ConstRef, const AttentionStash&,
                           const AttentionShape&, double) override {
    return Fail("AttentionBackward");
  }
  Status EmbeddingForward(TensorRef, ConstRef, ConstRef, ConstRef, int64_t, int64_t, int64_t,
                          int64_t, int64_t) override {
    return Fail("EmbeddingForward");
  }
  Status EmbeddingBackward(TensorRef, TensorRef, ConstRef, ConstRef, int64_t, int64_t, int64_t,
                           int64_t, int64_t) override {
    return Fail("EmbeddingBackward");
  }
  Status Dropout(TensorRef, TensorRef, const DropoutSpec&) override { return Fail("Dropout"); }
  Status CrossEntropyLocalStats(TensorRef, TensorRef, ConstRef, ConstRef,
                                const VocabShard&) override {
    return Fail("CrossEntropyLocalStats");
  }
  Status CrossEntropyRescaleSums(TensorRef, ConstRef, ConstRef, const VocabShard&) override {
    return Fail("CrossEntropyRescaleSums");
  }
  Status CrossEntropyLoss(TensorRef, TensorRef, ConstRef, ConstRef, ConstRef,
                          const VocabShard&) override {
    return Fail("CrossEntropyLoss");
  }
  Status CrossEntropyBackward(TensorRef, ConstRef, ConstRef, ConstRef, ConstRef, double,
                              const VocabShard&) override {
    return Fail("CrossEntropyBackward");
  }
  Status AdamW(TensorRef, TensorRef, ConstRef, TensorRef, TensorRef, const AdamWHyper&) override {
    return Fail("AdamW");
  }
  Status SumSquares(TensorRef, ConstRef) override { return Fail("SumSquares"); }
  Status AdamWMany(std::span<const AdamWTensor>, const AdamWHyper&) override {
    return Fail("AdamWMany");
  }
  Status SumSquaresMany(TensorRef, std::span<const ConstRef>) override {
    return Fail("SumSquaresMany");
  }
  Status Scale(TensorRef, double) override { return Fail("Scale"); }
  Status FlagNonFinite(TensorRef, ConstRef) override { return Fail("FlagNonFinite"); }
  Status Cast(TensorRef, ConstRef) override { return Fail("Cast"); }
  Status Fill(TensorRef, double) override { return Fail("Fill"); }
  Status FillNormal(TensorRef, uint64_t, int64_t, int64_t, int64_t, int64_t, double,
                    double) override {
    return Fail("FillNormal");
  }

 private:
  Status Fail(const char* op) const {
    return Status::Internal(backend_ + " backend: Ops::" + op +
                            " is not implemented yet (the CUDA Ops are the next piece of work)");
  }
  std::string backend_;
};

}  // namespace ptdp::runtime
