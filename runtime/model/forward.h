// The model's forward alone, in one process (a tensor group of one, no pipeline, no dropout): the
// logits over the unpadded vocabulary and the mean next-token loss, through the same layers
// (gpt_layers.h) and kernels as training. `ptdp forward` uses it to compare ptdp's model with
// another implementation's (transformers' GPT2LMHeadModel, bench/hf/hf_check.sh).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "core/model.h"
#include "runtime/backend/device.h"
#include "runtime/model/params.h"

namespace ptdp::runtime {

struct ForwardOutput {
  std::vector<float> logits;  // [B][S][vocab], fp32
  double loss = 0;            // mean over the B S next-token predictions (natural log)
};

// `seqs`: B sequences of S + 1 tokens each (inputs, then the last target), every token < vocab;
// 1 <= S <= m.seq_len. `params`: a store of layout t = p = v = 1 (ParamStore::Create with the
// default ParallelConfig) in fp32. Runs one sequence at a time.
// `expert_bias`: the routers' expert biases by global layer (a checkpoint's, manifest.h), which
// a model with moe_router_expert_bias needs for every mixture layer.
Result<ForwardOutput> ForwardLogits(Device* dev, const ModelSpec& m, ParamStore& params,
                                    const std::vector<int32_t>& seqs, int64_t S,
                                    const std::map<int, std::vector<double>>& expert_bias = {});

}  // namespace ptdp::runtime
