#!/usr/bin/env bash
# Closing the loop on the CPU (issue 13; not part of make test, and no timing is asserted): measure
# the machine (`ptdp profile --backend cpu`, on a GEMM grid down to the tiny model's shapes), train
# layout A for a few steps with a measured trace, put that profile's prediction beside it
# (ptdp compare: table and SVG), calibrate the profile on that run, compare again, then train a
# different layout B on the same machine and print B's step time and median instruction error as
# predicted by the preset and by the calibrated profile, beside the measurement. Two B layouts by
# default: another microbatch size on the same pipeline, and data parallelism (whose gradient
# all-reduce moves another message size than anything A ran).
# usage: bench/calibrate/run.sh [PTDP] [WORKDIR]   (defaults: build/tools/ptdp, /tmp/ptdp-calibrate)
# Layouts (--fix strings of `ptdp plan`; ranks = tp * pp * dp) and the model may be overridden:
#   START=measure (or a profile/cluster preset or file to start from instead, e.g. START=cpu)
#   ATTENTION="1 32 4 16" (b s heads d of the measured attention; the default is tiny's at mbs 1)
#   MODEL=tiny BATCH=32 STEPS=5 RANKS_A=2 FIX_A=tp=1,pp=2,dp=1,mbs=1
#   LAYOUTS_B="2:tp=1,pp=2,dp=1,mbs=2 2:tp=1,pp=1,dp=2,mbs=1"   (ranks:fix, space-separated)
#   QUANTILE=0.5 (ptdp calibrate --quantile; 0.25 on a machine shared with other jobs)
#   NICE=0   (e.g. -10, as root: the training ranks ahead of other work on a shared machine)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ptdp=$(realpath "${1:-$root/build/tools/ptdp}")
work=${2:-/tmp/ptdp-calibrate}
start=${START:-measure} model=${MODEL:-tiny} batch=${BATCH:-32} steps=${STEPS:-5}
ranks_a=${RANKS_A:-2} fix_a=${FIX_A:-tp=1,pp=2,dp=1,mbs=1}
layouts_b=${LAYOUTS_B:-2:tp=1,pp=2,dp=1,mbs=2 2:tp=1,pp=1,dp=2,mbs=1}
rm -rf "$work" && mkdir -p "$work" && cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# A rank blocked in MPI yields its core instead of spinning: with more ranks than free cores a
# spinning receiver takes the time its sender needs.
export OMPI_MCA_mpi_yield_when_idle=1
"$ptdp" tokenize --in "$root/README.md" --out tokens.bin > /dev/null
if [ "$start" = measure ]; then
  # The tiny model's GEMMs have 32 to 128 rows and 16 to 256 columns: the grid covers them (the
  # cpu preset's starts at 128 rows, below which a GEMM is priced as one of 128).
  # Attention is timed at the tiny model's shape (b=1 s=32, 4 heads of 16): at so short a
  # sequence it is bound by per-head overhead, and the default shape (s=512) gives 2.5x its rate.
  # shellcheck disable=SC2086
  "$ptdp" profile --backend cpu --gemm-m 32 64 128 256 --gemm-n 16 64 256 1024 \
    --gemm-k 16 64 256 --attention ${ATTENTION:-1 32 4 16} --out measured.json > profile.txt
  # One node of 8 processes, so the ranks' messages take the intra-node link.
  echo "{\"profile\": \"$PWD/measured.json\", \"gpus_per_node\": 8}" > cluster.json
  start=$PWD/cluster.json
fi

plan() {  # plan NAME RANKS FIX
  "$ptdp" plan --model "$model" --cluster "$start" --gpus "$2" --global-batch "$batch" \
    --fix "$3,recompute=none,schedule=1f1b" --software ptdp --top 1 --out "$1.json" > /dev/null
}
train() {  # train NAME RANKS
  nice -n "${NICE:-0}" mpirun -np "$2" "$ptdp" train --plan "$1.json" --data tokens.bin --steps "$steps" \
    --trace "$1.measured.json" > "$1.train.txt"
}
# field FILE: "step_pred step_meas median_all median_compute" from a compare report.
fields() {
  sed -n -e 's/^step time: predicted \([0-9.]*\) ms, measured \([0-9.]*\) ms.*/\1 \2/p' \
    -e 's/.*median |error| per instruction \([0-9.]*\)%.*/\1/p' \
    -e 's/.*optimizer step) \([0-9.]*\)%.*/\1/p' "$1" | tr '\n' ' '
  echo
}

echo "== layout A ($model, $fix_a, $ranks_a ranks): train $steps steps, trace the last"
plan A "$ranks_a" "$fix_a"
train A "$ranks_a"
"$ptdp" simulate --plan A.json --trace A.before.json > /dev/null
"$ptdp" compare --predicted A.before.json --measured A.measured.json --svg A.before.svg --top 5 \
  | tee A.compare.before.txt
echo "== calibrate on A's run"
"$ptdp" calibrate --plan A.json --measured A.measured.json --out calibrated.json --quantile "${QUANTILE:-0.5}"
"$ptdp" simulate --plan A.json --profile calibrated.json --trace A.after.json > /dev/null
"$ptdp" compare --predicted A.after.json --measured A.measured.json --svg A.after.svg --top 5 \
  | tee A.compare.after.txt
# Every instruction of A after calibration, and the receives' errors by group (docs/compare.md,
# "Where the receives' error comes from").
if command -v python3 > /dev/null; then
  python3 "$root/bench/calibrate/instr_errors.py" A.after.json A.measured.json --dump A.instr.tsv \
    > A.instr.txt
fi

names="A"
i=0
for spec in $layouts_b; do
  i=$((i + 1)) b=B$i ranks_b=${spec%%:*} fix_b=${spec#*:}
  names="$names $b"
  echo "== layout $b ($model, $fix_b, $ranks_b ranks) on the same machine"
  plan "$b" "$ranks_b" "$fix_b"
  train "$b" "$ranks_b"
  "$ptdp" simulate --plan "$b.json" --trace "$b.before.json" > /dev/null
  "$ptdp" simulate --plan "$b.json" --profile calibrated.json --trace "$b.after.json" > /dev/null
  "$ptdp" compare --predicted "$b.before.json" --measured "$b.measured.json" --top 0 \
    > "$b.compare.before.txt"
  "$ptdp" compare --predicted "$b.after.json" --measured "$b.measured.json" --svg "$b.after.svg" \
    --top 5 | tee "$b.compare.after.txt"
done

echo "== summary (start: $start; ms; median |error| per instruction over all of them, and over"
echo "   forward, backward and optimizer step only)"
printf '%-3s %-10s %12s %12s %11s %15s\n' "" "profile" "step_pred" "step_meas" "median_all" "median_compute"
for name in $names; do
  for when in before after; do
    read -r sp sm ma mc < <(fields "$name.compare.$when.txt")
    profile=$([ "$when" = before ] && echo start || echo calibrated)
    printf '%-3s %-10s %12s %12s %10s%% %14s%%\n' "$name" "$profile" "$sp" "$sm" "$ma" "$mc"
  done
done
# The fit over A and B1 together (their messages differ in size: the link's latency is fitted too),
# then every layout predicted from it.
if [ -f B1.json ]; then
  echo "== calibrate on A and B1 together"
  "$ptdp" calibrate --plan A.json --measured A.measured.json --plan B1.json \
    --measured B1.measured.json --out calibrated2.json --quantile "${QUANTILE:-0.5}" | grep -v "^  "
  printf '%-3s %-16s %12s %12s %11s %15s\n' "" "profile" "step_pred" "step_meas" "median_all" "median_compute"
  for name in $names; do
    "$ptdp" simulate --plan "$name.json" --profile calibrated2.json --trace "$name.joint.json" > /dev/null
    "$ptdp" compare --predicted "$name.joint.json" --measured "$name.measured.json" --top 0 \
      > "$name.compare.joint.txt"
    read -r sp sm ma mc < <(fields "$name.compare.joint.txt")
    printf '%-3s %-16s %12s %12s %10s%% %14s%%\n' "$name" "calibrated A+B1" "$sp" "$sm" "$ma" "$mc"
  done
fi
echo "files in $work: *.svg (predicted above measured), calibrated.json (A), calibrated2.json (A+B1), the plans and traces, A.instr.txt/.tsv (A's instructions after calibration)"
