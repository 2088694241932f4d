#!/usr/bin/env bash
# Re-planning against a straggler (issue 13's acceptance; not part of make test: it times runs).
# 2 ranks (t1 p2 d1, one per core: no oversubscription) train an 8-layer GPT split 4/4; world
# rank 1 (pipeline stage 1, which also holds the output layer) is slowed SLOW-fold (default 3;
# --slow-rank 1 --slow-factor F, a sleep after each forward and backward). Runs:
#   base    no straggler, the even split
#   slow    rank 1 slowed, the even split
#   adapt   rank 1 slowed, --monitor-every MONITOR (default 4) --adapt: the first window names
#           rank 1, rank 0 re-plans with the compute calibrated to that window (measured over
#           modelled per stage) and every rank switches to the best split / schedule after it
#   split   rank 1 slowed, started in the layout the first adapt run switched to (the split's
#           own worth, without the slow first window and the switch)
# in the order base slow adapt split, then reversed, then forward again (REPEATS rounds, default
# 3), so the machine's drift (2 cores shared with other jobs) cancels to first order. Printed per
# kind: tokens/s, the mean over steps 5..STEPS of --log's tokens_per_s, as mean (min-max) over
# the rounds; the lost throughput recovered, (adapt - slow) / (base - slow); the monitor line
# that first names the straggler and the re-plan line; the adapt runs' losses against base.
# REPORT=1 prints the table of an existing WORKDIR without running anything.
# ADAPT_FLAGS adds flags to the adapt runs (e.g. --adapt-calibrate).
# usage: bench/adapt/bench.sh [PTDP] [WORKDIR] [STEPS]  (defaults: build/tools/ptdp, /tmp/ptdp-adapt-bench, 20)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ptdp=${1:-$root/build/tools/ptdp}
work=${2:-/tmp/ptdp-adapt-bench}
steps=${3:-20}
slow=${SLOW:-3} monitor=${MONITOR:-4} repeats=${REPEATS:-3}
if [ -z "${REPORT:-}" ]; then rm -rf "$work" && mkdir -p "$work"; fi
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
cat > model.json <<'J'
{"name": "small-8l", "layers": 8, "hidden": 128, "heads": 4, "seq_len": 128, "vocab": 256}
J
"$ptdp" tokenize --in "$root/README.md" --out tokens.bin > /dev/null
layout=${LAYOUT:-tp=1,pp=2,dp=1,mbs=1,vp=1,schedule=1f1b,recompute=none}
plan() {  # LAYOUT OUT
  "$ptdp" plan --model model.json --cluster cpu --gpus 2 --global-batch 8 --fix "$1" --software ptdp --top 1 \
    --out "$2" > /dev/null
}
plan "$layout" plan.json
train() {  # NAME PLAN [flags]
  local name=$1 p=$2
  shift 2
  mpirun -np 2 "$ptdp" train --plan "$p" --data tokens.bin --steps "$steps" --log "$name.jsonl" \
    "$@" > "$name.out"
}
mean_tps() {  # LOG: mean tokens_per_s of steps >= 5
  python3 -c "
import json
v = [json.loads(l)['tokens_per_s'] for l in open('$1') if json.loads(l)['step'] >= 5]
print(sum(v) / len(v))"
}
run() {  # KIND ROUND
  local k=$1 i=$2
  case $k in
    base) train "base$i" plan.json ;;
    slow) train "slow$i" plan.json --slow-rank 1 --slow-factor "$slow" ;;
    adapt)
      train "adapt$i" plan.json --slow-rank 1 --slow-factor "$slow" --monitor-every "$monitor" \
        --adapt ${ADAPT_FLAGS:-} --expect-losses base1.jsonl
      if [ ! -f split.json ]; then
        local to
        to=$(sed -n 's/^ switched after step [0-9]* to \([^ ]*\) .*/\1/p' "adapt$i.out" | head -1)
        [ -n "$to" ] && plan "$to" split.json && echo "$to" > split.layout
      fi
      ;;
    split) [ -f split.json ] && train "split$i" split.json --slow-rank 1 --slow-factor "$slow" ;;
  esac
  return 0
}
for i in $(seq 1 "$repeats"); do
  [ -z "${REPORT:-}" ] || break
  if [ $((i % 2)) = 1 ]; then order="base slow adapt split"; else order="split adapt slow base"; fi
  for k in $order; do run "$k" "$i"; done
done
stats() {  # KIND: "mean min max" of its rounds' tokens/s (nothing when it never ran)
  local logs=()
  for i in $(seq 1 "$repeats"); do [ -f "$1$i.jsonl" ] && logs+=("$(mean_tps "$1$i.jsonl")"); done
  [ ${#logs[@]} -gt 0 ] || return 0
  local IFS=,
  python3 -c "v = [${logs[*]}]; print(sum(v) / len(v), min(v), max(v))"
}
read -r b_mean b_min b_max <<< "$(stats base)"
read -r s_mean s_min s_max <<< "$(stats slow)"
read -r a_mean a_min a_max <<< "$(stats adapt)"
echo "first monitor line naming the straggler, and the re-plan (adapt1):"
grep -m1 "stragglers: rank" adapt1.out | cut -c1-200
grep -hE "^ (adapt|switched)" adapt1.out | cut -c1-300
echo "adapt runs' losses against base1:"
grep -h "losses vs reference" adapt*.out
printf '%-52s %10s %18s\n' "run (2 ranks, $layout)" "tokens/s" "(min-max, $repeats runs)"
printf '%-52s %10.0f %8.0f-%-8.0f\n' "no straggler" "$b_mean" "$b_min" "$b_max"
printf '%-52s %10.0f %8.0f-%-8.0f\n' "rank 1 slowed ${slow}x" "$s_mean" "$s_min" "$s_max"
printf '%-52s %10.0f %8.0f-%-8.0f\n' "rank 1 slowed ${slow}x, --adapt" "$a_mean" "$a_min" "$a_max"
if [ -f split.layout ]; then
  read -r p_mean p_min p_max <<< "$(stats split)"
  printf '%-52s %10.0f %8.0f-%-8.0f\n' "rank 1 slowed ${slow}x, started in $(cat split.layout | \
    sed 's/,recompute.*//')" "$p_mean" "$p_min" "$p_max"
fi
# Per round (its runs a few minutes apart, so the machine's drift matters least there).
for i in $(seq 1 "$repeats"); do
  [ -f "adapt$i.jsonl" ] || continue
  python3 -c "
b, s, a = $(mean_tps "base$i.jsonl"), $(mean_tps "slow$i.jsonl"), $(mean_tps "adapt$i.jsonl")
print('  round $i: base %.0f, slowed %.0f, adapt %.0f tokens/s: %.1f%% of the lost throughput, '
      '%.1f%% of the lost step time recovered' % (b, s, a, 100 * (a - s) / (b - s),
      100 * (1 / s - 1 / a) / (1 / s - 1 / b)))"
done
# Recovered: of the lost throughput, and of the lost step time (1/throughput). The ceiling for a
# perfectly balanced split with one of p GPUs F times slower: (p-1)/p of the throughput, F/(F+1)
# of the step time (docs/runtime.md "--adapt").
python3 -c "
b, s, a = $b_mean, $s_mean, $a_mean
print('%-52s %9.1f%%   (ceiling, stages of equal work: 50%%)' %
      ('lost throughput recovered by --adapt', 100 * (a - s) / (b - s)))
print('%-52s %9.1f%%   (ceiling, equal work: %.0f%%)' % ('lost step time recovered by --adapt',
      100 * (1 / s - 1 / a) / (1 / s - 1 / b), 100 * $slow / ($slow + 1)))"
