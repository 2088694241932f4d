#!/usr/bin/env bash
# The planner's memory_per_stage (ptdp plan --cluster cpu --fix ...) against the runtime's measured
# peak per pipeline rank (without transient workspace on both sides): within 1% (--memory-tol); and
# the measured peak with workspace at most the ledger's bound with it on one stage (core/ledger.h
# PeakWorkspaceBytes, --memory-tol over it fails; printed only with p > 1, where a lagging receiver
# can leave more sends held than the bound counts), equal to it on one stage without recomputation.
# Also checks the measured Chrome trace of the last iteration is written with every instruction kind.
# usage: memory_vs_plan.sh PTDP WORKDIR NAME NP FIX
set -euo pipefail
ptdp=$1 work=$2 name=$3 np=$4 fix=$5
. "$(dirname "$0")/lib.sh"  # OpenMPI as root, oversubscribed; fail
mkdir -p "$work"
dir=$(mktemp -d "$work/mem-$name.XXXX")
printf 'memory agreement between the planner and the runtime; %.0s' $(seq 100) > "$dir/text.txt"
"$ptdp" tokenize --in "$dir/text.txt" --out "$dir/data.bin" > /dev/null
# The tiny shape with dropout, so the stored masks are part of both sides.
cat > "$dir/model.json" <<JSON
{"name": "tiny-dropout", "layers": 4, "hidden": 64, "heads": 4, "seq_len": 32, "vocab": 256,
 "dropout": 0.1}
JSON
"$ptdp" plan --model "$dir/model.json" --cluster cpu --gpus "$np" --global-batch 16 --fix "$fix" \
  --software ptdp --out "$dir/plan.json" > /dev/null
grep -q memory_per_stage "$dir/plan.json" || { echo "FAIL: the plan has no memory_per_stage"; exit 1; }
out=$(timeout 200 mpirun -np "$np" --oversubscribe "$ptdp" train --plan "$dir/plan.json" \
      --data "$dir/data.bin" --steps 2 --memory-tol 0.01 --trace "$dir/trace.json" 2>&1)
echo "$out"
echo "$out" | grep -q "plan's prediction" || { echo "FAIL: plan prediction not printed"; exit 1; }
# One stage without recomputation: the head's backward runs at the ledger's peak, the bound is the
# measured total to the report's 0.01%. Not with context parallelism: the ledger bounds Transformer
# Engine's ring buffers (max(cp, 4) chunks), and the runtime's attention holds at most cp of them
# (docs/context_parallel.md "The runtime"), so its total stays under the bound (--memory-tol).
case "$fix" in *cp=[2-9]*) ;;
*pp=1,*recompute=none*)
  lines=$(echo "$out" | grep "pp rank .*; total") || { echo "FAIL: no total line"; exit 1; }
  echo "$lines" | grep -v "; total [0-9.]* | [0-9.]* ([+-]0.00%)" &&
    { echo "FAIL: the total with workspace is not the ledger's"; exit 1; } ;;
esac
# The backward is whole, or (zero-bubble schedules) its two halves.
backward=backward
case "$fix" in *schedule=zb-*) backward="backward_input backward_weight" ;; esac
for op in forward $backward reduce_grads optimizer_step; do
  grep -q "\"$op\"" "$dir/trace.json" || { echo "FAIL: trace lacks $op"; exit 1; }
done
echo PASS
