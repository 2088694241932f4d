// `ptdp profile --attention-grid S1,S2,... D1,D2,...`: the causal attention timed at every
// (sequence length s, head dimension d) of a grid, without and with dropout, for the profile's
// attention_table (core/attention_table.h), so that each model is priced at its own shape.
//
// The shape of a point: b = round(T / s) sequences and heads = round(W / d) heads (each at least
// 1), where T = b s and W = heads d are those of the --attention shape (default cuda 4 x 2048 and
// 16 x 128: T = 8192 tokens, W = 2048). Each call then holds the same tokens and the same width
// (about: rounding), like the layers of one model at one microbatch size, so the FLOPs per call
// grow only with s (7 T s W at the causal count) and the kernel has about as many (sequence,
// head) tiles to spread over the GPU at every point: the rates differ by s and d, the kernel's own
// dependence, rather than by how full a small call leaves the GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "profiler/profiler.h"

namespace ptdp::profiler {

// Forward + backward of causal attention at the causal count, in TFLOP/s: half of 14 b s^2 heads
// d FLOPs (QK^T and PV forward, 5 GEMMs backward, Dao 2023), the rate the cost model applies to
// both directions.
double CausalTrainTflops(int64_t b, int64_t s, int64_t heads, int64_t d, Seconds seconds);

// The flag's two arguments ("1024,2048" and "64,128") into o->attention_grid_s and _d; an error
// naming --attention-grid for anything but comma-separated positive integers.
Status ParseAttentionGrid(const std::vector<std::string>& args, ProfileOptions* o);

// Checks the grid of `o` (both axes or neither, positive, increasing); the error names the flag.
Status CheckAttentionGrid(const ProfileOptions& o);

// Times every point of the grid into r->att_grid after r's attention at its own shape (the
// reference: its kernel kinds, and its figures where a point has the same shape). A point whose
// timing fails, or whose kernel is not the reference's (cuDNN refusing the shape, CudaOps falling
// back to kernels/cuda), is left out with a line on stderr; so is a point's dropout rate alone
// when only the dropout attention fails or runs another kernel.
Status MeasureAttentionGrid(ProfileBackend& backend, const TimingOptions& t,
                            const ProfileOptions& o, ProfileReport* r);

}  // namespace ptdp::profiler
