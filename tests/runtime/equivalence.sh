#!/usr/bin/env bash
# Equivalence test of one layout against the single-process reference: per-step losses within 1e-5
# (relative) over the reference's steps, final parameters within 1e-4 (relative, per tensor), and
# the measured peak memory within 1% of the ledger (core/ledger.h).
# PTDP_TEST_MEMORY_TOL (default 0.01) is --memory-tol; -1 leaves memory unchecked: the expert-
# parallel layouts (*_epN*), whose experts' token counts, and so memory, depend on the routing.
# usage: equivalence.sh PTDP WORKDIR REF_NAME NAME LAYERS DROPOUT TP PP DP MBS VP SCHED RECOMPUTE SG [extra train flags]
set -euo pipefail
ptdp=$1 work=$2 ref=$3 name=$4 layers=$5 dropout=$6 tp=$7 pp=$8 dp=$9 mbs=${10} vp=${11}
sched=${12} rec=${13} sg=${14}
shift 14
here=$(cd "$(dirname "$0")" && pwd)
. "$(dirname "$0")/lib.sh"  # OpenMPI as root, oversubscribed; fail
"$here/write_plan.sh" "$ptdp" "$work/$name.plan.json" "$layers" "$dropout" 256 16 "$tp" "$pp" "$dp" "$mbs" \
  "$vp" "$sched" "$rec" "$sg"
np=$((tp * pp * dp * ${PTDP_TEST_CP:-1}))
timeout 300 mpirun -np "$np" --oversubscribe "$ptdp" train --plan "$work/$name.plan.json" \
  --data "$work/data.bin" --steps 20 --log "$work/$name.jsonl" \
  --expect-losses "$work/$ref.jsonl" --expect-params "$work/$ref.params" --memory-tol "${PTDP_TEST_MEMORY_TOL:-0.01}" "$@"
