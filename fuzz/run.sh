#!/usr/bin/env bash
# Runs the libFuzzer harnesses (docs/fuzzing.md): fuzz/run.sh BUILD_DIR SECONDS [NAME...]
# BUILD_DIR was configured with -DPTDP_FUZZ=ON (the Makefile's fuzz-build). Each fuzzer runs for
# SECONDS over its seeds (fuzz/corpus/NAME, read only) and a working corpus in
# BUILD_DIR/fuzz-work/NAME/corpus (kept between runs), FUZZ_JOBS at a time (default 1: one after
# another); it then prints each one's libFuzzer final statistics and one summary line per fuzzer.
# Exit 1 when any fuzzer found a crash, a sanitizer report, a timeout (-timeout=5 s per input) or
# an allocation past the limits (-malloc_limit_mb=1024 for one allocation, -rss_limit_mb=2048 for
# the process, ASan's shadow included); the input that did it is kept in
# BUILD_DIR/fuzz-work/NAME/artifacts/.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: fuzz/run.sh BUILD_DIR SECONDS [NAME...]}
seconds=${2:?usage: fuzz/run.sh BUILD_DIR SECONDS [NAME...]}
shift 2
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(model cluster plan program fix token_file checkpoint hf_gpt2 hf_llama)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# FUZZ_JOBS (default 1) fuzzers run at a time: each is one single-threaded process, so on an idle
# machine of at least that many cores each gets the CPU it would get alone (`make test` runs 2).
jobs=${FUZZ_JOBS:-1}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz/run.sh: FUZZ_JOBS: '$jobs' is not a positive integer" >&2; exit 2; }
for name in "${names[@]}"; do
  [ -x "$build/fuzz/fuzz_$name" ] || { echo "fuzz/run.sh: $build/fuzz/fuzz_$name is not built" >&2; exit 2; }
done

fuzz_one() {  # NAME: runs one fuzzer, its exit status in fuzz-work/NAME/rc
  local name=$1 work=$build/fuzz-work/$1 tmp dict=()
  mkdir -p "$work/corpus" "$work/artifacts"
  rm -f "$work/rc"
  # Scratch files of the harnesses that read a path (cluster, token_file): in memory where possible.
  tmp=$(mktemp -d "${PTDP_FUZZ_TMP:-$([ -w /dev/shm ] && echo /dev/shm || echo "$work")}/ptdp-fuzz-XXXXXX")
  case $name in model | cluster | plan | program | checkpoint | hf_gpt2 | hf_llama) dict=(-dict="$here/json.dict") ;; esac
  TMPDIR=$tmp "$build/fuzz/fuzz_$name" -max_total_time="$seconds" -print_final_stats=1 -timeout=5 \
    -rss_limit_mb=2048 -malloc_limit_mb=1024 -artifact_prefix="$work/artifacts/" "${dict[@]}" \
    "$work/corpus" "$here/corpus/$name" >"$work/log" 2>&1
  echo $? > "$work/rc"
  rm -rf "$tmp"
}

running=0
for name in "${names[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  echo "== fuzz_$name: ${seconds} s"
  fuzz_one "$name" &
  running=$((running + 1))
done
wait

failed=()
summary=()
for name in "${names[@]}"; do
  work=$build/fuzz-work/$name
  rc=$(cat "$work/rc" 2>/dev/null || echo 1)
  echo "== fuzz_$name"
  grep -E '^stat::|^Done ' "$work/log"
  last=$(grep -E '(DONE|INITED|pulse|NEW|REDUCE) +cov:' "$work/log" | tail -1)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
  if [ "$rc" -ne 0 ]; then
    failed+=("$name")
    echo "fuzz_$name FAILED (exit $rc); the log's end ($work/log):"
    tail -n 40 "$work/log"
    ls -l "$work/artifacts"
  fi
  summary+=("$(printf '%-11s %-6s %8s s %12s execs  cov %6s  ft %7s' "$name" \
    "$([ "$rc" -eq 0 ] && echo ok || echo FAILED)" "$seconds" "${execs:-?}" "${cov:-?}" "${ft:-?}")")
done
echo "== fuzz summary"
printf '%s\n' "${summary[@]}"
[ ${#failed[@]} -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
