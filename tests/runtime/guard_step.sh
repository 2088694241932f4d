#!/usr/bin/env bash
# One full training step of a layout on the guard device (backend cpu-guard): every tensor lives on
# pages that fault on host access outside an Ops or communicator call, so the step passing proves
# no host element access is left in it. Open MPI's shared-memory single-copy (CMA/XPMEM) lets a
# PEER process read our pages directly, which the guard cannot see: it is switched off here.
# PTDP_TEST_MEMORY_TOL (default 0.01) is --memory-tol; -1 leaves memory unchecked: the expert-
# parallel layouts (*_epN*), whose experts' token counts, and so memory, depend on the routing.
# usage: guard_step.sh PTDP WORKDIR NAME PRECISION LAYERS DROPOUT TP PP DP MBS VP SCHED RECOMPUTE SG
set -euo pipefail
ptdp=$1 work=$2 name=$3 prec=$4 layers=$5 dropout=$6 tp=$7 pp=$8 dp=$9 mbs=${10} vp=${11}
sched=${12} rec=${13} sg=${14}
here=$(cd "$(dirname "$0")" && pwd)
. "$(dirname "$0")/lib.sh"  # OpenMPI as root, oversubscribed; fail
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl_sm_single_copy_mechanism=none
plan="$work/guard-$name-$prec.plan.json"
"$here/write_plan.sh" "$ptdp" "$plan" "$layers" "$dropout" 256 16 "$tp" "$pp" "$dp" "$mbs" "$vp" "$sched" \
  "$rec" "$sg" "$prec"
timeout 250 mpirun -np $((tp * pp * dp * ${PTDP_TEST_CP:-1})) --oversubscribe "$ptdp" train --plan "$plan" \
  --data "$work/data.bin" --steps 1 --backend cpu-guard --memory-tol "${PTDP_TEST_MEMORY_TOL:-0.01}"
