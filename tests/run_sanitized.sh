#!/usr/bin/env bash
# Runs unit-test binaries of the sanitizer build (the Makefile's san-test, docs/fuzzing.md) under
# AddressSanitizer + UndefinedBehaviorSanitizer, JOBS at a time: each binary is one single-threaded
# process, so two at a time halve the wall time on a 2-core machine without changing what runs.
# Any UB aborts (halt_on_error), leaks are errors. Each binary's output goes to
# BUILD/san-logs/NAME.log and is printed, in the order given, once all have run; exit 1 naming the
# binaries that failed.
# usage: tests/run_sanitized.sh BUILD JOBS TEST...
set -uo pipefail
build=${1:?usage: tests/run_sanitized.sh BUILD JOBS TEST...}
jobs=${2:?usage: tests/run_sanitized.sh BUILD JOBS TEST...}
shift 2
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "run_sanitized.sh: JOBS: '$jobs' is not a positive integer" >&2; exit 2; }
[ $# -gt 0 ] || { echo "run_sanitized.sh: no TEST named" >&2; exit 2; }
logs=$build/san-logs
mkdir -p "$logs"
declare -A bins
for t in "$@"; do
  bins[$t]=$(find "$build/tests" -name "$t" -type f -perm -u+x | head -n 1)
  [ -n "${bins[$t]}" ] || { echo "run_sanitized.sh: $t is not built in $build/tests" >&2; exit 2; }
  rm -f "$logs/$t.rc"
done

run_one() {  # TEST: its output in san-logs/TEST.log, its exit status in san-logs/TEST.rc
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "${bins[$1]}" --gtest_brief=1 > "$logs/$1.log" 2>&1
  echo $? > "$logs/$1.rc"
}

running=0
for t in "$@"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  run_one "$t" &
  running=$((running + 1))
done
wait

failed=()
for t in "$@"; do
  echo "== ${bins[$t]} (ASan + UBSan)"
  cat "$logs/$t.log"
  rc=$(cat "$logs/$t.rc" 2> /dev/null || echo 1)
  [ "$rc" = 0 ] || failed+=("$t (exit $rc)")
done
[ ${#failed[@]} -eq 0 ] || { echo "failed under the sanitizers: ${failed[*]}"; exit 1; }
