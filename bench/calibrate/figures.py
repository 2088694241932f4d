#!/usr/bin/env python3
"""The figures docs/compare.md quotes for one recalibrated run (bench/calibrate/gelu_split.sh).

usage: figures.py DIR VARIANT
  DIR holds cal.VARIANT.json (ptdp calibrate on A), A.VARIANT.json (simulated with it),
  A.measured.json, and N.cmp.VARIANT.txt (ptdp compare) for N in A, B1, B2. Prints A's median
  |error| over every instruction and over the compute ones, the fitted forward GEMM multiple and
  memory_bound_GBps, the median error of rank 0's and rank 1's forwards, and B1's and B2's step
  errors ((predicted - measured) / measured) and compute medians; with a fitted
  optimizer_Gparams_per_s (opt_split.sh), that rate and each rank's optimizer-step error.
"""
import json
import os
import re
import statistics
import sys


def compare(path):
    t = open(path).read()
    pred, meas = map(float, re.search(r"step time: predicted ([0-9.]+) ms, measured ([0-9.]+) ms",
                                      t).groups())
    every = float(re.search(r"median \|error\| per instruction ([0-9.]+)%", t).group(1))
    compute = float(re.search(r"optimizer step\) ([0-9.]+)%", t).group(1))
    return (pred - meas) / meas * 100, every, compute


def durations(path):
    return {(e["pid"], e["name"]): e["dur"] for e in json.load(open(path))["traceEvents"]
            if e.get("ph") == "X"}


def forward_error(pred, meas, rank):
    return statistics.median((pred[k] - meas[k]) / meas[k] * 100 for k in meas
                             if k[0] == rank and k[1][:1] == "F" and k[1][1:2].isdigit() and k in pred)


def main():
    d, v = sys.argv[1], sys.argv[2]
    fitted = {f["figure"]: f["after"]
              for f in json.load(open(os.path.join(d, f"cal.{v}.json")))["calibration"]["fitted"]}
    pred = durations(os.path.join(d, f"A.{v}.json"))
    meas = durations(os.path.join(d, "A.measured.json"))
    a, b1, b2 = (compare(os.path.join(d, f"{n}.cmp.{v}.txt")) for n in ("A", "B1", "B2"))
    print(f"{v:5s} A all {a[1]}% compute {a[2]}% | gemm fwd x"
          f"{fitted['gemm (forward throughput, multiple)']:.3f} | memory_bound "
          f"{fitted['memory_bound_GBps']:.3g} GB/s | fwd r0/r1 {forward_error(pred, meas, 0):+.1f}/"
          f"{forward_error(pred, meas, 1):+.1f}% | B1 step {b1[0]:+.1f}% comp {b1[2]}% | B2 step "
          f"{b2[0]:+.1f}% comp {b2[2]}%" + optimizer(fitted, pred, meas))


def optimizer(fitted, pred, meas):
    if "optimizer_Gparams_per_s" not in fitted:
        return ""
    err = [(pred[k] - meas[k]) / meas[k] * 100 for k in sorted(meas) if k[1] == "OPT" and k in pred]
    return (f" | optimizer {fitted['optimizer_Gparams_per_s']:.4f} Gparams/s, step r0/r1 " +
            "/".join(f"{e:+.1f}" for e in err) + "%")


if __name__ == "__main__":
    main()
