#!/usr/bin/env bash
# `ptdp profile --backend cpu --quick` end to end through the CLI: the file it writes reads back
# through core's strict reader (profile_file_check), bad input exits 2 and leaves no file.
# usage: cli_test.sh PTDP CHECKER WORKDIR [mpi NP]
set -euo pipefail
ptdp=$1 check=$2 work=$3
mkdir -p "$work"
# The single-process and the mpi variants may run at once (ctest -j): each its own files.
if [ "${4:-}" = mpi ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
  . "$(dirname "$0")/../mpi_session.sh"
  out="$work/cpu-quick-mpi.json"
  rm -f "$out" "$work/raw-mpi.json"
  timeout 120 mpirun -np "$5" --oversubscribe "$ptdp" profile --backend cpu --quick --out "$out" \
    --raw "$work/raw-mpi.json"
  "$check" "$out" "$5" measured
  grep -q '"op": "all_reduce"' "$work/raw-mpi.json"
  exit 0
fi
out="$work/cpu-quick.json"
rm -f "$out" "$work/raw.json"
timeout 60 "$ptdp" profile --backend cpu --quick --out "$out" --raw "$work/raw.json" \
  --attention-grid 32,64 8,16
"$check" "$out" 1 estimated
grep -q '"gemm"' "$work/raw.json"
# --attention-grid: four points timed (quick's --attention shape 1 64 2 16 among them), written
# as the profile's attention_table beside the scalar rate.
grep -q '"grid"' "$work/raw.json"
grep -q '"attention_table"' "$out"
grep -q '"attention_tflops"' "$out"
# Bad input: exit 2, one line naming the flag, no file written.
bad="$work/bad.json"
rm -f "$bad"
set +e
msg=$("$ptdp" profile --backend tpu --out "$bad" 2>&1); rc=$?
set -e
[ $rc = 2 ] || { echo "expected exit 2 for --backend tpu, got $rc: $msg"; exit 1; }
grep -q -- "--backend" <<<"$msg" || { echo "message does not name --backend: $msg"; exit 1; }
[ ! -e "$bad" ] || { echo "a file was written on bad input"; exit 1; }
set +e
msg=$("$ptdp" profile --backend cpu --quick --out "$bad" --peak-tflops 5 2>&1); rc=$?
set -e
[ $rc = 2 ] || { echo "expected exit 2 for --peak-tflops without a source, got $rc: $msg"; exit 1; }
[ ! -e "$bad" ] || { echo "a file was written on bad input"; exit 1; }
set +e
msg=$("$ptdp" profile --backend cpu --quick --out "$bad" --attention-grid 64,32 8,16 2>&1); rc=$?
set -e
[ $rc = 2 ] || { echo "expected exit 2 for a decreasing --attention-grid, got $rc: $msg"; exit 1; }
grep -q -- "--attention-grid" <<<"$msg" || { echo "message does not name --attention-grid: $msg"; exit 1; }
[ "$(wc -l <<<"$msg")" = 1 ] || { echo "more than one line: $msg"; exit 1; }
[ ! -e "$bad" ] || { echo "a file was written on bad input"; exit 1; }
echo "cli_test: ok"
