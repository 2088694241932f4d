#!/usr/bin/env bash
# ptdp train with and without --overlap-grad-reduce on the CPU, side by side in one run (not part
# of make test): a 4-layer GPT of hidden 512 (12.6M parameters, 50 MB of fp32 gradients) on a short
# sequence, so that the data-parallel all-reduce is a visible share of the step, in three layouts:
# t1 p1 d2 and t1 p2 d2 with 1F1B, and t1 p2 d2 interleaved (v 2), the one where a chunk's
# gradients are final before the rank's last backward (in all three the buckets of a chunk's upper
# layers start during its last backward, under the lower layers' backward). Each layout runs ROUNDS times without and
# with the option, alternating (so both see the same load); the figure is the median of the
# per-step iteration_s (--log; the slowest rank) over steps 2..STEPS of all rounds, and beside it the
# median over rounds of the last step's kReduceGrads interval (--trace; the longest over the
# pipeline ranks): the reduction's time left on the critical path.
# usage: bench/overlap/bench.sh [PTDP] [WORKDIR] [STEPS] [ROUNDS]
#        (defaults: build/tools/ptdp, /tmp/ptdp-overlap-bench, 6, 2)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ptdp=$(realpath "${1:-$root/build/tools/ptdp}")
work=${2:-/tmp/ptdp-overlap-bench}
steps=${3:-6}
rounds=${4:-2}
rm -rf "$work" && mkdir -p "$work" && cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1
cat > model.json <<'J'
{"name": "ovl-4l", "layers": 4, "hidden": 512, "heads": 8, "seq_len": 32, "vocab": 256}
J
"$ptdp" tokenize --in "$root/README.md" --out tokens.bin > /dev/null
median_ms() { python3 -c "import statistics,sys; print(f'{statistics.median(map(float, sys.argv[1:])):.1f}')" "$@"; }
median() { python3 -c "import statistics,sys; print(f'{statistics.median(map(float, sys.argv[1:])) * 1e3:.1f}')" "$@"; }
reduce_ms() {  # TRACE: the longest reduce_grads interval over the pipeline ranks, in ms
  python3 -c "import json,sys; ev=json.load(open(sys.argv[1]))['traceEvents']; print(max(e['dur'] for e in ev if e.get('ph') == 'X' and e['args']['op'] == 'reduce_grads') / 1e3)" "$1"
}
printf '%-24s %5s %13s %13s %16s %16s\n' "layout" "ranks" "off: step ms" "on: step ms" \
  "off: reduce ms" "on: reduce ms"
for layout in "1 1 2 1 1f1b" "1 2 2 1 1f1b" "1 2 2 2 interleaved"; do
  set -- $layout
  tp=$1 pp=$2 dp=$3 vp=$4 sched=$5 np=$(($1 * $2 * $3))
  name="t${tp}p${pp}d${dp}_${sched}"
  "$ptdp" plan --model model.json --cluster cpu --gpus "$np" --global-batch 8 --software ptdp \
    --fix "tp=$tp,pp=$pp,dp=$dp,mbs=1,vp=$vp,schedule=$sched,recompute=none" --top 1 \
    --out "$name.json" > /dev/null
  declare -A times=([off]="" [on]="") reduce=([off]="" [on]="")
  for r in $(seq "$rounds"); do
    for mode in off on; do
      flag=()
      [ "$mode" = on ] && flag=(--overlap-grad-reduce)
      mpirun -np "$np" "$ptdp" train --plan "$name.json" --data tokens.bin --steps "$steps" \
        --log "$name-$mode-$r.jsonl" --trace "$name-$mode-$r.trace.json" "${flag[@]}" \
        > "$name-$mode-$r.out"
      reduce[$mode]+=" $(reduce_ms "$name-$mode-$r.trace.json")"
      times[$mode]+=" $(grep -o '"step":[0-9]*,.*"iteration_s":[0-9.e-]*' "$name-$mode-$r.jsonl" |
        sed -n 's/"step":\([0-9]*\),.*"iteration_s":\(.*\)/\1 \2/p' | awk '$1 > 1 {print $2}' | tr '\n' ' ')"
    done
  done
  printf '%-24s %5d %13s %13s %16s %16s\n' "$name" "$np" "$(median ${times[off]})" \
    "$(median ${times[on]})" "$(median_ms ${reduce[off]})" "$(median_ms ${reduce[on]})"
done
