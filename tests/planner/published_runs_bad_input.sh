#!/usr/bin/env bash
# published_runs.py refuses a bad data file before it runs ptdp: non-zero exit and one line on
# stderr naming the field and the reason. Each case mutates a copy of the real data file.
# usage: published_runs_bad_input.sh HARNESS PTDP RUNS.json WORKDIR
set -u
harness=$1 ptdp=$2 runs=$3 work=$4
mkdir -p "$work"
fail=0

# case NAME EXPECTED-SUBSTRING PYTHON-MUTATION (d is the loaded data file)
case_() {
  local name=$1 want=$2 mutation=$3 file="$work/$1.json"
  if [ "$name" = malformed ]; then
    printf '{"runs": [' >"$file"
  else
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); $mutation; json.dump(d, open(sys.argv[2], 'w'))" \
      "$runs" "$file"
  fi
  local err rc
  err=$(python3 "$harness" "$ptdp" "$file" "$work/out" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -eq 0 ] || [ "$(printf '%s\n' "$err" | wc -l)" -ne 1 ] || [[ "$err" != *"$want"* ]]; then
    echo "FAIL $name: rc=$rc, stderr: $err (wanted one line with: $want)"
    fail=1
  else
    echo "ok   $name: $err"
  fi
}

case_ zero_gpus 'runs[0].gpus: expected a positive integer, got 0' 'd["runs"][0]["gpus"] = 0'
case_ unknown_source 'runs[1].source: nowhere is not a key of sources' 'd["runs"][1]["source"] = "nowhere"'
case_ unknown_metric 'runs[0].published.metric: mfu is not one of' 'd["runs"][0]["published"]["metric"] = "mfu"'
case_ missing_fixed 'runs[2].fixed: missing' 'del d["runs"][2]["fixed"]'
case_ duplicate_id 'runs[1].id: megatron-gpt-1.7b given twice' 'd["runs"][1]["id"] = d["runs"][0]["id"]'
case_ band_inside_ten 'known_misses.megatron-gpt-1.7b.band: expected [lo, hi] in percent outside (-10, 10)' \
  'd["known_misses"]["megatron-gpt-1.7b"] = {"band": [-5, 5], "why": "x"}'
case_ miss_of_no_run 'known_misses.no-such-run: no run has this id' \
  'd["known_misses"]["no-such-run"] = {"band": [-30, -20], "why": "x"}'
case_ unknown_variant 'runs[0].cluster: "nowhere" is not a key of cluster_variants' \
  'd["runs"][0]["cluster"] = "nowhere"'
case_ variant_base 'cluster_variants.dgx-h100-flash-attention-2.base: no profile' \
  'd["cluster_variants"]["dgx-h100-flash-attention-2"]["base"] = "no-such-profile"'
case_ unknown_software 'runs[0].software: "nowhere" is not a key of software_variants' \
  'd["runs"][0]["software"] = "nowhere"'
case_ software_base 'software_variants.megatron-core-no-tp-overlap.base: no software profile' \
  'd["software_variants"]["megatron-core-no-tp-overlap"]["base"] = "no-such-profile"'
case_ software_fact 'software_variants.megatron-core-no-tp-overlap.set.tp_comm_overlap_fraction.source: missing' \
  'del d["software_variants"]["megatron-core-no-tp-overlap"]["set"]["tp_comm_overlap_fraction"]["source"]'
case_ unknown_count 'published.flops_formula: made-up is not a count this harness knows' \
  'd["flops_formulas"]["made-up"] = "x"; d["runs"][0]["published"]["flops_formula"] = "made-up"'
case_ malformed 'published_runs.py:' ''
# A ptdp error other than "no layout fits" stops the harness instead of passing as infeasible.
case_ fix_unknown_key 'run megatron-gpt-1.7b: ptdp plan: error: --fix: unknown key "bogus"' \
  'd["runs"][0]["fixed"] += ",bogus=1"'
exit $fail
