#!/usr/bin/env bash
# The runtime monitor and the test-only straggler under mpirun (docs/runtime.md "Monitor").
#   straggler_p2d2 | straggler_p4   4 ranks (t1 p2 d2, or t1 p4 d1 whose last stage carries the
#       head), world rank 2 slowed 3x (--slow-rank 2 --slow-factor 3), monitor every 2 steps: one
#       of the first 3 windows names rank 2 as its slowest straggler (stdout line and the --log
#       "monitor" record), and the per-step losses equal an unslowed, unmonitored run bit for bit
#   switch      t1 p2 d2 1F1B mbs 1 switched after step 3 to GPipe mbs 2 (--switch-plan): the state
#       moves through a checkpoint in the scratch folder (removed after), the losses equal the
#       unswitched run's within 1e-5 (relative), the memory the new layout's ledger
#   switch_tp   a plan of another t refused: exit 2, one line naming layout.tp
#   adapt       rank 2 slowed 3x with --adapt --adapt-threshold 0 (switch to whatever the simulator
#       ranks first): a re-plan after the first window, a switch, losses within 1e-5 of an unslowed,
#       unadapted run
#   adapt_split 2 ranks (t1 p2 d1, 8 layers split 4/4), world rank 1 slowed 4x, --adapt with its
#       default threshold: after the first window (step 2) the re-plan moves layers off the slow
#       stage (an uneven split, fewer layers on stage 1, printed "layers a/b" with b < a) and every
#       rank switches, the moved layers taking their weights and Adam state to rank 0 through the
#       checkpoint; the losses equal an unslowed, unadapted even-split run within 1e-5. (4x, not
#       3x: at 2 ranks the monitor's median is their mean, so a factor F reads 2F/(1+F), 1.6 here,
#       and the measured compute ratio stays far above what any even split could absorb.)
#   adapt_split_p4  4 ranks (t1 p4 d1, 8 layers 2/2/2/2), world rank 1 (a middle stage) slowed 4x:
#       the first re-plan that switches (Megatron's split: only the first and last stages differ, so
#       it lightens the middle stages by loading the first and last) leaves stage 1 fewer than 2
#       layers; losses within 1e-5 of the unslowed, unadapted run
#   bad_input   --slow-factor below 1, --slow-rank outside the world, --monitor-every < 0,
#       --straggler-threshold 0: exit 2 on every rank, one line naming the option
# usage: monitor.sh PTDP WORKDIR CASE
set -uo pipefail
ptdp=$1 work=$2 case=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$(dirname "$0")/lib.sh"  # OpenMPI as root, oversubscribed; fail
dir="$work/monitor-$case"
rm -rf "$dir"
mkdir -p "$dir"
cd "$dir" || exit 1
text=/usr/share/common-licenses/GPL-3
[ -f "$text" ] || text="$here/CMakeLists.txt"
"$ptdp" tokenize --in "$text" --out data.bin > /dev/null || fail "tokenize"
train() {  # PLAN [flags]: NP ranks (default 4), output in run.out
  local plan=$1
  shift
  timeout 120 mpirun -np "${NP:-4}" --oversubscribe "$ptdp" train --plan "$plan" --data data.bin "$@" \
    > run.out 2>&1
}

straggler() {  # PP DP
  "$here/write_plan.sh" "$ptdp" plan.json 4 0.1 256 16 1 "$1" "$2" 1 1 1f1b none true ||
    fail "plan"
  train plan.json --steps 6 --log ref.jsonl || { cat run.out; fail "reference run"; }
  train plan.json --steps 6 --log slow.jsonl --monitor-every 2 --slow-rank 2 --slow-factor 3 \
    --expect-losses ref.jsonl --loss-tol 0 || { cat run.out; fail "slowed run"; }
  cat run.out
  grep -q "losses vs reference: max relative difference 0.000e+00" run.out ||
    fail "losses of the slowed run differ from the reference"
  [ "$(grep -c '^ monitor steps' run.out)" = 3 ] || fail "expected 3 monitor lines"
  grep '^ monitor steps' run.out | head -3 | grep -q "stragglers: rank 2 (pp " ||
    fail "rank 2 not named the slowest straggler within 3 windows"
  # The --log: every line is still one step's metrics; windows ending at steps 2, 4, 6 carry the
  # monitor record, rank 2 first among the stragglers of at least one.
  [ "$(wc -l < slow.jsonl)" = 6 ] || fail "--log has not 6 lines"
  [ "$(grep -c '"monitor":{"first_step"' slow.jsonl)" = 3 ] || fail "--log: 3 monitor records"
  grep -q '"stragglers":\[{"rank":2,' slow.jsonl || fail "--log: rank 2 not named"
  grep -q '"step":2,' <(grep '"monitor"' slow.jsonl | head -1) || fail "--log: first window"
  echo "ok: rank 2 named, losses equal"
}

bad() {  # EXPECTED-TEXT [flags]
  local want=$1
  shift
  train plan.json --steps 2 "$@"
  local rc=$?
  [ $rc = 2 ] || { cat run.out; fail "$* gave exit $rc, not 2"; }
  [ "$(grep -c 'ptdp train: error' run.out)" = 1 ] || { cat run.out; fail "$*: not one error line"; }
  grep -q -- "$want" run.out || { cat run.out; fail "$*: no '$want'"; }
}

case "$case" in
  switch | switch_tp | adapt)
    "$here/write_plan.sh" "$ptdp" plan.json 4 0.1 256 16 1 2 2 1 1 1f1b none true || fail "plan"
    "$here/write_plan.sh" "$ptdp" gpipe.json 4 0.1 256 16 1 2 2 2 1 gpipe none true || fail "plan"
    "$here/write_plan.sh" "$ptdp" tp2.json 4 0.1 256 16 2 2 1 1 1 1f1b none true || fail "plan"
    train plan.json --steps 6 --log ref.jsonl || { cat run.out; fail "reference run"; }
    ;;&
  switch)
    train plan.json --steps 6 --switch-plan gpipe.json --switch-at 3 --expect-losses ref.jsonl \
      --memory-tol 0.01 || { cat run.out; fail "switched run"; }
    cat run.out
    grep -q "switched after step 3 to tp=1,pp=2,dp=2,mbs=2,vp=1,schedule=gpipe" run.out ||
      fail "no switch"
    [ ! -e ptdp-switch ] || fail "the scratch folder was left behind"
    echo "ok: switched, losses within 1e-5"
    ;;
  switch_tp)
    bad "layout.tp 2 differs from the running 1" --switch-plan tp2.json --switch-at 1
    echo "ok: a change of t refused"
    ;;
  adapt)
    train plan.json --steps 6 --monitor-every 2 --slow-rank 2 --slow-factor 3 --adapt \
      --adapt-threshold 0 --expect-losses ref.jsonl || { cat run.out; fail "adapted run"; }
    cat run.out
    grep -q "^ adapt after step 2: .*: switching" run.out || fail "no re-plan after step 2"
    grep -q "^ switched after step 2 to " run.out || fail "no switch after step 2"
    echo "ok: re-planned and switched, losses within 1e-5"
    ;;
  adapt_split)
    export NP=2
    "$here/write_plan.sh" "$ptdp" plan.json 8 0.1 256 8 1 2 1 1 1 1f1b none true || fail "plan"
    train plan.json --steps 6 --log ref.jsonl || { cat run.out; fail "reference run"; }
    train plan.json --steps 6 --monitor-every 2 --slow-rank 1 --slow-factor 4 --adapt \
      --expect-losses ref.jsonl --memory-tol 0.01 || { cat run.out; fail "adapted run"; }
    cat run.out
    line=$(grep "^ adapt after step 2: " run.out) || fail "no re-plan after step 2"
    [[ $line == *": switching" ]] || fail "the re-plan after step 2 did not switch"
    split=$(sed -n 's/.*, layers \([0-9]*\)\/\([0-9]*\), .*/\1 \2/p' <<< "$line")
    read -r on0 on1 <<< "$split"
    [ -n "$on1" ] && [ "$on1" -lt "$on0" ] || fail "the split '$split' does not lighten stage 1"
    grep -q "^ switched after step 2 to .*last_stage_layers=$on1" run.out ||
      fail "no switch to last_stage_layers=$on1 after step 2"
    echo "ok: layers moved off the slow stage ($on0/$on1), losses within 1e-5"
    ;;
  adapt_split_p4)
    "$here/write_plan.sh" "$ptdp" plan.json 8 0.1 256 8 1 4 1 1 1 1f1b none true || fail "plan"
    train plan.json --steps 6 --log ref.jsonl || { cat run.out; fail "reference run"; }
    train plan.json --steps 6 --monitor-every 2 --slow-rank 1 --slow-factor 4 --adapt \
      --expect-losses ref.jsonl || { cat run.out; fail "adapted run"; }
    cat run.out
    line=$(grep -m1 "^ adapt after step [0-9]*: .*: switching" run.out) || fail "no switch"
    split=$(sed -n 's/.*, layers \([0-9/]*\), .*/\1/p' <<< "$line")
    IFS=/ read -r on0 on1 on2 on3 <<< "$split"
    [ -n "$on3" ] && [ "$on1" -lt 2 ] || fail "the split '$split' does not lighten stage 1"
    echo "ok: layers moved off the slow middle stage ($split), losses within 1e-5"
    ;;
  straggler_p2d2) straggler 2 2 ;;
  straggler_p4) straggler 4 1 ;;
  bad_input)
    "$here/write_plan.sh" "$ptdp" plan.json 4 0.1 256 16 1 2 2 1 1 1f1b none true || fail "plan"
    bad "--slow-factor" --slow-rank 1 --slow-factor 0.5
    bad "--slow-rank" --slow-rank 4 --slow-factor 2
    bad "--monitor-every" --monitor-every -1
    bad "--straggler-threshold" --monitor-every 1 --straggler-threshold 0
    bad "--adapt: needs --monitor-every" --adapt
    bad "--switch-at" --switch-plan plan.json
    echo "ok: bad input refused"
    ;;
  *) fail "unknown case $case" ;;
esac
