#!/usr/bin/env bash
# fp16 dynamic loss scaling against an overflow: an inf is put into one gradient at step 3 (test-only
# --inject-overflow-step) of a t=2 p=2 d=2 run. Step 3 must be skipped on every rank (the flag is
# agreed over the world), the scale must halve for step 4, training must go on with finite losses,
# and the scale must double again after --loss-scale-window clean steps. NAME (default overflow)
# names the files; write_plan.sh's environment (PTDP_TEST_DIST_OPT) goes into the plan.
# usage: fp16_overflow.sh PTDP WORKDIR [NAME]
set -euo pipefail
ptdp=$1 work=$2 name=${3:-overflow}
here=$(cd "$(dirname "$0")" && pwd)
. "$(dirname "$0")/lib.sh"  # OpenMPI as root, oversubscribed; fail
"$here/write_plan.sh" "$ptdp" "$work/$name.plan.json" 4 0.1 256 16 2 2 2 2 1 1f1b none true fp16
timeout 200 mpirun -np 8 --oversubscribe "$ptdp" train --plan "$work/$name.plan.json" \
  --data "$work/data.bin" --steps 8 --log "$work/$name.jsonl" --inject-overflow-step 3 \
  --loss-scale-window 3 > "$work/$name.out" 2>&1 || { tail -5 "$work/$name.out"; exit 1; }
field() { grep -o "\"$1\":[^,}]*" "$work/$name.jsonl" | cut -d: -f2 | sed -n "${2}p"; }
expect() { [ "$(field "$1" "$2")" = "$3" ] || { echo "FAIL: step $2 $1 = $(field "$1" "$2"), want $3"; exit 1; }; }
expect loss_scale 1 65536.0
expect skipped_steps 2 0
expect skipped_steps 3 1      # the injected overflow: skipped
expect loss_scale 3 65536.0   # the scale step 3's backward used
expect loss_scale 4 32768.0   # halved
expect skipped_steps 8 1      # no further skips
expect loss_scale 7 65536.0   # doubled after 3 clean steps (4, 5, 6)
for k in 1 2 3 4 5 6 7 8; do
  l=$(field loss "$k")
  awk -v l="$l" 'BEGIN { exit !(l + 0 == l && l > 0 && l < 10) }' || { echo "FAIL: step $k loss $l"; exit 1; }
done
echo PASS
