// Private to the Trainer's files: what one (microbatch, chunk) keeps between its instructions, and
// a posted send, a gradient bucket in flight.
#pragma once

#include <memory>
#include <vector>

#include "runtime/executor/trainer.h"

namespace ptdp::runtime {

struct Trainer::MbState {
  int32_t mb = -1, chunk = -1;  // which (microbatch, chunk) this is: what handlers record
  EmbeddingStash embedding;     // first virtual stage
  std::vector<LayerStash> layers;
  HeadStash head;             // last virtual stage
  std::vector<MtpStash> mtp;  // and its multi-token prediction depths'
  Tensor out;                 // forward output awaiting kSendAct (workspace)
  Tensor dout;                // received output gradient (kRecvGrad; workspace)
  Tensor dgrad;               // input gradient awaiting kSendGrad (workspace)
  // Split backward: the weight-gradient GEMMs queued by kBackwardInput for kBackwardWeight, and
  // whether that W is still to run (the state then outlives kSendGrad).
  WeightGradQueue weight_grads;
  bool weight_half_pending = false;
};

// A posted send and the buffer it reads from (kept alive until the send completes).
struct Trainer::Pending {
  std::unique_ptr<CommRequest> req;
  Tensor buf;
};

// A data-parallel gradient bucket started during the backward (grad_reduce.cc).
struct Trainer::GradBucket {
  std::unique_ptr<CommRequest> req;
  int64_t elements = 0;
};

}  // namespace ptdp::runtime
