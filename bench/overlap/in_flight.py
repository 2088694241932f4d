#!/usr/bin/env python3
# What the overlapped reduction still had to do when the backward ended: for each `ptdp train
# --overlap-grad-reduce --trace` file given (bench.sh leaves them as WORKDIR/*-on-*.trace.json),
# per pipeline rank, the counter dp_grad_reduce_in_flight_MiB at the end of the rank's last
# backward (or weight half) before reduce_grads: the buckets started and not yet seen complete
# there. Started only after that instruction, every bucket of the rank's last chunk is in it; the
# per-layer start lowers it when buckets complete under the backward.
# usage: bench/overlap/in_flight.py TRACE...
import json
import sys

COUNTER = "dp_grad_reduce_in_flight_MiB"
for path in sys.argv[1:]:
    events = json.load(open(path))["traceEvents"]
    cells = []
    for rank in sorted({e["pid"] for e in events if e.get("ph") == "X"}):
        instrs = sorted((e for e in events if e.get("ph") == "X" and e["pid"] == rank),
                        key=lambda e: e["ts"])
        reduce = next(e for e in instrs if e["args"]["op"] == "reduce_grads")
        last = [e for e in instrs if e["args"]["op"] in ("backward", "backward_weight")
                and e["ts"] < reduce["ts"]][-1]
        end = last["ts"] + last["dur"]
        samples = [c for c in events
                   if c.get("ph") == "C" and c["pid"] == rank and c["name"] == COUNTER]
        at_end = min(samples, key=lambda c: abs(c["ts"] - end))["args"][COUNTER]
        cells.append(f"p{rank}: {at_end:.1f} MiB")
    print(path, " ".join(cells))
