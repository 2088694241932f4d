// Training precision: how a run stores and computes its numbers. One enum for the planner, the
// simulator and the runtime; the bytes each choice costs are core/ledger.h's.
//   kFp32  everything fp32 (the CPU runtime's default).
//   kBf16  bf16 compute copies of the weights, bf16 activations, pipeline messages and
//          tensor-parallel collectives; fp32 master weights, gradients and Adam state.
//   kFp16  as kBf16 in fp16, with dynamic loss scaling (a step whose gradients overflow is skipped
//          and the scale halves).
//   kFp8   as kBf16, with the Linears' GEMMs (QKV, projection, fc1, fc2; forward, input and
//          weight gradients) in FP8 as Transformer Engine runs them (Megatron-LM's
//          --fp8-format hybrid: E4M3 forward, E5M2 gradients, fp32 accumulation, delayed
//          scaling). Attention and the output layer stay in bf16 (docs/cost_model.md, "FP8").
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace ptdp {

enum class Precision : uint8_t { kFp32, kBf16, kFp16, kFp8 };

const char* PrecisionName(Precision p);  // "fp32" | "bf16" | "fp16" | "fp8"
// `field` names the key or flag in the error ("--precision", "layout.precision").
Result<Precision> ParsePrecision(const std::string& s, const std::string& field);
// Bytes of one element in the compute dtype: weights' compute copy, activations, pipeline
// messages, tensor-parallel collectives. 4 for fp32, 2 for bf16, fp16 and fp8 (whose compute
// dtype outside the FP8 GEMMs is bf16; the FP8 copies are core/ledger.h's).
int ComputeBytes(Precision p);
// Bytes of one element of a Linear's input as kept for its backward: the FP8 copy (1 byte) in fp8
// training, else ComputeBytes.
int LinearInputBytes(Precision p);
inline bool IsHalf(Precision p) {
  return p != Precision::kFp32;
}

}  // namespace ptdp
