#!/usr/bin/env bash
# The adapt stage of bench/gpu/run_all.sh (issue 13 on a GPU), runnable alone: 2 ranks (t1 p2 d1)
# train one model three times; on --backend cuda both ranks share the one GPU (the staged MPI
# communicator, docs/cuda.md), so rank 1's injected slowness (--slow-rank 1: it synchronises its
# device and sleeps (F-1) x each forward's and backward's measured time) leaves the GPU to rank 0.
#   base   no straggler, the plan's layout
#   slow   world rank 1 (pipeline stage 1, which holds the output layer) slowed F-fold
#   adapt  slowed as above, --monitor-every N --adapt --expect-losses base's log: the monitor names
#          the straggler, rank 0 re-plans and every rank switches through the scratch checkpoint
# then bench/gpu/adapt_report.py: the first monitor line, the re-plan and switch lines, tokens/s
# (mean of --log's tokens_per_s over the steps after the first window, as bench/adapt/bench.sh),
# the lost throughput recovered (adapt - slow) / (base - slow), losses against base within the
# equivalence bound, and the acceptance's PASS/FAIL (OUT/adapt.json, OUT/adapt.txt). Exit 1 when a
# run failed or the acceptance did not pass (its last line says which).
#
# usage: bench/gpu/adapt_stage.sh PTDP OUT [--backend cpu|cuda] [--cluster NAME|FILE] [--data TOKENS]
#                                 [--steps S] [--slow-factor F] [--monitor-every N]
#   --backend cuda (default): a 12-layer GPT-2-small-shaped model (h 768, 12 heads, s 1024, vocab
#       50257, no dropout), B 16, mbs 2, 40 steps, cluster profiles/h200-measured.json unless given,
#       each rank's memory limit 30 GiB (two ranks share one GPU; the re-planner's candidates must
#       fit both);
#   --backend cpu: bench/adapt/bench.sh's 8-layer model (h 128, s 128, vocab 256), B 8, mbs 1,
#       20 steps, cluster cpu (the rehearsal on a machine without a GPU).
# No dropout: the losses are compared across layouts, and cuDNN's attention draws its own masks.
# Defaults: --slow-factor 3, --monitor-every 4; --data: README.md tokenized into OUT.
set -euo pipefail
usage="usage: bench/gpu/adapt_stage.sh PTDP OUT [--backend cpu|cuda] [--cluster C] [--data TOKENS] [--steps S] [--slow-factor F] [--monitor-every N]"
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
ptdp=$1 out=$2
shift 2
backend=cuda cluster="" data="" steps="" slow=3 monitor=4
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) backend=$2; shift 2 ;;
    --cluster) cluster=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --slow-factor) slow=$2; shift 2 ;;
    --monitor-every) monitor=$2; shift 2 ;;
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
rm -f adapt.{base,slow,adapt}.{out,jsonl} adapt.{runs.tsv,json,txt,plan.json,plan.txt,model.json}
case "$backend" in
  cuda)
    cat > adapt.model.json <<'J'
{"name": "gpt2-small-nodrop", "layers": 12, "hidden": 768, "heads": 12, "ffn_hidden": 3072,
 "seq_len": 1024, "vocab": 50257, "dropout": 0.0, "tied_embeddings": true}
J
    cluster=${cluster:-$root/profiles/h200-measured.json} steps=${steps:-40}
    batch=16 fix="tp=1,pp=2,dp=1,mbs=2,vp=1,schedule=1f1b,recompute=none,fused_attention=on"
    extra=(--memory-limit 30GiB)
    ;;
  cpu)
    cat > adapt.model.json <<'J'
{"name": "small-8l", "layers": 8, "hidden": 128, "heads": 4, "seq_len": 128, "vocab": 256,
 "dropout": 0.0}
J
    cluster=${cluster:-cpu} steps=${steps:-20}
    batch=8 fix="tp=1,pp=2,dp=1,mbs=1,vp=1,schedule=1f1b,recompute=none"
    extra=()
    # 2 ranks on 2 shared cores: a rank waiting in MPI yields its core.
    export OMPI_MCA_mpi_yield_when_idle=1
    ;;
  *) echo "adapt_stage.sh: --backend $backend: expected cpu or cuda" >&2; exit 2 ;;
esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ -z "$data" ]; then
  data=$out/adapt.tokens.bin
  "$ptdp" tokenize --in "$root/README.md" --out "$data" > /dev/null
fi
echo "adapt stage: $backend, cluster $cluster, $steps steps, rank 1 slowed ${slow}x, monitor every $monitor"
"$ptdp" plan --model adapt.model.json --cluster "$cluster" --gpus 2 --global-batch "$batch" \
  --fix "$fix" --software ptdp --top 1 --out adapt.plan.json > adapt.plan.txt
printf 'run\trc\tseconds\n' > adapt.runs.tsv
train() {  # NAME [flags]: one 2-rank run, its stdout and stderr in adapt.NAME.out
  local name=$1 t0 rc=0
  shift
  t0=$(date +%s%N)
  mpirun -np 2 --oversubscribe "$ptdp" train --backend "$backend" --plan adapt.plan.json \
    --data "$data" --steps "$steps" --log "adapt.$name.jsonl" ${extra[@]+"${extra[@]}"} "$@" \
    > "adapt.$name.out" 2>&1 || rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( ($(date +%s%N) - t0) / 1000000 ))e-3" >> adapt.runs.tsv
  echo "$name: exit $rc ($(tail -n 1 "adapt.$name.out" | cut -c1-160))"
}
train base
train slow --slow-rank 1 --slow-factor "$slow"
# --loss-tol: the loosest of the per-step bounds adapt_report.py checks step by step.
tol=$(python3 "$root/bench/gpu/adapt_report.py" --loss-tol "$out") || tol=1e-5  # no base log
train adapt --slow-rank 1 --slow-factor "$slow" --monitor-every "$monitor" --adapt \
  --expect-losses adapt.base.jsonl --loss-tol "$tol"
python3 "$root/bench/gpu/adapt_report.py" "$out" --slow-factor "$slow" --monitor-every "$monitor" \
  --backend "$backend" | tee adapt.txt
