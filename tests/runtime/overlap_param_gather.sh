#!/usr/bin/env bash
# The distributed optimizer's all-gather of the updated weights overlapped (ptdp train
# --overlap-param-gather: each chunk's buckets broadcast by their owners after the step, waited
# for before the chunk's first forward of the next step) against the blocking all-gather: the same
# plan (t1 p2 d2, the distributed optimizer) trained 4 steps each way; the per-step losses, as
# logged, and the final saved state (weights, Adam m and v) equal bit for bit. Extra arguments go
# to the overlapped run only (--overlap-grad-reduce).
# usage: overlap_param_gather.sh PTDP WORKDIR NAME PRECISION SCHEDULE VP [train flags]
set -uo pipefail
ptdp=$1 work=$2 name=$3 prec=$4 sched=$5 vp=$6
shift 6
here=$(cd "$(dirname "$0")" && pwd)
. "$(dirname "$0")/lib.sh"  # OpenMPI as root, oversubscribed; fail
fresh_dir_with_data "param-gather-$name"
PTDP_TEST_DIST_OPT=true "$here/write_plan.sh" "$ptdp" plan.json 4 0.1 256 16 1 2 2 2 "$vp" "$sched" \
  none true "$prec" || fail "plan"
train() {  # TAG [flags]
  local tag=$1
  shift
  timeout 300 mpirun -np 4 --oversubscribe "$ptdp" train --plan plan.json --data data.bin --steps 4 \
    --bucket-elements 10000 --log "$tag.jsonl" --save "ck-$tag" "$@" > "$tag.out" 2>&1 ||
    { cat "$tag.out"; fail "train $tag"; }
}
train off
train on --overlap-param-gather --expect-losses off.jsonl --loss-tol 0 "$@"
grep -q "losses vs reference: max relative difference 0.000e+00" on.out || fail "losses differ"
loss() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1"; }
cmp <(loss off.jsonl) <(loss on.jsonl) || fail "logged losses differ"
for f in ck-off/step-00000004/*.safetensors; do
  cmp "$f" "ck-on/step-00000004/$(basename "$f")" || fail "final state differs: $(basename "$f")"
done
echo PASS
