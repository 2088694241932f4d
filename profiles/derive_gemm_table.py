#!/usr/bin/env python3
"""Derives the GEMM tables of the shipped profiles that no machine of ours has measured.

We have no A100 (nor a DGX H100 node) to run `ptdp profile` on, so their (m, n, k) throughput grids
are DERIVED, not measured: a separable saturation curve

    tflops(m, n, k) = plateau * u(m, 128) * u(n, 128) * u(k, 64),   u(x, x_half) = x / (x + x_half)

where `plateau` is a published best achievable GEMM throughput of the device (see the profile's
gemm.source) and x_half is one threadblock tile of cuBLAS/CUTLASS's large tensor-core kernels
(128 x 128 output tile, 64-deep k step): a dimension of one tile keeps half of the tensor cores'
pipelines busy. Replace these tables with a measured `ptdp profile --backend cuda` run on the real
machine. Usage: derive_gemm_table.py PLATEAU_TFLOPS [HALF_MN HALF_K] -> JSON of m, n, k, tflops.

Second form, a card's shape dependence taken from a measured profile of a card with the same SMs and
clocks: derive_gemm_table.py --from-profile MEASURED.json BEST_TFLOPS -> JSON of the profile's three
GEMM tables (gemm, gemm_backward_data, gemm_backward_weight), each rate scaled by BEST_TFLOPS over
the measured forward table's best, on the measured grid (dgx-h100 from h200-measured: the H200 has
the H100 SXM's 132 SMs, clocks and 700 W; docs/profiles.md).
"""
import json
import sys

M = [128, 512, 2048, 8192, 32768]
N = [64, 256, 1024, 4096, 16384]
K = [64, 256, 1024, 4096, 16384]


def u(x, half):
    return x / (x + half)


def from_profile(path, best):
    measured = json.load(open(path))
    scale = best / max(measured["gemm"]["tflops"])
    tables = {}
    for key in ("gemm", "gemm_backward_data", "gemm_backward_weight"):
        t = measured[key]
        tables[key] = {"m": [int(x) for x in t["m"]], "n": [int(x) for x in t["n"]],
                       "k": [int(x) for x in t["k"]],
                       "tflops": [round(x * scale, 4) for x in t["tflops"]]}
    print(json.dumps(tables))


def main():
    if sys.argv[1] == "--from-profile":
        return from_profile(sys.argv[2], float(sys.argv[3]))
    plateau = float(sys.argv[1])
    half_mn = float(sys.argv[2]) if len(sys.argv) > 2 else 128.0
    half_k = float(sys.argv[3]) if len(sys.argv) > 3 else 64.0
    t = [round(plateau * u(m, half_mn) * u(n, half_mn) * u(k, half_k), 4)
         for m in M for n in N for k in K]
    print(json.dumps({"m": M, "n": N, "k": K, "tflops": t}))


if __name__ == "__main__":
    main()
