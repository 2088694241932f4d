#!/usr/bin/env bash
# Validation under mpirun (docs/runtime.md "Validation"): `ptdp train --eval-data F --eval-every 3
# --eval-iters 2`, 6 steps of the 4-layer GPT with dropout 0.1 (global batch 16), the validation
# file another text than the training one.
#   LAYOUT (t2p2d2_1f1b | t1p2d1_zbv | t2p2d1_interleaved_seqpar | t1p1d1_cp2_fused, and
#       t2p2d2_1f1b_guard on the guard device, whose tensors fault on host access; t2p2d2_seqpar_moe
#       the Llama-style model with a mixture of experts, PTDP_TEST_ARCH=moe): the layout's
#       eval losses after steps 3 and 6 (and only there) within 1e-5 (relative) of one process's,
#       its training losses within 1e-5 of one process's, and equal bit for bit to the same layout
#       trained without --eval-data (a validation changes nothing of the training); the memory
#       within 1% of the ledger (a validation holds no more than a training step)
#   forward     one process, 3 steps saved: the eval loss after step 3 (the last) equals the mean of `ptdp
#       forward --checkpoint`'s losses on the validation file's batches 1 and 2 (--data eval.bin
#       --step 1 and 2) within 1e-6: the right file, the right sequences, no dropout (the forward has
#       none), the mean over all tokens
#   bad_input   --eval-every without --eval-data, and an --eval-data that does not exist: exit 2,
#       one line naming the flag
# usage: evaluate.sh PTDP WORKDIR CASE
set -euo pipefail
ptdp=$(realpath "$1")
work=$2 case=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"  # OpenMPI as root, oversubscribed; fail; fresh_dir_with_data
fresh_dir_with_data "eval-$case"
[[ "$case" == *_moe ]] && export PTDP_TEST_ARCH=moe  # both sides: the layout and one process
eval_text=/usr/share/common-licenses/Apache-2.0
[ -f "$eval_text" ] || eval_text="$here/equivalence.sh"
"$ptdp" tokenize --in "$eval_text" --out eval.bin > /dev/null || fail "tokenize the eval text"
plan() {  # NAME TP PP DP VP SCHED [ENV...]
  local name=$1 tp=$2 pp=$3 dp=$4 vp=$5 sched=$6
  shift 6
  env "$@" "$here/write_plan.sh" "$ptdp" "$name.json" 4 0.1 256 16 "$tp" "$pp" "$dp" 2 "$vp" \
    "$sched" none true
}
train() {  # NAME NP [flags]: NAME.jsonl, NAME.out
  local name=$1 np=$2
  shift 2
  timeout 120 mpirun -np "$np" "$ptdp" train --plan "$name.json" --data data.bin --steps 6 \
    --log "$name.jsonl" "$@" > "$name.out" 2>&1 || { cat "$name.out"; fail "ptdp train $name $*"; }
}
field() { grep -o "\"$1\":[^,}]*" "$2" | cut -d: -f2; }
evals=(--eval-data eval.bin --eval-every 3 --eval-iters 2)

if [ "$case" = bad_input ]; then
  plan one 1 1 1 1 1f1b
  for args in "--eval-every 3|--eval-every: needs --eval-data" \
              "--eval-data missing.bin|--eval-data: "; do
    flags=${args%%|*} want=${args#*|}
    # shellcheck disable=SC2086
    "$ptdp" train --plan one.json --data data.bin --steps 2 $flags > bad.out 2>&1 && fail "$flags ran"
    rc=$?
    [ "$rc" -eq 2 ] || { cat bad.out; fail "$flags: exit $rc, want 2"; }
    [ "$(wc -l < bad.out)" -eq 1 ] && grep -qF -e "$want" bad.out || { cat bad.out; fail "$flags: the error line"; }
    echo "$flags: $(cat bad.out)"
  done
  echo PASS
  exit 0
fi

plan one 1 1 1 1 1f1b
if [ "$case" = forward ]; then
  "$ptdp" train --plan one.json --data data.bin --steps 3 --log one.jsonl --eval-data eval.bin \
    --eval-iters 2 --save ck > one.out 2>&1 || { cat one.out; fail "ptdp train --steps 3"; }
  for k in 1 2; do
    "$ptdp" forward --checkpoint ck --data eval.bin --step "$k" --global-batch 16 > "fwd$k.out" 2>&1 ||
      { cat "fwd$k.out"; fail "ptdp forward --step $k"; }
  done
  f1=$(sed -n 's/.*loss \([0-9.]*\) nats.*/\1/p' fwd1.out) f2=$(sed -n 's/.*loss \([0-9.]*\) nats.*/\1/p' fwd2.out)
  ev=$(field eval_loss one.jsonl | tail -1)
  awk -v a="$f1" -v b="$f2" -v e="$ev" 'BEGIN {
    m = (a + b) / 2; d = (e > m ? e - m : m - e) / m
    printf "eval loss %.9f, ptdp forward on batches 1 and 2: %.9f and %.9f (mean %.9f): relative %.2e (tolerance 1e-6)\n", e, a, b, m, d
    exit !(d <= 1e-6) }' || fail "the eval loss is not the forward's"
  echo PASS
  exit 0
fi
train one 1 "${evals[@]}"
backend=()
case "$case" in
  t2p2d2_1f1b) plan lay 2 2 2 1 1f1b; np=8 ;;
  t2p2d2_1f1b_guard) plan lay 2 2 2 1 1f1b; np=8; backend=(--backend cpu-guard) ;;
  t1p2d1_zbv) plan lay 1 2 1 2 zb-v; np=2 ;;
  t2p2d1_interleaved_seqpar) plan lay 2 2 1 2 interleaved PTDP_TEST_SEQ_PARALLEL=true; np=4 ;;
  t1p1d1_cp2_fused) plan lay 1 1 1 1 1f1b PTDP_TEST_CP=2 PTDP_TEST_FUSED_ATTENTION=true; np=2 ;;
  t2p2d2_seqpar_moe) plan lay 2 2 2 1 1f1b PTDP_TEST_SEQ_PARALLEL=true; np=8 ;;
  *) fail "unknown case $case" ;;
esac
train lay "$np" "${evals[@]}" --expect-losses one.jsonl --memory-tol 0.01 "${backend[@]}"
cp lay.json plain.json
train plain "$np" "${backend[@]}"
[ "$(grep -c eval_loss one.jsonl)" -eq 2 ] || fail "one process: eval_loss on $(grep -c eval_loss one.jsonl) lines, want 2"
steps=$(grep eval_loss lay.jsonl | grep -o '"step":[0-9]*' | cut -d: -f2 | tr '\n' ' ')
[ "$steps" = "3 6 " ] || fail "eval after steps '$steps', want '3 6 '"
grep -q "validation loss at iteration      6 | lm loss value" lay.out || { cat lay.out; fail "the validation line"; }
paste -d' ' <(field eval_loss lay.jsonl) <(field eval_loss one.jsonl) | awk '
  { d = ($1 > $2 ? $1 - $2 : $2 - $1) / $2; if (d > worst) worst = d; n++ }
  END { printf "eval losses: %d, max relative difference %.3e from one process (tolerance 1e-5)\n", n, worst
        exit !(n == 2 && worst <= 1e-5) }' || fail "eval losses"
[ "$(field loss lay.jsonl)" = "$(field loss plain.jsonl)" ] || fail "training losses changed by the validation"
echo "training losses with and without --eval-data: bit for bit"
echo PASS
