#!/usr/bin/env bash
# The adapt stage of bench/gpu/run_all.sh (issue 13 on a GPU), runnable alone: P ranks (t1 pP d1)
# train one model three times:
#   base   no straggler, the plan's layout
#   slow   world rank 1 (pipeline stage 1) slowed F-fold (--slow-rank 1: after each forward and
#          backward it sleeps F-1 times the pass's measured time)
#   adapt  slowed as above, --monitor-every N --adapt --expect-losses base's log: the monitor names
#          the straggler, rank 0 re-plans and every rank switches through the scratch checkpoint
# then bench/gpu/adapt_report.py: the first monitor line, the re-plan and switch lines, tokens/s
# (mean of --log's tokens_per_s over the steps after the first window, as bench/adapt/bench.sh),
# the lost throughput recovered (adapt - slow) / (base - slow), losses against base within the
# equivalence bound, and the acceptance's PASS/FAIL (OUT/adapt.json, OUT/adapt.txt). Exit 1 when a
# run failed or the acceptance did not pass (its last line says which).
#
# One GPU for P ranks. Time-sliced (no MPS), a sleeping straggler frees the GPU for the others, so
# a "3x" straggler cost 20% of the step on 2026-11-27 and the recovery was noise's to decide. With
# --mps (on the GPU by default: auto), each rank is an MPS client limited to 100/P percent of the
# SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), P smaller GPUs whose straggler leaves its own SMs idle
# (memory bandwidth and L2 stay shared). The report says which it was. P = 4 by default on the GPU:
# at P = 2 a perfect re-split of two equal stages wins back exactly half of the loss (the
# criterion's edge); at P = 4 with one slow stage, three quarters.
#
# usage: bench/gpu/adapt_stage.sh PTDP OUT [--backend cpu|cuda] [--cluster NAME|FILE] [--data TOKENS]
#                                 [--steps S] [--slow-factor F] [--monitor-every N] [--ranks P]
#                                 [--mps auto|on|off] [--rounds R]
#   --backend cuda (default): a 24-layer GPT-2-small-wide model (h 768, 12 heads, s 1024, vocab
#       50257, no dropout; 24 layers so that the output layer, about 4.5 layers' work on the last
#       stage, does not set the pace alone), B 16, mbs 1, 24 steps, cluster
#       profiles/h200-measured.json unless given, each rank's memory limit 80% of the GPU's / P
#       (at most 30 GiB; the re-planner's candidates must fit every rank); P 4; --mps auto (MPS if
#       nvidia-cuda-mps-control starts and the base run works under it, else time-sliced);
#   --backend cpu: bench/adapt/bench.sh's 8-layer model (h 128, s 128, vocab 256), B 8, mbs 1,
#       20 steps, cluster cpu, P 2, no MPS (the rehearsal on a machine without a GPU).
# No dropout: the losses are compared across layouts, and cuDNN's attention draws its own masks.
#   --rounds R: R rounds of the three runs, in the order base slow adapt, then reversed, then forward
#       again (bench/adapt/bench.sh's), so that drift and noise between runs cancel to first order:
#       one round's baseline on the H200 read 46,018 tokens/s and another call's 52,096 (docs/cuda.md);
#       round k > 1 writes adapt.{base,slow,adapt}.rK.*; the report's figure is the rounds' mean.
# Defaults: --slow-factor 3, --monitor-every 4, --rounds 1; --data: README.md tokenized into OUT.
set -euo pipefail
usage="usage: bench/gpu/adapt_stage.sh PTDP OUT [--backend cpu|cuda] [--cluster C] [--data TOKENS] [--steps S] [--slow-factor F] [--monitor-every N] [--ranks P] [--mps auto|on|off] [--rounds R]"
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
ptdp=$1 out=$2
shift 2
backend=cuda cluster="" data="" steps="" slow=3 monitor=4 ranks="" mps="" rounds=1
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) backend=$2; shift 2 ;;
    --cluster) cluster=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --slow-factor) slow=$2; shift 2 ;;
    --monitor-every) monitor=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --mps) mps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "adapt_stage.sh: unknown argument $1; $usage" >&2; exit 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/../.." && pwd)
case "$ptdp" in /*) ;; *) ptdp=$(pwd)/$ptdp ;; esac
[ -x "$ptdp" ] || { echo "adapt_stage.sh: PTDP $ptdp: not an executable" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
case "$data" in /* | "") ;; *) data=$(pwd)/$data ;; esac
case "$cluster" in /* | "" | cpu) ;; *) [ -f "$cluster" ] && cluster=$(pwd)/$cluster ;; esac
cd "$out"  # the switch's scratch checkpoint (ptdp-switch/) goes here
# This run's files only (run_all.sh's stage log, OUT/adapt.log, is being written beside them).
rm -f adapt.{base,slow,adapt}.{out,jsonl} adapt.{base,slow,adapt}.r[0-9].{out,jsonl} \
  adapt.{runs.tsv,json,txt,plan.json,plan.txt,model.json,cluster.json}
case "$backend" in
  cuda)
    cat > adapt.model.json <<'J'
{"name": "gpt2-small-24l-nodrop", "layers": 24, "hidden": 768, "heads": 12, "ffn_hidden": 3072,
 "seq_len": 1024, "vocab": 50257, "dropout": 0.0, "tied_embeddings": true}
J
    cluster=${cluster:-$root/profiles/h200-measured.json} steps=${steps:-24} ranks=${ranks:-4}
    mps=${mps:-auto}
    batch=16 fix="tp=1,pp=$ranks,dp=1,mbs=1,vp=1,schedule=1f1b,recompute=none,fused_attention=on"
    gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2> /dev/null |
      head -n 1 | tr -dc 0-9) || true
    limit_gib=$(( ${gpu_mib:-0} * 8 / 10 / 1024 / ranks ))
    { [ "$limit_gib" -ge 1 ] && [ "$limit_gib" -le 30 ]; } || limit_gib=30
    extra=(--memory-limit "${limit_gib}GiB")
    ;;
  cpu)
    cat > adapt.model.json <<'J'
{"name": "small-8l", "layers": 8, "hidden": 128, "heads": 4, "seq_len": 128, "vocab": 256,
 "dropout": 0.0}
J
    cluster=${cluster:-cpu} steps=${steps:-20} ranks=${ranks:-2} mps=${mps:-off}
    batch=8 fix="tp=1,pp=$ranks,dp=1,mbs=1,vp=1,schedule=1f1b,recompute=none"
    extra=()
    # Ranks on 2 shared cores: a rank waiting in MPI yields its core.
    export OMPI_MCA_mpi_yield_when_idle=1
    ;;
  *) echo "adapt_stage.sh: --backend $backend: expected cpu or cuda" >&2; exit 2 ;;
esac
case "$mps" in
  auto | on | off) ;;
  *) echo "adapt_stage.sh: --mps $mps: expected auto, on or off" >&2; exit 2 ;;
esac
[ "$backend" = cuda ] || [ "$mps" = off ] || { echo "adapt_stage.sh: --mps needs --backend cuda" >&2; exit 2; }
case "$rounds" in
  [1-9]) ;;
  *) echo "adapt_stage.sh: --rounds $rounds: expected 1 to 9" >&2; exit 2 ;;
esac
case "$ranks" in
  [2-8]) ;;
  *) echo "adapt_stage.sh: --ranks $ranks: expected 2 to 8 (pipeline stages)" >&2; exit 2 ;;
esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ -z "$data" ]; then
  data=$out/adapt.tokens.bin
  "$ptdp" tokenize --in "$root/README.md" --out "$data" > /dev/null
fi
# How the ranks share the GPU (the report prints it): MPS clients of 100/P percent of the SMs each,
# or time slices. The daemon is this stage's own (its pipe and log folders under OUT), and goes with
# the stage, killed or not.
sharing="one process per rank on the host"
[ "$backend" = cuda ] && sharing="time-sliced: the ranks share the whole GPU (no MPS)"
mps_up=""
stop_mps() {
  [ -n "$mps_up" ] && { echo quit | timeout 10 nvidia-cuda-mps-control > /dev/null 2>&1 || true; }
  mps_up=""
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
}
start_mps() {
  command -v nvidia-cuda-mps-control > /dev/null || { echo "nvidia-cuda-mps-control: not found"; return 1; }
  mkdir -p "$out/mps/pipe" "$out/mps/log"
  export CUDA_MPS_PIPE_DIRECTORY=$out/mps/pipe CUDA_MPS_LOG_DIRECTORY=$out/mps/log
  nvidia-cuda-mps-control -d || { echo "nvidia-cuda-mps-control -d: exit $?"; stop_mps; return 1; }
  mps_up=1
  export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$(( 100 / ranks ))
  # A client that cannot reach the server may hang rather than fail: one small CUDA call, timed
  # out, where PyTorch is here (the lent machines have it); the server list shows it connected.
  if python3 -c 'import torch' 2> /dev/null; then
    timeout --kill-after=5 60 python3 -c 'import torch; print("probe:", torch.ones(4, device="cuda").sum().item())' ||
      { echo "an MPS client (PyTorch) failed or hung: exit $?"; stop_mps; return 1; }
    echo "servers: $(echo get_server_list | timeout 10 nvidia-cuda-mps-control 2>&1 | tr '\n' ' ')"
  fi
  sharing="MPS: each rank a client of ${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE}% of the SMs"
}
trap stop_mps EXIT
trap 'exit 143' TERM INT
rm -f adapt.mps.txt
if [ "$mps" != off ] && ! start_mps >> adapt.mps.txt 2>&1; then
  [ "$mps" = on ] && { echo "adapt_stage.sh: --mps on: MPS did not start ($(tail -n 1 adapt.mps.txt))" >&2; exit 1; }
fi
make_plan() {  # CLUSTER: the plan every run starts from (its cluster is what the re-planner prices)
  "$ptdp" plan --model adapt.model.json --cluster "$1" --gpus "$ranks" --global-batch "$batch" \
    --fix "$fix" --software ptdp --top 1 --out adapt.plan.json > adapt.plan.txt
}
# MPS clients of 100/P percent of the SMs: the profile states it (device_share, core/hardware.h),
# so that the plan and the re-planner price each rank's kernels on its share of the GPU, where a
# larger microbatch gains far less than on the whole GPU (call 1 of 2026-11-27: predicted 61.5%,
# realised 25%). A copy of the profile with the key, beside the stage's outputs.
whole_cluster=$cluster
if [ -n "$mps_up" ] && [ -f "$cluster" ] &&
  python3 - "$cluster" "$ranks" "$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" adapt.cluster.json <<'PY'
import json, sys
profile = json.load(open(sys.argv[1]))
profile["device_share"] = {"value": int(sys.argv[3]) / 100.0, "source": "bench/gpu/adapt_stage.sh: "
                           "each of the " + sys.argv[2] + " ranks an MPS client with "
                           "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + sys.argv[3]}
json.dump(profile, open(sys.argv[4], "w"), indent=1)
PY
then
  cluster=$out/adapt.cluster.json
  sharing="$sharing; priced on a share of $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE% (device_share)"
fi
make_plan "$cluster"
echo "adapt stage: $backend, cluster $cluster, $ranks ranks ($sharing), $steps steps, rank 1 slowed ${slow}x, monitor every $monitor, $rounds round(s)"
printf 'run\trc\tseconds\n' > adapt.runs.tsv
gist() {  # FILE: a run's first error line, else its last line that is not mpirun's rule or blank
  { grep -m 1 'error:' "$1" || grep -v -e '^-*$' -e '^\s*$' "$1" | tail -n 1; } | cut -c1-160
}
train() {  # NAME [flags]: one P-rank run, its stdout and stderr in adapt.NAME.out
  local name=$1 t0 rc=0
  shift
  t0=$(date +%s%N)
  mpirun -np "$ranks" --oversubscribe "$ptdp" train --backend "$backend" --plan adapt.plan.json \
    --data "$data" --steps "$steps" --log "adapt.$name.jsonl" ${extra[@]+"${extra[@]}"} "$@" \
    > "adapt.$name.out" 2>&1 || rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( ($(date +%s%N) - t0) / 1000000 ))e-3" >> adapt.runs.tsv
  echo "$name: exit $rc ($(gist "adapt.$name.out"))"
  return "$rc"
}
if ! train base && [ -n "$mps_up" ] && [ "$mps" = auto ]; then
  # The ranks did not run as MPS clients here: once more, time-sliced (the failed run's output is
  # kept beside the report).
  mv adapt.base.out adapt.base.mps-failed.out
  echo "base under MPS failed: $(gist adapt.base.mps-failed.out)" >> adapt.mps.txt
  stop_mps
  sharing="time-sliced: the ranks share the whole GPU (MPS started, but the base run failed under it)"
  cluster=$whole_cluster
  make_plan "$cluster"  # time slices give a rank the whole GPU: no device_share
  printf 'run\trc\tseconds\n' > adapt.runs.tsv
  train base || true
fi
train slow --slow-rank 1 --slow-factor "$slow" || true
# --loss-tol: the loosest of the per-step bounds adapt_report.py checks step by step.
tol=$(python3 "$root/bench/gpu/adapt_report.py" --loss-tol "$out") || tol=1e-5  # no base log
adapt_run() {  # NAME
  train "$1" --slow-rank 1 --slow-factor "$slow" --monitor-every "$monitor" --adapt \
    --expect-losses adapt.base.jsonl --loss-tol "$tol" || true
}
adapt_run adapt
for k in $(seq 2 "$rounds"); do
  order="base slow adapt"
  [ $((k % 2)) = 0 ] && order="adapt slow base"
  for kind in $order; do
    case $kind in
      base) train "base.r$k" || true ;;
      slow) train "slow.r$k" --slow-rank 1 --slow-factor "$slow" || true ;;
      adapt) adapt_run "adapt.r$k" ;;
    esac
  done
done
python3 "$root/bench/gpu/adapt_report.py" "$out" --slow-factor "$slow" --monitor-every "$monitor" \
  --backend "$backend" --ranks "$ranks" --sharing "$sharing" | tee adapt.txt
