#!/usr/bin/env bash
# Bad-input table: each case must exit 2 within the timeout (a hang fails), print exactly one
# line that matches the expected words, and stay under 1 GiB of memory (peak resident set, read by
# /usr/bin/time) inside a cap on address space: 1 GiB, or 2 GiB for `ptdp train`, whose MPI and
# the CUDA backend's libraries (cuDNN, NVRTC: linked, never initialised on the CPU) reserve more
# than 1 GiB of address space before main (under 1 GiB Open MPI's initialisation fails).
# Usage: bad_input.sh PTDP SOURCE_DIR WORK_DIR
set -u
ptdp=$1
src=$2
work=$3
rm -rf "$work" && mkdir -p "$work/dir"
data=$src/tests/planner/data
failures=0

# expect WORDS ARGS...: ARGS run under `timeout 5` and the caps above; WORDS is an ERE.
expect() {
  local words=$1
  shift
  local out rc lines rss cap=1048576
  [[ $1 == train ]] && cap=2097152
  out=$( (ulimit -v $cap; timeout 5 /usr/bin/time -f %M -o "$work/rss" "$ptdp" "$@") 2>&1 >/dev/null)
  rc=$?
  rss=$(tail -n 1 "$work/rss" 2>/dev/null)
  lines=$(printf '%s\n' "$out" | grep -c .)
  if [[ $rc -ne 2 || $lines -ne 1 ]] || ! grep -Eq -- "$words" <<<"$out" ||
     ! [[ $rss =~ ^[0-9]+$ && $rss -lt 1048576 ]]; then
    echo "FAIL: ptdp $*"
    echo "  exit $rc (want 2), $lines lines (want 1), peak RSS ${rss:-?} KiB (want < 1 GiB), want /$words/; got:"
    printf '%s\n' "$out" | head -5 | sed 's/^/    /'
    failures=$((failures + 1))
  else
    echo "ok: ptdp $* -> $out"
  fi
}

tiny=(--model "$data/tiny.json" --cluster "$data/cpu_cluster.json")

# Work proportional to a number: refused up front with the range.
expect "--gpus: 2147483640 is outside 1\.\." plan --cluster selene --gpus 2147483640 --global-batch 8
expect "--global-batch: 8589934592 is outside 1\.\." plan --cluster selene --gpus 8 --global-batch 8589934592
expect "--nodes: .* is outside" plan --cluster selene --nodes 2000000000 --global-batch 8
expect "--gpus: .* is outside" simulate --cluster selene --gpus 2147483640 --global-batch 8
expect "--top: .* is outside 1\.\." plan "${tiny[@]}" --global-batch 8 --top 2000000000
expect "--simulate-top: .* is outside -1\.\." plan "${tiny[@]}" --global-batch 8 --simulate-top 2000000000
expect "--simulate-top: -2 is outside -1\.\." plan "${tiny[@]}" --global-batch 8 --simulate-top -2
expect "--threads: 5000 is outside 1\.\." plan "${tiny[@]}" --global-batch 8 --threads 5000
expect "--threads: 0 is outside 1\.\." plan "${tiny[@]}" --global-batch 8 --threads 0
expect "--buckets: .* is outside 1\.\." simulate "${tiny[@]}" --global-batch 8 --overlap-allreduce --buckets 2000000000
expect "microbatches: 536870911 .* pipeline cells" schedule --microbatches 536870911
expect "microbatches: .* pipeline cells" schedule --pp 2000000 --microbatches 1000 --format order
expect "microbatches: .* pipeline cells" schedule --kind interleaved --pp 4 --vp 1000000 --microbatches 400 --format json
expect "--format: grid: .* too large" schedule --pp 4000 --microbatches 16

# Silently accepted before.
expect "--fix: tp: given more than once" plan "${tiny[@]}" --global-batch 8 --fix tp=2,tp=4
expect "--fix: first_stage_layers: expected a non-negative integer" plan "${tiny[@]}" --global-batch 8 --fix first_stage_layers=-1
expect "first_stage_layers: .* leaves 0 of the 4 layers" plan "${tiny[@]}" --global-batch 8 --fix pp=2,first_stage_layers=4
expect "--fix: stage_layers: 3 counts but pp=2 is fixed" plan "${tiny[@]}" --global-batch 8 --fix pp=2,stage_layers=1/1/2
expect "layout.stage_layers: the counts sum to 5 but the model has 4 layers" plan "${tiny[@]}" --global-batch 8 --fix stage_layers=1/2/1/1

# Paths that are not regular files name the flag.
expect "--model: .* is not a regular file" plan --model "$work/dir" --cluster selene --gpus 8 --global-batch 8
expect "--cluster: .* is not a regular file" plan --model "$data/tiny.json" --cluster "$work/dir" --gpus 8 --global-batch 8
expect "--plan: .* is not a regular file" simulate --plan "$work/dir"
expect "--plan: .* is not a regular file" schedule --plan "$work/dir"
expect "--in: .* is not a regular file" tokenize --in "$work/dir" --out "$work/t.bin"

# A profile with 1e-300 TFLOP/s: a clear error, not an internal check.
awk '/"tflops": \[/ {inside = 1; print; next}
     inside && /\]/ {inside = 0}
     inside {sub(/[0-9.eE+-]+/, "1e-300")}
     /"peak_tflops"/ {peak = 1}
     peak && /"value"/ {sub(/: [0-9.eE+-]+/, ": 1e-300"); peak = 0}
     {print}' "$src/profiles/cpu.json" >"$work/slow_profile.json"
expect "tflops|TFLOP|time|profile" simulate --model "$data/tiny.json" --cluster "$work/slow_profile.json" --gpus 1 --global-batch 8
expect "tflops|TFLOP|time|profile|fits" plan --model "$data/tiny.json" --cluster "$work/slow_profile.json" --gpus 1 --global-batch 8

# Train: --memory-limit and --data, given a valid plan file.
echo '{"name": "one", "profile": "cpu", "gpus_per_node": 1, "nodes": 1}' >"$work/one.json"
if "$ptdp" plan --model "$data/tiny.json" --cluster "$work/one.json" --global-batch 8 \
  --out "$work/plan.json" >/dev/null 2>&1; then
  "$ptdp" tokenize --in "$data/tiny.json" --out "$work/tokens.bin" >/dev/null 2>&1
  t=(train --plan "$work/plan.json" --steps 1 --backend cpu)
  for lim in nanGiB infGiB 1e300GiB 1e20GiB -1MiB 0.5B; do
    expect "--memory-limit" "${t[@]}" --data "$work/tokens.bin" --memory-limit "$lim"
  done
  expect "--data: .* is not a regular file" "${t[@]}" --data "$work/dir"
  # A header claiming 2^62 tokens of 2 bytes: its byte count wraps to 24 bytes in 64 bits.
  printf 'PTDPTOK\0\1\0\0\0\2\0\0\0\0\0\0\0\0\0\0\x40' >"$work/huge.bin"
  expect "header says 4611686018427387904 tokens" "${t[@]}" --data "$work/huge.bin"
  # A 2-byte file: shorter than the header.
  printf 'PT' >"$work/short.bin"
  expect "truncated" "${t[@]}" --data "$work/short.bin"
else
  echo "FAIL: could not write a plan for the train cases"
  failures=$((failures + 1))
fi

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
