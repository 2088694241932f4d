// Helpers shared by the transformer layer (gpt_layers.cc) and the model's ends (gpt_ends.cc):
// allocation under the ledger's tags, the tensor group's collectives, sequence parallelism's row
// gathers and scatters, a split backward's deferred weight gradients, where dropout masks sit in
// the global tensors, and the norms (LayerNorm or RMSNorm). Internal to runtime/model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/reference/context_chunks.h"
#include "runtime/model/gpt_layers.h"

namespace ptdp::runtime::layer_common {

// The tensor group's all-reduces; a group of one (or none) is the identity.
Status TpAllReduceSum(Communicator* tp, TensorRef x);
Status TpAllReduceMax(Communicator* tp, TensorRef x);

Result<Tensor> Alloc(const LayerCtx& c, int64_t n, DType t, MemTag tag);
Result<Tensor> Tmp(const LayerCtx& c, int64_t n, DType t);  // a workspace transient

// A Linear's output gradient: transient, or (split backward) kept for the weight half.
Result<Tensor> OutputGrad(const LayerCtx& c, int64_t n);

// dw (+ dbias) += dout^T x now, or deferred to the weight half with its operands (*dout moved;
// *x_owner too when given: a gathered input x points into).
Status WeightGrad(const LayerCtx& c, TensorRef dw, TensorRef dbias, Tensor* dout, ConstRef x,
                  int64_t n, int64_t cols, int64_t oc, Tensor* x_owner = nullptr);

// What a deferred weight GEMM reads is kept until the weight half, tagged activations
// (core/shapes.h LayerWeightGradStash); a transient otherwise.
MemTag KeptTag(const LayerCtx& c);

// Sequence parallelism's collectives over the tensor group (LayerDims::sp). The rows a GEMM reads
// whole: this rank's [R][h] block gathered into the microbatch's [N][h] (a transient), or the
// tensor itself without sequence parallelism.
struct FullRows {
  Tensor owned;  // the gathered rows, or empty
  ConstRef ref;  // what the GEMM reads
};
Result<FullRows> GatherRows(const LayerCtx& c, ConstRef local, MemTag tag = MemTag::kWorkspace);
// A row-parallel GEMM's partial sums [N][h] summed over the tensor group (g's forward, f's
// backward): all-reduced in place, or under sequence parallelism reduce-scattered into this
// rank's [R][h] rows (and the [N][h] partial freed).
Result<Tensor> SumRows(const LayerCtx& c, Tensor partial);

// A row index for MoePermuteRows (out row i = x row rows[i]) and MoeUnpermuteAddRows (y row i
// added to out row rows[i]), uploaded as a transient.
Result<Tensor> RowIndex(const LayerCtx& c, const std::vector<int32_t>& rows);

// Rows [row0, row0 + rows) of a [*][width] tensor (an empty view stays empty).
TensorRef Rows(TensorRef t, int64_t row0, int64_t rows, int64_t width);
ConstRef Rows(ConstRef t, int64_t row0, int64_t rows, int64_t width);

// The embedding's runs of consecutive positions: call(row0, b, s, pos0) for the microbatch's rows
// [row0, row0 + b s), b sequences of s positions from pos0. One call, or under context
// parallelism one per chunk of each sequence (kernels/reference/context_chunks.h).
template <typename Call>
Status ForEachPositionRun(const LayerDims& d, Call&& call) {
  if (d.cp == 1) return call(0, d.b, d.s, 0);
  const kernels::ContextChunks chunks{d.s, d.cp, d.cp_rank};
  const int64_t chunk = chunks.Chunk();
  for (int64_t bi = 0; bi < d.b; ++bi) {
    for (int64_t t = 0; t < d.S(); t += chunk) {
      PTDP_RETURN_IF_ERROR(call(bi * d.S() + t, 1, chunk, chunks.Position(t)));
    }
  }
  return Status::Ok();
}

// A dropout site's name: "layer3.attn".
std::string Site(int layer, const char* what);
// Hidden-size dropout of a microbatch: element (row, col) of [N][h] at global index
// seq0 * s * h + row * h + col; under sequence parallelism this rank's rows start at sp_rank R;
// under context parallelism row is a local row, placed by DropoutSpec's chunk fields.
DropoutSpec HiddenDropout(const LayerCtx& c, const std::string& site);
AttentionShape Shape(const LayerDims& d, const DropoutCtx& drop);
VocabShard Shard(const LayerDims& d);

// A norm's forward over this rank's R rows of h (LayerNorm, or RMSNorm under LayerArch::rmsnorm)
// into a stash it allocates, tagged `tag`: the mean (LayerNorm only; empty for RMSNorm, as
// core/shapes.h lists it), the 1/std and the output.
struct NormStash {
  Tensor* mean;
  Tensor* rstd;
  Tensor* out;
};
Status NormForward(const LayerCtx& c, MemTag tag, ConstRef x, ConstRef w, ConstRef b, NormStash st);
// The same with the output written into `out` [R][h] (not allocated; st.out unused).
Status NormForwardInto(const LayerCtx& c, MemTag tag, ConstRef x, ConstRef w, ConstRef b,
                       NormStash st, TensorRef out);
// The output again into a new *st.out tagged `tag`, the statistics kept (rewritten in place with
// the values they hold): recompute_modules layernorm, whose ledger drops the output alone.
Status NormRedoOutput(const LayerCtx& c, MemTag tag, ConstRef x, ConstRef w, ConstRef b,
                      NormStash st);
// dx overwritten; dw (and LayerNorm's db) accumulate.
Status NormBackward(const LayerCtx& c, TensorRef dx, TensorRef dw, TensorRef db, ConstRef dout,
                    ConstRef x, ConstRef w, ConstRef mean, ConstRef rstd);

}  // namespace ptdp::runtime::layer_common
