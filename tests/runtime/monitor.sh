#!/usr/bin/env bash
# The runtime monitor and the test-only straggler under mpirun (docs/runtime.md "Monitor").
#   straggler_p2d2 | straggler_p4   4 ranks (t1 p2 d2, or t1 p4 d1 whose last stage carries the
#       head), world rank 2 slowed 3x (--slow-rank 2 --slow-factor 3), monitor every 2 steps: one
#       of the first 3 windows names rank 2 as its slowest straggler (stdout line and the --log
#       "monitor" record), and the per-step losses equal an unslowed, unmonitored run bit for bit;
#       the first window is step 2 alone (a trainer's first step is kept out of the monitor)
#   switch      t1 p2 d2 1F1B mbs 1 switched after step 3 to GPipe mbs 2 (--switch-plan): the state
#       moves through a checkpoint in the scratch folder (removed after), the losses equal the
#       unswitched run's within 1e-5 (relative), the memory the new layout's ledger
#   switch_same the same run switched after step 3 to its own plan: every step's loss equals the
#       unswitched run's bit for bit, so the new trainer (whose parameters are not drawn but left
#       NaN for the load: ParamInit::kLoadFollows) trains on exactly the state the load gave it
#   switch_tp   a plan of another t refused: exit 2, one line naming layout.tp
#   adapt       rank 2 slowed 3x with --adapt --adapt-threshold 0 (switch to whatever the simulator
#       ranks first): a re-plan after the first window, a switch, losses within 1e-5 of an unslowed,
#       unadapted run; the window after the switch is step 4 alone (the new trainer's first, step
#       3, kept out)
#   adapt_split 2 ranks (t1 p2 d1, 8 layers split 4/4), world rank 1 slowed 4x, --adapt with its
#       default threshold: after the first window (step 2) the re-plan moves layers off the slow
#       stage (an uneven split, fewer layers on stage 1, printed "layers a/b" with b < a) and every
#       rank switches, the moved layers taking their weights and Adam state to rank 0 through the
#       checkpoint; the losses equal an unslowed, unadapted even-split run within 1e-5. (4x, not
#       3x: at 2 ranks the monitor's median is their mean, so a factor F reads 2F/(1+F), 1.6 here,
#       and the measured compute ratio stays far above what any even split could absorb.)
#   adapt_split_guard  adapt_split's adapted run on the guard device (--backend cpu-guard, whose
#       tensors fault on host access outside an Ops or communicator call, as a GPU's are out of the
#       host's reach): the slowed rank's timing, the monitor and the switch's checkpoint save and
#       load touch tensors only through the device, as --backend cuda needs
#   adapt_calibrate  as adapt_split with --adapt-calibrate: after step 2 the profile is fitted to
#       the window's last step (used or, when it does not lower the compute error, not) before the
#       re-plan; losses within 1e-5 (the decision itself is not asserted: one noisy step)
#   adapt_split_p4  4 ranks (t1 p4 d1, 8 layers 2/2/2/2), world rank 1 (a middle stage) slowed 4x:
#       the first re-plan that switches leaves stage 1 fewer than 2 layers (a per-stage split the
#       calibrated costs balance, e.g. 3/1/2/2, so the switch broadcast carries the pp counts; or
#       Megatron's first/last form, which lightens both middle stages); losses within 1e-5 of the
#       unslowed, unadapted run
#   adapt_short_ends  2 ranks (t1 p2 d1, 7 layers: no even split, so the run starts in 1F1B 4/3),
#       B 8, --monitor-every 4 --adapt --adapt-threshold 0: the re-plan after step 4 switches into
#       an interleaved layout with a short end (vp 2, first_stage_layers=3 or last_stage_layers=3:
#       the embedding or the loss counted as a layer), which the cost model prices ~55% under the
#       running one (an m = 2 bubble halved); the losses equal the unadapted run's within 1e-5. An
#       attempt whose noisy window ranked another layout first is retried (3 attempts).
#   switch_distopt  the same 4 ranks switched after step 3 into the distributed optimizer (each data
#       rank loads its shard of the saved state): losses within 1e-5, memory the new ledger's
#   switch_short_ends  the way out: the same 7 layers started interleaved with the short loss end
#       (vp 2, last_stage_layers=3), switched after step 3 to 1F1B 4/3 (--switch-plan); losses
#       within 1e-5 of the unswitched 1F1B run
#   stage_layers  4 ranks (t1 p4 d1, 8 layers, B 8) with per-stage counts 3/1/2/2
#       (layout.stage_layers, a split Megatron's first/last form cannot express): the losses equal
#       the even 2/2/2/2 run's within 1e-5
#   switch_stage_layers  the even 2/2/2/2 run switched after step 3 to 3/1/2/2 (--switch-plan):
#       layers move between ranks through the checkpoint (named by global index); losses within
#       1e-5 of the unswitched run
#   relaunch    2 ranks in t1 p2 d1 (2 layers, B 2: one layer per stage, so no split can hand a
#       slower rank less work), which the calibrated cost model prices well behind another t, p, d
#       of the same 2 ranks (no pipeline fill and drain); --adapt --monitor-every 2: without --save
#       the run reports "would relaunch" and exits 0; with --save DIR, after the window (step K,
#       2 unless noise delayed it) it saves step K, writes DIR/relaunch-plan.json with another
#       t/p/d and exits 75 on every rank; the printed command (--plan DIR/relaunch-plan.json
#       --load latest) resumes from step K and finishes (exit 0, no second relaunch); each leg's
#       losses, and the 6 of the concatenated --log, equal an unadapted run's within 1e-5. An
#       attempt whose measured window proposed no relaunch is retried (3 attempts).
#   bad_input   --slow-factor below 1, --slow-rank outside the world, --monitor-every < 0,
#       --straggler-threshold 0, --adapt-threshold 1: exit 2 on every rank, one line naming the
#       option
# usage: monitor.sh PTDP WORKDIR CASE
set -uo pipefail
ptdp=$1 work=$2 case=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$(dirname "$0")/lib.sh"  # OpenMPI as root, oversubscribed; fail
fresh_dir_with_data "monitor-$case"
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
  # The trainer's first step (on a GPU its one-off costs) is kept out: the first window is step 2.
  grep -q '^ monitor steps 2-2 |' run.out || fail "the first window is not step 2 alone"
  grep -q '^ monitor steps 3-4 |' run.out || fail "no window of steps 3-4"
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
  switch | switch_same | switch_tp | switch_distopt | adapt)
    "$here/write_plan.sh" "$ptdp" plan.json 4 0.1 256 16 1 2 2 1 1 1f1b none true || fail "plan"
    PTDP_TEST_DIST_OPT=true "$here/write_plan.sh" "$ptdp" distopt.json 4 0.1 256 16 1 2 2 1 1 1f1b \
      none true || fail "plan"
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
  switch_distopt)
    # Into the distributed optimizer at a step boundary: the whole state saved, each data rank's
    # shard loaded (docs/distributed_optimizer.md).
    train plan.json --steps 6 --switch-plan distopt.json --switch-at 3 --expect-losses ref.jsonl \
      --memory-tol 0.01 || { cat run.out; fail "switched run"; }
    cat run.out
    grep -q "switched after step 3 to tp=1,pp=2,dp=2,mbs=1,vp=1,schedule=1f1b.*distributed_optimizer=on" \
      run.out || fail "no switch"
    echo "ok: switched into the distributed optimizer, losses within 1e-5"
    ;;
  switch_same)
    train plan.json --steps 6 --switch-plan plan.json --switch-at 3 --expect-losses ref.jsonl \
      --loss-tol 0 || { cat run.out; fail "run switched to its own plan"; }
    cat run.out
    grep -q "switched after step 3 to tp=1,pp=2,dp=2,mbs=1,vp=1,schedule=1f1b" run.out ||
      fail "no switch"
    grep -q "losses vs reference: max relative difference 0.000e+00" run.out ||
      fail "the losses after the switch differ from the unswitched run's"
    echo "ok: switched to the same plan, losses equal bit for bit"
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
    grep -q '^ monitor steps 4-4 |' run.out || fail "the new trainer's first step is in its window"
    echo "ok: re-planned and switched, losses within 1e-5"
    ;;
  adapt_moe_ep)
    # --adapt with expert parallelism: a mixture (PTDP_TEST_ARCH=moe) at t1 p2 d2 ep 2, its rank 2
    # slowed: re-planned and switched at a step boundary (the experts moved with the layers through
    # the switch's checkpoint, by their global names), losses within 1e-5 of the unslowed run.
    export PTDP_TEST_ARCH=moe PTDP_TEST_EP=2
    "$here/write_plan.sh" "$ptdp" plan.json 4 0.1 256 16 1 2 2 1 1 1f1b none true || fail "plan"
    train plan.json --steps 6 --log ref.jsonl || { cat run.out; fail "reference run"; }
    train plan.json --steps 6 --monitor-every 2 --slow-rank 2 --slow-factor 3 --adapt \
      --adapt-threshold 0 --expect-losses ref.jsonl || { cat run.out; fail "adapted run"; }
    cat run.out
    grep -q "^ adapt after step 2: .*: switching" run.out || fail "no re-plan after step 2"
    grep -q "^ switched after step 2 to .*ep=2" run.out || fail "no switch after step 2 keeping ep 2"
    echo "ok: re-planned and switched with ep 2, losses within 1e-5"
    ;;
  adapt_split | adapt_split_guard)
    export NP=2
    guard=()
    if [ "$case" = adapt_split_guard ]; then
      # The guard device (guard_step.sh): no host access to a tensor outside an Ops or communicator
      # call anywhere on this path: the timed slow rank, the monitor, and the switch's checkpoint.
      guard=(--backend cpu-guard)
      export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl_sm_single_copy_mechanism=none
    fi
    "$here/write_plan.sh" "$ptdp" plan.json 8 0.1 256 8 1 2 1 1 1 1f1b none true || fail "plan"
    train plan.json --steps 6 --log ref.jsonl || { cat run.out; fail "reference run"; }
    train plan.json --steps 6 --monitor-every 2 --slow-rank 1 --slow-factor 4 --adapt \
      --expect-losses ref.jsonl --memory-tol 0.01 ${guard[@]+"${guard[@]}"} ||
      { cat run.out; fail "adapted run"; }
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
  adapt_calibrate)
    export NP=2
    "$here/write_plan.sh" "$ptdp" plan.json 8 0.1 256 8 1 2 1 1 1 1f1b none true || fail "plan"
    train plan.json --steps 6 --log ref.jsonl || { cat run.out; fail "reference run"; }
    train plan.json --steps 6 --monitor-every 2 --slow-rank 1 --slow-factor 4 --adapt \
      --adapt-calibrate --expect-losses ref.jsonl --memory-tol 0.01 ||
      { cat run.out; fail "adapted run"; }
    cat run.out
    grep -q "^ adapt after step 2: \(using\|not using (no better)\) the fit of the profile to the step's timeline (compute median |error| [0-9.]*% -> [0-9.]*%" run.out ||
      fail "no fit of the profile after step 2"
    grep -q "^ adapt after step 2: stage compute measured/modelled" run.out ||
      fail "no re-plan after step 2"
    echo "ok: the profile fitted to the window's step, re-planned, losses within 1e-5"
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
  adapt_short_ends)
    export NP=2
    PTDP_TEST_FIRST_LAYERS=4 PTDP_TEST_LAST_LAYERS=3 \
      "$here/write_plan.sh" "$ptdp" plan.json 7 0.1 256 8 1 2 1 1 1 1f1b none true || fail "plan"
    train plan.json --steps 8 --log ref.jsonl || { cat run.out; fail "reference run"; }
    for attempt in 1 2 3; do
      train plan.json --steps 8 --monitor-every 4 --adapt --adapt-threshold 0 \
        --expect-losses ref.jsonl --memory-tol 0.01 || { cat run.out; fail "adapted run"; }
      line=$(grep "^ adapt after step 4: stage compute" run.out) ||
        { cat run.out; fail "no re-plan after step 4"; }
      [[ $line == *"vp=2,schedule=interleaved"* ]] && break
      echo "attempt $attempt: the window ranked another layout first: $line"
    done
    cat run.out
    [[ $line == *": switching" ]] || fail "the re-plan after step 4 did not switch"
    want="vp=2,schedule=interleaved,recompute=none,scatter_gather=on,\(first\|last\)_stage_layers=3"
    grep -q "^ switched after step 4 to tp=1,pp=2,dp=1,mbs=[0-9]*,$want (state moved" run.out ||
      fail "no switch into an interleaved short-end layout after step 4"
    echo "ok: switched into $(sed -n 's/^ switched after step 4 to \([^ ]*\) .*/\1/p' run.out)" \
      "(attempt $attempt), losses within 1e-5"
    ;;
  switch_short_ends)
    export NP=2
    PTDP_TEST_FIRST_LAYERS=4 PTDP_TEST_LAST_LAYERS=3 \
      "$here/write_plan.sh" "$ptdp" flat.json 7 0.1 256 8 1 2 1 1 1 1f1b none true || fail "plan"
    PTDP_TEST_LAST_LAYERS=3 \
      "$here/write_plan.sh" "$ptdp" short.json 7 0.1 256 8 1 2 1 1 2 interleaved none true ||
      fail "plan"
    train flat.json --steps 6 --log ref.jsonl || { cat run.out; fail "reference run"; }
    train short.json --steps 6 --switch-plan flat.json --switch-at 3 --expect-losses ref.jsonl \
      --memory-tol 0.01 || { cat run.out; fail "switched run"; }
    cat run.out
    grep -q "^ptdp train: .*vp=2,schedule=interleaved,.*last_stage_layers=3)" run.out ||
      fail "the run did not start interleaved with the short loss end"
    grep -q "^ switched after step 3 to .*vp=1,schedule=1f1b,.*first_stage_layers=4," run.out ||
      fail "no switch to 1F1B 4/3 after step 3"
    [ ! -e ptdp-switch ] || fail "the scratch folder was left behind"
    echo "ok: switched out of the short-end interleaving, losses within 1e-5"
    ;;
  stage_layers | switch_stage_layers)
    "$here/write_plan.sh" "$ptdp" even.json 8 0.1 256 8 1 4 1 1 1 1f1b none true || fail "plan"
    PTDP_TEST_STAGE_LAYERS=3/1/2/2 \
      "$here/write_plan.sh" "$ptdp" split.json 8 0.1 256 8 1 4 1 1 1 1f1b none true || fail "plan"
    train even.json --steps 6 --log ref.jsonl || { cat run.out; fail "reference run"; }
    ;;&
  stage_layers)
    train split.json --steps 6 --expect-losses ref.jsonl --memory-tol 0.01 ||
      { cat run.out; fail "run with stage_layers 3/1/2/2"; }
    cat run.out
    grep -q "^ptdp train: .*schedule=1f1b,.*stage_layers=3/1/2/2)" run.out ||
      fail "the run did not start with stage_layers=3/1/2/2"
    echo "ok: 3/1/2/2 trains as the even split, losses within 1e-5"
    ;;
  switch_stage_layers)
    train even.json --steps 6 --switch-plan split.json --switch-at 3 --expect-losses ref.jsonl \
      --memory-tol 0.01 || { cat run.out; fail "switched run"; }
    cat run.out
    grep -q "^ switched after step 3 to .*schedule=1f1b,.*stage_layers=3/1/2/2 (state moved" \
      run.out || fail "no switch to stage_layers=3/1/2/2 after step 3"
    [ ! -e ptdp-switch ] || fail "the scratch folder was left behind"
    echo "ok: switched from 2/2/2/2 into 3/1/2/2, losses within 1e-5"
    ;;
  relaunch)
    export NP=2
    "$here/write_plan.sh" "$ptdp" plan.json 2 0.1 256 2 1 2 1 1 1 1f1b none true || fail "plan"
    train plan.json --steps 6 --log ref.jsonl || { cat run.out; fail "reference run"; }
    adapt=(--steps 6 --log run.jsonl --monitor-every 2 --adapt --expect-losses ref.jsonl)
    # The decision rests on measured windows: on this shared 2-core machine one can read a rank
    # several times slower than the other (factors 4.13 and 0.88 seen), and the model then rightly
    # prefers a split or microbatch switch in t1 p2 d1. Such an attempt (no relaunch proposed,
    # exit 0) is retried from scratch, up to 3 times; every other outcome is checked.
    for attempt in 1 2 3; do
      rm -rf ckpt run.jsonl
      train plan.json "${adapt[@]}" || { cat run.out; fail "adapted run without --save"; }
      grep -q "^ adapt after step [0-9]*: would relaunch to .*; give --save to allow it" run.out ||
        { grep "^ adapt after" run.out; echo "attempt $attempt: no relaunch proposed"; continue; }
      rm -f run.jsonl
      train plan.json "${adapt[@]}" --save ckpt
      rc=$?
      [ $rc = 0 ] && ! grep -q ": relaunching (plan in" run.out &&
        { grep "^ adapt after" run.out; echo "attempt $attempt: no relaunch proposed"; continue; }
      break
    done
    cat run.out
    [ "${rc:-}" = 75 ] || fail "the adapted run exited ${rc:-(not run)}, not 75"
    k=$(sed -n 's/^ adapt after step \([0-9]*\): .*: relaunching (plan in ckpt.relaunch-plan.json)$/\1/p' \
      run.out)
    [ -n "$k" ] || fail "no relaunch line"
    want=" adapt after step $k: relaunch with: ptdp train --plan ckpt/relaunch-plan.json --load latest"
    grep -q "^$want" run.out || fail "no line '$want'"
    [ -d "ckpt/step-$(printf %08d "$k")" ] || fail "no checkpoint of step $k"
    tpd() { tr -d ' \n' < "$1" | grep -o '"layout":{[^}]*' | grep -o '"\(tp\|pp\|dp\)":[0-9]*' |
      tr '\n' ' '; }
    [ "$(tpd plan.json)" != "$(tpd ckpt/relaunch-plan.json)" ] ||
      fail "the relaunch plan keeps t, p, d: $(tpd plan.json)"
    train ckpt/relaunch-plan.json "${adapt[@]}" --save ckpt --load latest
    rc=$?
    cat run.out
    [ $rc = 0 ] || fail "the relaunched run exited $rc"
    grep -q "resumed from step $k of latest" run.out || fail "the relaunch did not resume step $k"
    # The concatenated log: steps 1-6, each loss within 1e-5 (relative) of the reference's.
    paste -d' ' <(grep -o '"loss":[^,]*' ref.jsonl | cut -d: -f2) \
      <(grep -o '"loss":[^,]*' run.jsonl | cut -d: -f2) |
      awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > 1e-5) bad = 1; n++ }
           END { exit !(n == 6 && !bad) }' || fail "the concatenated losses differ"
    echo "ok: relaunched in $(tpd ckpt/relaunch-plan.json)after step $k (attempt $attempt), 6" \
      "losses within 1e-5"
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
    bad "--adapt-threshold: must be in \[0, 1)" --adapt --monitor-every 1 --adapt-threshold 1
    bad "--switch-at" --switch-plan plan.json
    bad "--adapt-calibrate: only with --adapt" --adapt-calibrate
    echo "ok: bad input refused"
    ;;
  *) fail "unknown case $case" ;;
esac
