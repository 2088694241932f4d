#!/usr/bin/env bash
# The optimizer step priced by its measured rate against its bytes at memory_bound_GBps, on one
# saved run of bench/calibrate/run.sh (docs/compare.md, "The optimizer priced apart"): the run's
# traces (A, B1, B2) recalibrated on A from two profiles of the run's one `ptdp profile`
# measurement, then simulated and compared, and the figures printed (figures.py):
#   bytes  the run's profile without optimizer_Gparams_per_s: the step's 32 bytes per parameter at
#          memory_bound_GBps (the streaming add's), as before 2026-11-27
#   opt    the same with optimizer_Gparams_per_s: the run's own where its profile has one, else
#          OPT_RATE (G parameters/s; a `ptdp profile --backend cpu` run on the same machine, named
#          by OPT_SOURCE), its source saying so
# A run measured before the GeLU rates existed is left to gelu_split.sh (no GeLU rates: refused).
# usage: bench/calibrate/opt_split.sh PTDP RUNDIR OUTDIR   (PTDP: a build with the optimizer rate)
set -euo pipefail
ptdp=$(realpath "$1") run=$(realpath "$2") out=$3 here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$out" && mkdir -p "$out" && cd "$out"
for n in A B1 B2; do cp "$run/$n.json" "$run/$n.measured.json" .; done
python3 - "$run/measured.json" "${OPT_RATE:-0}" "${OPT_SOURCE:-OPT_RATE}" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
if "gelu_forward_Gelems_per_s" not in m:
    sys.exit("opt_split.sh: " + sys.argv[1] + " has no GeLU rates (a run before 2026-11-27)")
rate, source = float(sys.argv[2]), sys.argv[3]
bytes_, opt = json.loads(json.dumps(m)), json.loads(json.dumps(m))
bytes_.pop("optimizer_Gparams_per_s", None)
if "optimizer_Gparams_per_s" not in opt:
    if rate <= 0:
        sys.exit("opt_split.sh: the run's profile has no optimizer_Gparams_per_s: set OPT_RATE")
    opt["optimizer_Gparams_per_s"] = {"value": rate, "source": "opt_split.sh: " + source +
                                      " (the run's own profile predates the key)"}
json.dump(bytes_, open("bytes.json", "w"), indent=1)
json.dump(opt, open("opt.json", "w"), indent=1)
PY
. "$here/recalibrate.sh"
recalibrate_variants "$ptdp" "$here" bytes opt
