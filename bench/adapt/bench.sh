#!/usr/bin/env bash
# Re-planning against a straggler (issue 13's acceptance; not part of make test: it times runs).
# 4 ranks (t1 p2 d2, oversubscribed on this machine) train a small GPT; world rank 2 is slowed 3x
# (--slow-rank 2 --slow-factor 3, a sleep after each forward and backward). Printed: tokens/s
# without the straggler, with it, and with it under --adapt (monitor windows of MONITOR steps,
# default 4: re-planned after the first, a switch on trial until the next), the fraction of the
# lost throughput --adapt recovers, and for attribution the adapted layout's own tokens/s without
# a straggler. tokens/s: the mean over steps 5..STEPS of --log's tokens_per_s. LAYOUT (env) is
# the starting layout's --fix.
# usage: bench/adapt/bench.sh [PTDP] [WORKDIR] [STEPS]  (defaults: build/tools/ptdp, /tmp/ptdp-adapt-bench, 20)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ptdp=${1:-$root/build/tools/ptdp}
work=${2:-/tmp/ptdp-adapt-bench}
steps=${3:-20}
rm -rf "$work" && mkdir -p "$work" && cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1
cat > model.json <<'J'
{"name": "small-8l", "layers": 8, "hidden": 128, "heads": 4, "seq_len": 64, "vocab": 256}
J
"$ptdp" tokenize --in "$root/README.md" --out tokens.bin > /dev/null
layout=${LAYOUT:-tp=1,pp=2,dp=2,mbs=1,vp=1,schedule=1f1b,recompute=none}
"$ptdp" plan --model model.json --cluster cpu --gpus 4 --global-batch 16 --fix "$layout" --top 1 \
  --out plan.json > /dev/null
train() {  # NAME [flags]
  local name=$1
  shift
  mpirun -np 4 "$ptdp" train --plan plan.json --data tokens.bin --steps "$steps" --log "$name.jsonl" \
    "$@" > "$name.out"
}
mean_tps() {  # LOG: mean tokens_per_s of steps >= 5
  python3 -c "
import json, sys
v = [json.loads(l)['tokens_per_s'] for l in open('$1') if json.loads(l)['step'] >= 5]
print(sum(v) / len(v))"
}
# The machine's speed drifts while other jobs come and go, so the three runs go in the order
# base, slow, adapt, adapt, slow, base (drift cancels to first order) and each figure is the mean
# of its two runs.
for name in base slow adapt adapt2 slow2 base2; do
  case $name in
    base*) train "$name" ;;
    slow*) train "$name" --slow-rank 2 --slow-factor 3 ;;
    adapt*) train "$name" --slow-rank 2 --slow-factor 3 --monitor-every "${MONITOR:-4}" --adapt \
              --expect-losses base.jsonl ;;
  esac
done
pair() { python3 -c "print(($(mean_tps "$1.jsonl") + $(mean_tps "${1}2.jsonl")) / 2)"; }
base=$(pair base) slow=$(pair slow) adapt=$(pair adapt)
grep -hE "^ (adapt|switched)" adapt.out adapt2.out | cut -c1-220
grep -h "losses vs reference" adapt.out adapt2.out
adapted=$(sed -n 's/^ switched after step [0-9]* to \([^ ]*\) .*/\1/p' adapt.out | tail -1)
printf '%-44s %12s\n' "run (4 ranks, $layout; mean of 2)" "tokens/s"
printf '%-44s %12.0f\n' "no straggler" "$base" "rank 2 slowed 3x" "$slow" "rank 2 slowed 3x, --adapt" "$adapt"
python3 -c "print('%-44s %11.1f%%' % ('lost throughput recovered', 100 * ($adapt - $slow) / ($base - $slow)))"
if [ -n "$adapted" ]; then
  "$ptdp" plan --model model.json --cluster cpu --gpus 4 --global-batch 16 --fix "$adapted" --top 1 \
    --out plan.json > /dev/null
  train adapted_base
  printf '%-44s %12.0f\n' "the adapted layout, no straggler (one run)" "$(mean_tps adapted_base.jsonl)"
  echo "adapted layout: $adapted"
fi
