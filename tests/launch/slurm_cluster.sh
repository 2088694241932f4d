# Sourced by the Slurm tests: a one-node Slurm (slurmctld + slurmd in the foreground, as this user)
# configured in a temporary folder, torn down by stop_slurm. Authentication is auth/none with
# cred/none (Debian's slurm-wlm 22.05 ships both plug-ins), so no munge daemon or key is needed on
# this single host; a real cluster uses munge. The node claims 8 CPUs whatever the machine has
# (SlurmdParameters=config_overrides), so a job of several tasks runs on a 2-core machine.
#   ensure_slurm        installs slurm-wlm with apt when missing; returns 77 (skip) when it cannot
#   start_slurm DIR     writes DIR/slurm.conf, starts the daemons, waits for the node to be idle
#   stop_slurm          stops them (register it with trap)
#   wait_job ID SECS    waits until job ID has ended; prints its final JobState
ensure_slurm() {
  command -v slurmctld > /dev/null && command -v slurmd > /dev/null && command -v sbatch > /dev/null &&
    return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get > /dev/null; then
    echo "SKIPPED: Slurm is not installed and this user cannot apt-get install slurm-wlm"
    return 77
  fi
  echo "installing slurm-wlm (apt)"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm > /dev/null 2>&1; then
    apt-get update -qq > /dev/null 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm > /dev/null 2>&1 || {
      echo "SKIPPED: apt-get install slurm-wlm failed"
      return 77
    }
  fi
}

# Two TCP ports free now (the kernel's picks, both held while picked so they differ), so that tests
# running side by side, or daemons left by a killed run, do not collide.
free_ports() {
  python3 -c 'import socket
a, b = socket.socket(), socket.socket()
a.bind(("", 0)); b.bind(("", 0))
print(a.getsockname()[1], b.getsockname()[1])'
}

slurm_pids=()
start_slurm() {
  local dir=$1 ctld_port d_port
  read -r ctld_port d_port < <(free_ports)
  [ -n "$d_port" ] || { echo "FAIL: no free ports"; return 1; }
  mkdir -p "$dir/state" "$dir/spool" "$dir/log"
  cat > "$dir/slurm.conf" <<CONF
ClusterName=ptdptest
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
AuthType=auth/none
CredType=cred/none
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
MinJobAge=600
# A requeued job waits cred_expire seconds (default 120) before it may start again, and pending
# jobs are looked at every sched_interval seconds (default 60): both short, so the test is fast.
AuthInfo=cred_expire=5
SchedulerParameters=sched_interval=1
NodeName=localhost NodeHostname=$(hostname) CPUs=8 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -D -i > "$dir/log/slurmctld.out" 2>&1 &
  slurm_pids+=($!)
  slurmd -D -N localhost > "$dir/log/slurmd.out" 2>&1 &
  slurm_pids+=($!)
  local i
  for i in $(seq 1 60); do
    sinfo -h -o %T 2>/dev/null | grep -q '^idle' && return 0
    sleep 0.5
  done
  echo "SKIPPED: Slurm did not start here (slurmctld/slurmd logs follow)"
  tail -n 5 "$dir"/log/*
  return 77
}

stop_slurm() {
  local p
  for p in "${slurm_pids[@]}"; do kill "$p" 2> /dev/null; done
  for p in "${slurm_pids[@]}"; do wait "$p" 2> /dev/null; done
  slurm_pids=()
}

job_state() { scontrol show job "$1" 2> /dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }

wait_job() {
  local id=$1 secs=$2 s t0=$SECONDS
  while [ $((SECONDS - t0)) -lt "$secs" ]; do
    s=$(job_state "$id")
    case "$s" in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
        echo "$s"
        return 0
        ;;
    esac
    sleep 0.5
  done
  echo "TIMEOUT_WAITING($(job_state "$id"))"
}
