#!/usr/bin/env bash
# CLI table test of the input bounds: each bad file, made here on the fly, must make `ptdp plan`
# or `ptdp simulate --plan` exit 2 within 2 seconds with exactly one line naming the problem.
# usage: cli_bounds.sh PTDP WORKDIR
set -uo pipefail
ptdp=$1 work=$2
mkdir -p "$work"
fails=0

model='"name": "t", "layers": 4, "hidden": 64, "heads": 4, "seq_len": 32, "vocab": 256'
plan() {  # plan MODEL_JSON LAYOUT_JSON
  printf '{"ptdp_plan_version": 2, "global_batch": 8, "model": {%s}, "cluster": {"name": "cpu", "gpus": 2, "gpus_per_node": 2}, "layout": {%s}}' "$1" "$2"
}
deep() {  # deep N: N nested arrays
  head -c "$1" /dev/zero | tr '\0' '['
  head -c "$1" /dev/zero | tr '\0' ']'
}

printf '{%s, "dropout": 1e400}' "$model" > "$work/huge_number.json"
printf '{%s, "layers": 8}' "$model" > "$work/duplicate_key.json"
deep 100000 > "$work/deep.json"
plan "$model" '"tp": 1, "pp": 65536, "dp": 1, "mbs": 1, "vp": 65536, "schedule": "interleaved"' \
  > "$work/pp_vp.json"
plan "${model/\"hidden\": 64/\"hidden\": 4000000000000000000}" '"tp": 1, "pp": 2, "dp": 1, "mbs": 1' \
  > "$work/hidden.json"
plan "${model/\"vocab\": 256/\"vocab\": 9000000000000000000}" '"tp": 1, "pp": 2, "dp": 1, "mbs": 1' \
  > "$work/vocab.json"
plan "${model/\"layers\": 4/\"layers\": 1000000}" '"tp": 1, "pp": 2, "dp": 1, "mbs": 1' \
  > "$work/layers.json"
{ plan "$model" '"tp": 1, "pp": 2, "dp": 1, "mbs": 1' | head -c -1; printf ', "search": '; deep 300000; printf '}'; } \
  > "$work/deep_search.json"
printf '{"profile": "selene", "gpus_per_node": 10000000000}' > "$work/gpn.json"
printf '{"profile": "selene", "gpus_per_node": 1024, "nodes": 65536}' > "$work/nodes.json"

check() {  # check NAME REGEX ARGS...
  local name=$1 regex=$2
  shift 2
  local out rc start end
  start=$(date +%s%N)
  out=$(timeout 10 "$ptdp" "$@" 2>&1)
  rc=$?
  end=$(date +%s%N)
  local ms=$(((end - start) / 1000000)) lines
  lines=$(printf '%s\n' "$out" | wc -l)
  if [[ $rc -ne 2 || $lines -ne 1 || ! $out =~ $regex || $ms -gt 2000 ]]; then
    echo "FAIL $name: rc=$rc lines=$lines ${ms}ms: $out"
    fails=$((fails + 1))
  else
    echo "ok   $name (${ms}ms): $out"
  fi
}

p=(plan --cluster selene --gpus 8 --global-batch 8)
check huge_number "dropout: number 1e400 is outside the range of a double" "${p[@]}" --model "$work/huge_number.json"
check duplicate_key "layers: duplicate key" "${p[@]}" --model "$work/duplicate_key.json"
check deep "nested deeper than 64 levels" "${p[@]}" --model "$work/deep.json"
check dev_zero "'/dev/zero' is not a regular file" "${p[@]}" --model /dev/zero
check directory "not a regular file" "${p[@]}" --model "$work/"
check pp_vp "pp: 65536 is outside \[1, 10000\]" simulate --plan "$work/pp_vp.json"
check hidden "plan.model.hidden: 4000000000000000000 is outside \[1, 1048576\]" simulate --plan "$work/hidden.json"
check vocab "plan.model.vocab: 9000000000000000000 is outside \[1, 16777216\]" simulate --plan "$work/vocab.json"
check layers "plan.model.layers: 1000000 is outside \[1, 10000\]" simulate --plan "$work/layers.json"
check deep_search "search.*nested deeper than 64 levels" simulate --plan "$work/deep_search.json"
check gpus_per_node "gpus_per_node: 10000000000 is outside \[1, 1024\]" plan --cluster "$work/gpn.json" --model tiny --global-batch 8
check nodes "nodes x gpus_per_node: 67108864 GPUs is outside" plan --cluster "$work/nodes.json" --model tiny --global-batch 8

[[ $fails -eq 0 ]] || { echo "$fails case(s) failed"; exit 1; }
