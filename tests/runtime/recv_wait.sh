#!/usr/bin/env bash
# A receive's wait for a slow sender is recorded as wait, not as transfer (docs/compare.md, "How
# the runtime measures"). 2 ranks, t1 p2 d1, 1F1B, 8 microbatches; world rank 0 (the first stage,
# which sends the activations) slowed 10x by the test-only --slow-rank 0 --slow-factor 10, so rank 1
# stands blocked in its activation receives. In the measured trace (--trace) rank 1's activation
# receives must hold that blocking in args.wait_ns, more of it than the transfers (the receives'
# durations) and at least half as much as rank 0's slowed forwards take (rank 1 waits for rank 0's
# slowed forward and backward of each microbatch, less its own fast ones), and every send's
# duration must equal its receive's. Folding the wait back into the receive's interval (wait_ns 0) fails the first
# check; no absolute time is asserted.
# usage: recv_wait.sh PTDP WORKDIR
set -uo pipefail
ptdp=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$(dirname "$0")/lib.sh"  # OpenMPI as root, oversubscribed; fail
fresh_dir_with_data "recv-wait"
"$here/write_plan.sh" "$ptdp" plan.json 4 0.1 256 8 1 2 1 1 1 1f1b none true || fail "plan"
timeout 120 mpirun -np 2 --oversubscribe "$ptdp" train --plan plan.json --data data.bin --steps 2 \
  --slow-rank 0 --slow-factor 10 --trace trace.json > run.out 2>&1 || { cat run.out; fail "train"; }
python3 - trace.json <<'PY' || exit 1
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
def of(rank, op):
    return [e["args"] for e in events if e["pid"] == rank and e["args"]["op"] == op]
recvs, forwards = of(1, "recv_act"), of(0, "forward")
wait = sum(a.get("wait_ns", 0) for a in recvs)
transfer = sum(a["end_ns"] - a["start_ns"] for a in recvs)
fwd = [a["end_ns"] - a["start_ns"] for a in forwards]
print(f"rank 1 activation receives: {len(recvs)}, waited {wait / 1e6:.3f} ms, "
      f"transfers {transfer / 1e6:.3f} ms; rank 0 forwards {sum(fwd) / 1e6:.3f} ms")
if len(recvs) != 8 or len(fwd) != 8:
    sys.exit("FAIL: expected 8 activation receives on rank 1 and 8 forwards on rank 0")
if wait <= transfer:
    sys.exit("FAIL: the receives' wait for the slowed sender is not recorded as wait")
if wait < 0.5 * sum(fwd):
    sys.exit("FAIL: the receives' recorded wait is under half of what the slowed sender added")
for kind, back in (("send_act", "recv_act"), ("send_grad", "recv_grad")):
    src = 0 if kind == "send_act" else 1
    sends = {(a["microbatch"], a["chunk"]): a["end_ns"] - a["start_ns"] for a in of(src, kind)}
    got = {(a["microbatch"], a["chunk"]): a["end_ns"] - a["start_ns"] for a in of(1 - src, back)}
    if sends != got:
        sys.exit(f"FAIL: {kind} durations differ from their receives' transfers")
print("ok: the wait is recorded as wait, sends carry their receives' transfers")
PY
