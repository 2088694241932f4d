#!/usr/bin/env bash
# The GeLU's own rate against memory_bound_GBps from the GeLU kernel, on one saved run of
# bench/calibrate/run.sh (docs/compare.md, "The GeLU priced apart"): the run's traces (A, B1, B2)
# recalibrated on A from two profiles of the run's one `ptdp profile` measurement, then simulated
# and compared, and the figures printed (figures.py):
#   base  memory_bound_GBps = the GeLU forward kernel's GB/s, no GeLU rates (before 2026-11-27)
#   glu   memory_bound_GBps = the streaming add's GB/s (the profile's hbm_GBps), the GeLU priced
#         by its elements (gelu_forward/backward_Gelems_per_s)
# A run measured before the GeLU rates existed has the kernel's forward GB/s only: its forward
# rate is that / 8 (fp32, read + write, as the profiler counts it), its backward rate the forward
# times BWD_RATIO (default 0.763, the backward/forward ratio of eight profile runs that timed both
# on this machine, 2026-11-27); each figure's source says so.
# usage: bench/calibrate/gelu_split.sh PTDP RUNDIR OUTDIR   (PTDP: a build with the GeLU rates)
#   PROFILE=FILE: start from FILE instead of RUNDIR/measured.json (a copy of it with keys added)
set -euo pipefail
ptdp=$(realpath "$1") run=$(realpath "$2") out=$3 here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$out" && mkdir -p "$out" && cd "$out"
for n in A B1 B2; do cp "$run/$n.json" "$run/$n.measured.json" .; done
# The kernel's GB/s of a run that wrote the GeLU rates is in its printed table only.
gelu=$(sed -n 's/.*gelu \([0-9.]*\) GB\/s.*/\1/p' "$run/profile.txt" 2> /dev/null || echo 0)
python3 - "${PROFILE:-$run/measured.json}" "$gelu" "${BWD_RATIO:-0.763}" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
ratio = float(sys.argv[3])
# Before the GeLU rates, memory_bound_GBps was the kernel's figure itself (full precision).
old = "gelu_forward_Gelems_per_s" not in m
kernel_GBps = m["memory_bound_GBps"]["value"] if old else float(sys.argv[2])
base, glu = json.loads(json.dumps(m)), json.loads(json.dumps(m))
for k in ("gelu_forward_Gelems_per_s", "gelu_backward_Gelems_per_s"):
    base.pop(k, None)
base["memory_bound_GBps"] = {"value": kernel_GBps, "source": "gelu_split.sh: the GeLU forward "
                             "kernel's GB/s of the same profile run"}
if old:
    glu["memory_bound_GBps"] = {"value": m["hbm_GBps"]["value"], "source": "gelu_split.sh: the "
                                "streaming add of the same profile run (hbm_GBps)"}
    glu["gelu_forward_Gelems_per_s"] = {"value": kernel_GBps / 8, "source": "gelu_split.sh: the "
                                        "same run's GeLU forward GB/s / 8 bytes per element"}
    glu["gelu_backward_Gelems_per_s"] = {"value": kernel_GBps / 8 * ratio, "source": "gelu_split."
                                         "sh: the forward rate x %g (backward/forward, measured "
                                         "elsewhere)" % ratio}
json.dump(base, open("base.json", "w"), indent=1)
json.dump(glu, open("glu.json", "w"), indent=1)
PY
. "$here/recalibrate.sh"
recalibrate_variants "$ptdp" "$here" base glu
