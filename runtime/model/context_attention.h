// Attention of a context-parallel rank (LayerDims::cp > 1; docs/context_parallel.md "The
// runtime"): its S = s / cp queries meet the keys and values of its whole group.
//   Forward: each rank packs its keys and values into its slot of a [cp] buffer, the group
//     all-gathers it in place (cp chunks of keys and values, what the ledger's forward ring
//     holds), and the backend's ContextAttentionForward writes the output and the log-sum-exp
//     (the fused stash).
//   Backward: rank by rank, the source broadcasts its keys and values, every rank computes its
//     queries' gradient through them and its share of their gradient, and the shares are summed
//     into the source (a reduce): a chunk of keys and values and a chunk of their gradient at a
//     time, within the ledger's max(cp, 4) (core/ledger.h ContextRingBytes).
// Transformer Engine runs the same attention as a ring of point-to-point sends overlapped with
// the blocks (docs/design-notes-runtime.md says why this runtime does not).
#pragma once

#include "core/status.h"
#include "runtime/backend/ops.h"
#include "runtime/model/gpt_layers.h"

namespace ptdp::runtime {

// out [b S][a/t D] and lse [b][a/t][S] (wide) from the local qkv [b S][a/t][3][D].
Status ContextGroupAttentionForward(const LayerCtx& c, const AttentionShape& a,
                                    const DropoutSpec& drop, ConstRef qkv, TensorRef out,
                                    TensorRef lse);
// dqkv [b S][a/t][3][D] (overwritten) from dout, the forward's out and lse, and qkv.
Status ContextGroupAttentionBackward(const LayerCtx& c, const AttentionShape& a,
                                     const DropoutSpec& drop, ConstRef dout, ConstRef out,
                                     ConstRef qkv, ConstRef lse, TensorRef dqkv);

}  // namespace ptdp::runtime
