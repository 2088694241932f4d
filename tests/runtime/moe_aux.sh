#!/usr/bin/env bash
# A mixture of experts' auxiliary load-balancing loss (`ptdp train --moe-aux-loss-coeff`,
# docs/moe.md "In the runtime"): the Llama-style model with 4 experts of 48, top 2, after a dense
# layer (write_plan.sh PTDP_TEST_ARCH=moe), 6 steps with dropout 0.1 (global batch 16).
#   t2p2d2_seqpar, t2p1d1_cp2_seqpar_fused   over 2 steps, the layout's losses and logged
#       moe_aux_loss (the loss's value, the mean over the 3 mixture layers) within 1e-5 of one
#       process's with the same coefficient (the loss's counts are the whole microbatch's: gathered
#       over the tensor group, summed over the context group; its gradient has moved the router
#       once by step 2). Over 6 steps in one process: the losses with it differ from those without
#       it from step 2 on, and moe_aux_loss is lower at step 6 than at step 1 (the router learns
#       to balance). Only 2 steps across layouts: the loss pushes the router's logits together, and
#       by step 3 a near tie in some token's top 2 falls the other way under the layout's
#       differently rounded GEMMs (docs/moe.md "In the runtime")
#   t2p2d2_seqpar_seq_dsv3, t2p1d1_cp2_seqpar_fused_seq_dsv3   the same per sequence
#       (--moe-router-load-balancing-type seq_aux_loss, DeepSeek-V2's and V3's; 2 sequences per
#       microbatch, each tensor rank's rows one sequence's, each sequence's counts summed over the
#       context group) with DeepSeek-V3's router (PTDP_TEST_ARCH=dsv3: sigmoid scores, normalised
#       over each token's E for the loss, and the expert bias), logged as seq_load_balancing_loss
#   bad_input   the coefficient on a dense model, a negative one, and an unknown balancing type:
#               exit 2, one line
#   (the coefficient is 1 in these runs: see aux below). The router z-loss (--moe-z-loss-coeff
#   0.1) runs beside it: its logged moe_z_loss (each rank's rows, summed over the tensor group under
#   sequence parallelism and over the context group) within 1e-5 of one process's too, and its
#   coefficient refused on a dense model.
# usage: moe_aux.sh PTDP WORKDIR CASE
set -euo pipefail
ptdp=$(realpath "$1")
work=$2 case=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"  # OpenMPI as root, oversubscribed; fail; fresh_dir_with_data
fresh_dir_with_data "moe-aux-$case"
export PTDP_TEST_ARCH=moe
plan() {  # NAME TP PP DP [ENV...]
  local name=$1 tp=$2 pp=$3 dp=$4
  shift 4
  env "$@" "$here/write_plan.sh" "$ptdp" "$name.json" 4 0.1 256 16 "$tp" "$pp" "$dp" 2 1 1f1b none true
}
train() {  # NAME NP [flags]; STEPS (default 6)
  local name=$1 np=$2
  shift 2
  timeout 120 mpirun -np "$np" "$ptdp" train --plan "$name.json" --data data.bin --steps "${STEPS:-6}" \
    --log "$name.jsonl" "$@" > "$name.out" 2>&1 || { cat "$name.out"; fail "ptdp train $name $*"; }
}
field() { grep -o "\"$1\":[^,}]*" "$2" | cut -d: -f2; }
# A coefficient of 1 (recipes use 1e-3 to 1e-2): its part of each step is then far above the
# tolerance, so a wrong count or scale in one layout shows.
aux=(--moe-aux-loss-coeff 1 --moe-z-loss-coeff 0.1)

if [ "$case" = bad_input ]; then
  plan moe 1 1 1
  PTDP_TEST_ARCH=llama plan dense 1 1 1
  for args in "dense|0.01|--moe-aux-loss-coeff: the model has no mixture of experts" \
              "moe|-1|--moe-aux-loss-coeff: must be a number >= 0" \
              "dense|0.01|--moe-z-loss-coeff: the model has no mixture of experts|z"; do
    IFS='|' read -r p coeff want z <<< "$args"
    flag=--moe-aux-loss-coeff
    [ -z "${z:-}" ] || flag=--moe-z-loss-coeff
    "$ptdp" train --plan "$p.json" --data data.bin --steps 1 "$flag" "$coeff" > bad.out 2>&1 &&
      fail "$p $coeff ran"
    rc=$?
    [ "$rc" -eq 2 ] || { cat bad.out; fail "$p $coeff: exit $rc, want 2"; }
    [ "$(wc -l < bad.out)" -eq 1 ] && grep -qF -e "$want" bad.out || { cat bad.out; fail "$p $coeff: the error line"; }
    echo "$p $coeff: $(cat bad.out)"
  done
  "$ptdp" train --plan moe.json --data data.bin --steps 1 --moe-router-load-balancing-type sinkhorn \
    > bad.out 2>&1 && fail "sinkhorn ran"
  [ "$(wc -l < bad.out)" -eq 1 ] && grep -qF "load-balancing-type: 'sinkhorn' is not aux_loss or seq_aux_loss" bad.out ||
    { cat bad.out; fail "sinkhorn: the error line"; }
  echo "sinkhorn: $(head -1 bad.out)"
  echo PASS
  exit 0
fi
# Per sequence with DeepSeek-V3's router: the layout is the case's name without the suffix.
label=load_balancing_loss
if [[ "$case" == *_seq_dsv3 ]]; then
  export PTDP_TEST_ARCH=dsv3
  aux+=(--moe-router-load-balancing-type seq_aux_loss)
  label=seq_load_balancing_loss
  case=${case%_seq_dsv3}
fi

plan one 1 1 1
train one 1 "${aux[@]}"
cp one.json plain.json
train plain 1
cp one.json two.json
STEPS=2 train two 1 "${aux[@]}" --decay-steps 6
case "$case" in
  t2p2d2_seqpar) plan lay 2 2 2 PTDP_TEST_SEQ_PARALLEL=true; np=8 ;;
  t2p1d1_cp2_seqpar_fused)
    plan lay 2 1 1 PTDP_TEST_SEQ_PARALLEL=true PTDP_TEST_CP=2 PTDP_TEST_FUSED_ATTENTION=true; np=4 ;;
  *) fail "unknown case $case" ;;
esac
STEPS=2 train lay "$np" "${aux[@]}" --decay-steps 6 --expect-losses two.jsonl --memory-tol 0.01
grep "losses vs reference" lay.out
grep -q " $label: " lay.out || { cat lay.out; fail "no $label line"; }
paste -d' ' <(field moe_aux_loss lay.jsonl) <(field moe_aux_loss two.jsonl) | awk '
  { d = ($1 > $2 ? $1 - $2 : $2 - $1) / $2; if (d > worst) worst = d; n++ }
  END { printf "moe_aux_loss: %d steps, within %.2e of one process\n", n, worst
        exit !(n == 2 && worst <= 1e-5) }' || fail "moe_aux_loss across layouts"
grep -q " z_loss: " lay.out || { cat lay.out; fail "no z_loss line"; }
paste -d' ' <(field moe_z_loss lay.jsonl) <(field moe_z_loss two.jsonl) | awk '
  { d = ($1 > $2 ? $1 - $2 : $2 - $1) / $2; if (d > worst) worst = d; n++ }
  END { printf "moe_z_loss: %d steps, within %.2e of one process\n", n, worst
        exit !(n == 2 && worst <= 1e-5) }' || fail "moe_z_loss across layouts"
field moe_aux_loss one.jsonl | awk '
  NR == 1 { first = $1 } { last = $1; n++ }
  END { printf "moe_aux_loss in one process: %.6f at step 1, %.6f at step %d\n", first, last, n
        exit !(n == 6 && last < first) }' || fail "moe_aux_loss does not fall"
paste -d' ' <(field loss one.jsonl) <(field loss plain.jsonl) | awk '
  NR == 1 && $1 != $2 { bad = 1 }   # step 1: the aux loss has not yet changed a weight
  NR > 1 { d = ($1 > $2 ? $1 - $2 : $2 - $1) / $2; if (d < 1e-7) bad = 1; if (d > worst) worst = d }
  END { printf "with and without the aux loss: step 1 equal, steps 2-6 apart by up to %.2e\n", worst; exit bad }' ||
  fail "the aux loss changed nothing, or changed step 1"
echo PASS
