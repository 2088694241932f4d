// The fused-attention rate at a shape, from a profile's attention table (core/attention_table.h):
// bilinear in log2(s) and log2(d) over the grid, as the GEMM table is trilinear in log2 of its
// sizes (costmodel/log_axis.h). Outside the grid the edge rate holds: a sequence longer than the
// longest measured runs at the longest one's rate, a head dimension below the smallest at the
// smallest one's, and so on (no extrapolation of a kernel's rate beyond what was measured).
// FusedAttentionTflops (costmodel/layer_cost.h) is the one caller that chooses the rate.
#pragma once

#include "core/attention_table.h"

namespace ptdp::costmodel {

// TFLOP/s (causal count) at sequence length s and head dimension d; `dropout`: the table's
// dropout rates. REQUIRES: a non-empty table, s, d > 0, and with `dropout` t.HasDropout().
double AttentionTableTflops(const AttentionTable& t, double s, double d, bool dropout);

}  // namespace ptdp::costmodel
