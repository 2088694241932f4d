// A mixture layer's route (runtime/model/moe_layer.h): where each token copy of a microbatch goes,
// from the router's choice, with token dropping (model.moe_capacity_factor; Megatron-Core's
// --moe-expert-capacity-factor) as a pure function of that choice, which its tests call alone.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/model/gpt_layers.h"

namespace ptdp::runtime {

// A copy of a token for an expert: its row in the microbatch's [N] and its slot in [N][k] (the
// choice it is; the padding's slot is one past them, whose probability is 0).
struct TokenCopy {
  int32_t token, slot;
};

// The copies of one sequence's S tokens (rows first_token to first_token + S - 1), of[e] expert
// e's in token order, as the router chose them. Keeps each expert's capacity C = core/experts.h
// ExpertCapacity(S, k, E, factor) of them: its first C (a.moe_drop_by_position), else its C
// highest probabilities prob[slot] (the earlier token first among equal ones), none dropped when
// C > S (as Megatron-Core). Padded to capacity (a.moe_pad_to_capacity), an expert with fewer
// than min(C, S) also gets copies of slot `pad_slot` of the first tokens not routed to it, up to
// that many; each list stays in token order.
void DropInSequence(const LayerArch& a, int64_t S, int32_t first_token,
                    const std::vector<double>& prob, int32_t pad_slot,
                    std::vector<std::vector<TokenCopy>>* of);

// Where every token copy goes: the copies in the experts' order (expert e's rows
// [offsets[e], offsets[e + 1])), each with its token's row in [N] and its slot in the [N][k]
// choice, on the device; and the microbatch's probabilities [N][k] (wide), gathered over the
// tensor group. Dropless, the copies are the N k choices; with token dropping the kept ones, and
// padded to capacity also copies of slot N k, whose probability is 0 (probs has N k + 1 then).
struct MoeRoute {
  std::vector<int64_t> offsets;
  std::vector<int64_t> routed;        // [E]: the router's choices per expert, before dropping
  std::vector<int64_t> per_sequence;  // [b][E]: each sequence's choices per expert, before it
  Tensor token, slot, probs;
  int64_t copies() const { return offsets.back(); }
  int64_t slots = 0;    // N k, and one more when padded
  int64_t padding = 0;  // the copies of the padding's slot (kept real copies: copies() - padding)
};

// The route of the microbatch from this rank's choice (index i32 [R][k], probs wide [R][k]),
// gathered over the tensor group; with token dropping, each sequence's copies by DropInSequence.
Result<MoeRoute> Route(const LayerCtx& c, ConstRef index, ConstRef probs);

}  // namespace ptdp::runtime
