#!/usr/bin/env bash
# ptdp launch --scheduler mpirun, and ptdp train's placement check (docs/launch.md):
#   1. the job that `ptdp launch --scheduler mpirun --submit` writes and runs for a t2 p2 d1 CPU
#      plan (4 ranks, one node) logs per-step losses equal, bit for bit, to a plain mpirun run's
#   2. the script places ranks as RankGrid assumes (ppr:4:node over the hostfile) and resumes
#      (--load latest): running it again after the last step trains nothing more; a 40-step job.sh
#      given USR1 mid-run saves and exits 0 (mpirun forwards USR1), and run again its 40 losses equal an
#      uninterrupted run's
#   3. a plan of 2 GPUs per node with its tensor groups split over hosts (--fake-hosts a,b,a,b) is
#      refused on one line naming the ranks and hosts, exit 2; a,a,b,b trains
#   4. srun's numbering (SLURM_PROCID of SLURM_STEP_NUM_TASKS, SLURM_LOCALID) against MPI's and the
#      hosts': a world of one under a step of two, a wrong local rank; refused
#   5. bad requests: --nodes other than the plan's, an unknown scheduler, a --time that would add a
#      line to the script, a missing --data or file of a blend; exit 2 with one line; a blend's
#      train line, its paths absolute
#   6. a plan of two nodes of 2: hostfile n1, n2 with 2 slots each, sbatch --nodes=2
#      --ntasks-per-node=2; one host for it, or 3 GPUs per node for 4 ranks, refused
#   7. the relaunch loop: a 2-rank t1 p2 d1 job (2 layers, B 2, mbs 1) with --train-args "--adapt
#      --monitor-every 2", whose run saves after step 2 and exits 75 for another t, p, d
#      (docs/runtime.md "Re-planning"): job.sh relaunches with checkpoints/relaunch-plan.json and
#      --load latest, exits 0, and its 6 losses are within 1e-5 of a plain run's
# usage: launch_mpirun.sh PTDP WORKDIR
set -uo pipefail
ptdp=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_rmaps_base_oversubscribe=1
. "$here/../mpi_session.sh"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
fields() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1"; }
text=/usr/share/common-licenses/GPL-3
[ -f "$text" ] || text="$here/CMakeLists.txt"
"$ptdp" tokenize --in "$text" --out data.bin > /dev/null || fail "tokenize"
"$here/../runtime/write_plan.sh" "$ptdp" plan.json 4 0.1 256 16 2 2 1 2 1 1f1b none true ||
  fail "plan"

# 1. Reference under plain mpirun, then the launched job.
timeout 120 mpirun -np 4 "$ptdp" train --plan plan.json --data data.bin --steps 6 --backend cpu \
  --log ref.jsonl > ref.out 2>&1 || { cat ref.out; fail "reference run"; }
"$ptdp" launch --plan plan.json --scheduler mpirun --data data.bin --steps 6 --backend cpu \
  --out job --dry-run > dry.out || fail "dry run"
[ ! -e job ] || fail "--dry-run wrote job/"
grep -q -- "mpirun -np 4 --hostfile \"\$job/hostfile\" --map-by ppr:4:node" dry.out ||
  { cat dry.out; fail "dry run: no mpirun line placing 4 ranks per node"; }
timeout 120 "$ptdp" launch --plan plan.json --scheduler mpirun --data data.bin --steps 6 \
  --backend cpu --out job --submit > job.out 2>&1 || { cat job.out; fail "launched job"; }
grep -q "ranks per host: $(hostname): 4" job.out || { cat job.out; fail "no placement line"; }
[ "$(cat job/hostfile)" = "localhost slots=4" ] || fail "hostfile: $(cat job/hostfile)"
cmp <(fields ref.jsonl) <(fields job/logs/metrics.jsonl) || fail "launched losses differ"
[ -d job/checkpoints/step-00000006 ] || fail "no checkpoint after the last step"
echo "launched job: $(fields job/logs/metrics.jsonl | wc -l) steps, losses equal to mpirun's"

# 2. Run again: resumes from step 6 and has nothing left to train.
timeout 120 bash job/job.sh > again.out 2>&1 || { cat again.out; fail "second run"; }
grep -q "resumed from step 6" again.out || { cat again.out; fail "second run did not resume"; }

# 2b. Pre-emption of the mpirun job: USR1 to job.sh mid-run reaches the ranks through mpirun; they
# save and exit 0; job.sh run again resumes, and the 40 losses equal an uninterrupted run's.
timeout 120 mpirun -np 4 "$ptdp" train --plan plan.json --data data.bin --steps 40 --backend cpu \
  --log ref40.jsonl > ref40.out 2>&1 || { cat ref40.out; fail "40-step reference"; }
"$ptdp" launch --plan plan.json --scheduler mpirun --data data.bin --steps 40 --backend cpu \
  --out job40 > /dev/null || fail "launch job40"
bash job40/job.sh > first40.out 2>&1 &
pid=$!
t0=$SECONDS
until [ -f job40/logs/metrics.jsonl ] && [ "$(wc -l < job40/logs/metrics.jsonl)" -ge 3 ]; do
  [ $((SECONDS - t0)) -lt 120 ] || { kill "$pid"; fail "job40 logged no 3 steps"; }
  sleep 0.1
done
kill -USR1 "$pid"
wait "$pid" || { cat first40.out; fail "job40 after USR1: exit $?"; }
stopped=$(grep -o 'stopping after step [0-9]*' first40.out | grep -o '[0-9]*$')
[ -n "$stopped" ] && [ "$stopped" -lt 40 ] || { cat first40.out; fail "job40 did not stop early"; }
timeout 120 bash job40/job.sh > second40.out 2>&1 || { cat second40.out; fail "job40 rerun"; }
grep -q "resumed from step $stopped" second40.out || { cat second40.out; fail "job40: no resume"; }
cmp <(fields ref40.jsonl) <(fields job40/logs/metrics.jsonl) || fail "job40: losses differ"
echo "mpirun job: stopped after step $stopped on USR1, resumed; 40 losses equal"

# 3. Placement: 2 GPUs per node, so tensor groups {0,1} and {2,3} each belong on one host.
sed 's/"gpus_per_node": *[0-9]*/"gpus_per_node": 2/' plan.json > plan2.json
timeout 120 mpirun -np 4 "$ptdp" train --plan plan2.json --data data.bin --steps 1 \
  --backend cpu --fake-hosts a,b,a,b > split.out 2> split.err
rc=$?
[ "$rc" = 2 ] || { cat split.out split.err; fail "split tensor groups: exit $rc, want 2"; }
want="ptdp train: error: placement: tensor group of ranks 0,1 spans hosts a, b; the plan keeps it"
[ "$(grep -c "$want" split.err)" = 1 ] || { cat split.err; fail "split: want one line '$want'"; }
timeout 120 mpirun -np 4 "$ptdp" train --plan plan2.json --data data.bin --steps 1 \
  --backend cpu --fake-hosts a,a,b,b > blocks.out 2>&1 || { cat blocks.out; fail "a,a,b,b"; }
grep -q "ranks per host: a: 2, b: 2" blocks.out || { cat blocks.out; fail "a,a,b,b line"; }

# 4. Started by srun without PMI, an MPI that falls back to singletons (Debian's OpenMPI aborts
# in MPI_Init itself) would see a world of one under a step of many tasks: refused. Slurm's
# variables are set by hand here, as srun would set them for task 1 of 2.
SLURM_STEP_ID=0 SLURM_PROCID=1 SLURM_STEP_NUM_TASKS=2 timeout 60 "$ptdp" train --plan plan.json \
  --data data.bin --steps 1 --backend cpu > nopmi.out 2> nopmi.err
rc=$?
[ "$rc" = 2 ] && grep -q "launch: srun started 2 tasks but MPI sees a world of 1 (task 1)" nopmi.err ||
  { cat nopmi.out nopmi.err; fail "srun without PMI: exit $rc"; }

# The same for the local rank (which picks the GPU): one task alone on its host is local rank 0.
SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=1 SLURM_LOCALID=1 timeout 60 "$ptdp" train \
  --plan plan.json --data data.bin --steps 1 --backend cpu > local.out 2> local.err
rc=$?
[ "$rc" = 2 ] && grep -q "launch: rank 0 is local rank 0 on .* but SLURM_LOCALID says 1" local.err ||
  { cat local.out local.err; fail "SLURM_LOCALID 1 for a lone task: exit $rc"; }

# 5. Bad requests.
"$ptdp" launch --plan plan.json --scheduler slurm --data data.bin --steps 6 --nodes 3 \
  --dry-run > /dev/null 2> nodes.err
rc=$?
[ "$rc" = 2 ] && grep -q -- "--nodes: the plan needs 1 node(s) of 4 GPUs (4 ranks), not 3" nodes.err ||
  { cat nodes.err; fail "--nodes 3: exit $rc"; }
"$ptdp" launch --plan plan.json --scheduler pbs --data data.bin --steps 6 --dry-run \
  > /dev/null 2> sched.err
rc=$?
[ "$rc" = 2 ] && grep -q -- "--scheduler: 'pbs' is not slurm or mpirun" sched.err ||
  { cat sched.err; fail "--scheduler pbs: exit $rc"; }
"$ptdp" launch --plan plan.json --scheduler slurm --data data.bin --steps 6 --dry-run \
  --time "$(printf '1:00\n#SBATCH --x')" > /dev/null 2> time.err
rc=$?
[ "$rc" = 2 ] && [ "$(wc -l < time.err)" = 1 ] && grep -q -- "--time: must be one word" time.err ||
  { cat time.err; fail "--time with a newline: exit $rc"; }
# 6. Shapes: two nodes of 2 (plan2), a hostfile of both hosts and an sbatch of 2 x 2 tasks; a plan
# whose GPUs per node do not divide its ranks is refused.
"$ptdp" launch --plan plan2.json --scheduler mpirun --data data.bin --steps 6 --hosts n1,n2 \
  --dry-run > two.out || fail "two nodes, mpirun"
grep -A2 '^# hostfile:' two.out | tail -2 | tr '\n' ' ' | grep -q '^n1 slots=2 n2 slots=2 $' ||
  { cat two.out; fail "two nodes: hostfile"; }
"$ptdp" launch --plan plan2.json --scheduler slurm --data data.bin --steps 6 --dry-run > two.sbatch ||
  fail "two nodes, slurm"
grep -q '^#SBATCH --nodes=2$' two.sbatch && grep -q '^#SBATCH --ntasks-per-node=2$' two.sbatch ||
  { cat two.sbatch; fail "two nodes: sbatch header"; }
"$ptdp" launch --plan plan2.json --scheduler mpirun --data data.bin --steps 6 --hosts n1 \
  --dry-run > /dev/null 2> hosts.err
[ $? = 2 ] && grep -q -- "--hosts: 1 host(s) for the plan's 2 node(s)" hosts.err ||
  { cat hosts.err; fail "one host for two nodes"; }
sed 's/"gpus_per_node": *[0-9]*/"gpus_per_node": 3/' plan.json > plan3.json
"$ptdp" launch --plan plan3.json --scheduler slurm --data data.bin --steps 6 --dry-run \
  > /dev/null 2> three.err
[ $? = 2 ] && grep -q "plan.cluster.gpus_per_node: 3 does not divide the plan's 4 ranks" three.err ||
  { cat three.err; fail "3 GPUs per node for 4 ranks"; }
"$ptdp" launch --plan plan.json --scheduler slurm --data missing.bin --steps 6 --dry-run \
  > /dev/null 2> data.err
[ $? = 2 ] && grep -q -- "--data: '.*missing.bin' is not a file (or a PREFIX of .bin and .idx) here" data.err ||
  { cat data.err; fail "missing --data"; }
# A blend (docs/data.md): every file checked, each path made absolute in the train line.
"$ptdp" launch --plan plan.json --scheduler slurm --data 0.3 data.bin 0.7 missing.bin --steps 6 \
  --dry-run > /dev/null 2> blend.err
[ $? = 2 ] && grep -q -- "--data: 'missing.bin' is not a file (or a PREFIX of .bin and .idx) here" blend.err ||
  { cat blend.err; fail "a blend's missing file"; }
"$ptdp" launch --plan plan.json --scheduler slurm --data 0.3 data.bin 0.7 data.bin --steps 6 \
  --dry-run > blend.sbatch || fail "a blend's dry run"
grep -qF -- "--data '0.3' '$PWD/data.bin' '0.7' '$PWD/data.bin' --steps 6" blend.sbatch ||
  { grep -- "--data" blend.sbatch; fail "a blend's train line"; }
# 7. The relaunch loop of job.sh.
"$here/../runtime/write_plan.sh" "$ptdp" plan_p2.json 2 0.1 256 2 1 2 1 1 1 1f1b none true ||
  fail "plan_p2"
timeout 120 mpirun -np 2 "$ptdp" train --plan plan_p2.json --data data.bin --steps 6 \
  --backend cpu --log ref_p2.jsonl > ref_p2.out 2>&1 || { cat ref_p2.out; fail "p2 reference"; }
# The run's decision rests on measured windows (tests/runtime/monitor.sh, case relaunch): a job
# whose run proposed no relaunch (exit 0, no relaunch line) is started again from scratch, up to 3
# times.
for attempt in 1 2 3; do
  rm -rf jobr
  "$ptdp" launch --plan plan_p2.json --scheduler mpirun --data data.bin --steps 6 --backend cpu \
    --train-args "--adapt --monitor-every 2" --out jobr > /dev/null || fail "launch jobr"
  grep -q '^\[ "\$rc" = 75 \] && \[ "\$relaunches" -lt 3 \] || break$' jobr/job.sh ||
    { cat jobr/job.sh; fail "job.sh: no relaunch loop"; }
  timeout 240 bash jobr/job.sh > jobr.out 2>&1 || { cat jobr.out; fail "jobr: exit $?"; }
  grep -q ": relaunching (plan in" jobr.out && break
  echo "attempt $attempt: no relaunch proposed"
done
grep -q "ptdp job: the ranks saved for another layout; relaunch 1 of 3" jobr.out &&
  grep -q "resumed from step [0-9]* of latest" jobr.out || { cat jobr.out; fail "jobr: no relaunch"; }
[ -f jobr/checkpoints/relaunch-plan.json ] || fail "jobr: no relaunch-plan.json"
paste -d' ' <(fields ref_p2.jsonl | cut -d: -f3) <(fields jobr/logs/metrics.jsonl | cut -d: -f3) |
  awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > 1e-5) bad = 1; n++ }
       END { exit !(n == 6 && !bad) }' || fail "jobr: losses differ from the plain run's"
echo "relaunch loop: job.sh relaunched once in another layout; 6 losses within 1e-5"
echo "PASS"
