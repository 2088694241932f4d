// GEMM time from a profile's measured (m, n, k) table. The table holds achieved TFLOP/s on a grid;
// between grid points we interpolate trilinearly in log2(m), log2(n), log2(k) (throughput varies
// smoothly with the logarithm of each size, as cuBLAS's tile quantisation averages out).
// Outside the grid: above the largest size the edge throughput holds; below the smallest size the
// time of the smallest measured size holds (a GEMM smaller than the smallest measured one is not
// faster than it: throughput scales down with the size).
// A Linear GEMM (batch 1) whose (m, n, k) is one of the profile's gemm_points (core/gemm_points.h)
// is priced from that point instead, forward and both backward kinds, with the launch cost and
// without wave quantisation (the point was timed at that very shape); every other GEMM from the
// tables exactly as without points.
#pragma once

#include <cstdint>

#include "core/hardware.h"
#include "core/units.h"

namespace ptdp::costmodel {

// Achieved throughput in TFLOP/s of C[m,n] = A[m,k] B[k,n]. REQUIRES: a valid table, m, n, k > 0.
double GemmTflops(const GemmTable& table, double m, double n, double k);

// Fraction of the last wave's multiprocessors that work, averaged over the waves: tiles / (waves x
// SMs) with tiles = ceil(m/tile_m) ceil(n/tile_n) batch (NVIDIA, "Matrix Multiplication Background
// User's Guide", wave quantisation). 1 when the profile does not model it.
double WaveEfficiency(const HardwareProfile& hw, int64_t m, int64_t n, int64_t batch = 1);

// Seconds of `batch` independent GEMMs of one shape run as one batched call (attention's per-head
// products): looked up as one GEMM with batch * m rows, which has the same work and parallelism.
// Includes the profile's per-kernel launch cost once and the wave quantisation (when modelled).
Seconds GemmTime(const HardwareProfile& hw, int64_t m, int64_t n, int64_t k, int64_t batch = 1);

// The two backward GEMMs of the forward C[m,n] = A[m,k] B[k,n] (input gradient C'[m,k] = dC[m,n]
// B^T and weight gradient [k,n] = A^T[k,m] dC[m,n]): from the profile's gemm_backward_data and
// gemm_backward_weight tables at (m, n, k) when it has both and batch is 1 (a Linear, measured as
// the layers run it, the weight gradient accumulating into fp32), else from the forward table at
// the transposed shapes (wave quantisation then included), whose FLOP time the profile's
// gemm_backward_efficiency divides when it has one.
Seconds GemmBackwardTime(const HardwareProfile& hw, int64_t m, int64_t n, int64_t k,
                         int64_t batch = 1);
// The input-gradient GEMM alone (C'[m,k] = dC[m,n] B^T) of a Linear (batch 1), the very term
// GemmBackwardTime adds for it: what `ptdp compare --op-times` prices a LinearBackwardData with.
Seconds GemmBackwardDataTime(const HardwareProfile& hw, int64_t m, int64_t n, int64_t k);
// The weight-gradient GEMM alone ([k,n] = A^T dC), the very term GemmBackwardTime adds for it
// (same table, same gemm_backward_efficiency): what a split backward's W runs (core/program.h
// kBackwardWeight). Never more than GemmBackwardTime at the same shape.
Seconds GemmBackwardWeightTime(const HardwareProfile& hw, int64_t m, int64_t n, int64_t k);

}  // namespace ptdp::costmodel
