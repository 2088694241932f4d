#!/usr/bin/env bash
# ptdp plan replays every layout that fits on --threads threads: the plan file and the ranking
# (less the search's own timing) are the same on 1 thread and on 3.
# usage: threads_cli.sh PTDP WORKDIR
set -euo pipefail
ptdp=$1 work=$2/threads_cli
rm -rf "$work" && mkdir -p "$work" && cd "$work"
args=(plan --model gpt-1.7b --cluster selene --gpus 8 --global-batch 16 --selective-recompute
      --sequence-parallel --fused-attention --top 20 --format json)
"$ptdp" "${args[@]}" --threads 1 --out one.json > one.txt
"$ptdp" "${args[@]}" --threads 3 --out three.json > three.txt
# Every key but the search's wall time and rate.
strip() {
  python3 -c '
import json, sys
def drop(x):
    if isinstance(x, dict):
        return {k: drop(v) for k, v in x.items() if k not in ("seconds", "evaluations_per_s")}
    return [drop(v) for v in x] if isinstance(x, list) else x
print(json.dumps(drop(json.load(open(sys.argv[1])))))' "$1"
}
[ "$(strip one.json)" = "$(strip three.json)" ] || { echo "plan files differ"; exit 1; }
[ "$(strip one.txt)" = "$(strip three.txt)" ] || { echo "rankings differ"; exit 1; }
feasible=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["search"]["feasible"])' one.txt)
[ "$feasible" -gt 1000 ] || { echo "only $feasible layouts fit"; exit 1; }
echo "threads: $feasible layouts simulated, the same plan and ranking on 1 and 3 threads"
