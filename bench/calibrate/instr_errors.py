#!/usr/bin/env python3
"""Per-instruction predicted against measured times of one run, and the receives' errors grouped
by what could explain them (docs/compare.md, "Where the receives' error comes from").

usage: instr_errors.py PREDICTED.json MEASURED.json [--dump FILE.tsv]
  PREDICTED  ptdp simulate --trace (e.g. with the calibrated profile), MEASURED ptdp train --trace
  of the same plan. Instructions are matched as ptdp compare matches them (pipeline rank, op,
  microbatch, chunk, peer). Prints, for recv_act and recv_grad, the median error and the median
  measured time of each group: by pipeline rank, by the phase of the rank's schedule (warm-up:
  before its first backward; cool-down: after its last forward; steady: between), by whether the
  peer was computing (a forward or backward of the peer overlapped the receive's interval), by
  microbatch (in quarters), and the rank correlation of the measured time with the receive's
  position in the step. --dump writes every matched instruction (rank, op, microbatch, chunk,
  peer, bytes, start, predicted and measured microseconds, error, wait, phase, peer busy).
"""
import json
import statistics
import sys

COMPUTE = ("forward", "backward")
MESSAGES = ("recv_act", "recv_grad", "send_act", "send_grad")


def load(path):
    events = []
    for e in json.load(open(path))["traceEvents"]:
        if e.get("ph") != "X":
            continue
        a = e["args"]
        events.append({"rank": e["pid"], "op": a["op"], "mb": a["microbatch"], "chunk": a["chunk"],
                       "peer": a.get("peer", -1), "bytes": a.get("bytes", 0),
                       "start": a["start_ns"], "end": a["end_ns"], "wait": a.get("wait_ns", 0)})
    return events


def key(e):
    return (e["rank"], e["op"], e["mb"], e["chunk"], e["peer"])


def phases(measured):
    """(rank, index in the rank's order) -> warm-up / steady / cool-down."""
    out = {}
    by_rank = {}
    for e in measured:
        by_rank.setdefault(e["rank"], []).append(e)
    for rank, evs in by_rank.items():
        evs.sort(key=lambda e: e["start"])
        first_bwd = min((i for i, e in enumerate(evs) if e["op"] == "backward"), default=len(evs))
        last_fwd = max((i for i, e in enumerate(evs) if e["op"] == "forward"), default=-1)
        for i, e in enumerate(evs):
            e["phase"] = "warm-up" if i < first_bwd else ("cool-down" if i > last_fwd else "steady")
            e["index"] = i
    return out


def peer_busy(e, measured):
    for o in measured:
        if o["rank"] == e["peer"] and o["op"] in COMPUTE and o["start"] < e["end"] and o["end"] > e["start"]:
            return True
    return False


def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0] * len(xs)
    for pos, i in enumerate(order):
        r[i] = pos
    return r


def spearman(xs, ys):
    if len(xs) < 3:
        return float("nan")
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den if den else float("nan")


def group_line(name, rows):
    errs = [r["err"] for r in rows]
    meas = [r["meas_us"] for r in rows]
    return "  %-22s n=%3d  median err %+6.1f%%  median |err| %5.1f%%  measured us: median %7.2f  p25 %7.2f  p75 %7.2f" % (
        name, len(rows), 100 * statistics.median(errs), 100 * statistics.median(abs(x) for x in errs),
        statistics.median(meas), quantile(meas, 0.25), quantile(meas, 0.75))


def quantile(xs, q):
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--dump"):
        print(__doc__.strip().splitlines()[-12], file=sys.stderr)
        return 2
    predicted = {key(e): e for e in load(argv[0])}
    measured = load(argv[1])
    phases(measured)
    rows = []
    for e in measured:
        p = predicted.get(key(e))
        if p is None:
            continue
        meas, pred = e["end"] - e["start"], p["end"] - p["start"]
        if meas <= 0:
            continue
        rows.append(dict(e, meas_us=meas / 1e3, pred_us=pred / 1e3, err=(pred - meas) / meas,
                         busy=e["op"].startswith("recv") and peer_busy(e, measured)))
    every = [abs(r["err"]) for r in rows]
    print("matched %d instructions; median |error| %.1f%%" % (len(rows), 100 * statistics.median(every)))
    for op in sorted({r["op"] for r in rows}):
        print(group_line(op, [r for r in rows if r["op"] == op]))
    for op in ("recv_act", "recv_grad"):
        rs = [r for r in rows if r["op"] == op]
        if not rs:
            continue
        print("%s (predicted %.2f us each)" % (op, statistics.median(r["pred_us"] for r in rs)))
        for rank in sorted({r["rank"] for r in rs}):
            print(group_line("rank %d" % rank, [r for r in rs if r["rank"] == rank]))
        for ph in ("warm-up", "steady", "cool-down"):
            g = [r for r in rs if r["phase"] == ph]
            if g:
                print(group_line(ph, g))
        for busy in (True, False):
            g = [r for r in rs if r["busy"] == busy]
            if g:
                print(group_line("peer computing" if busy else "peer not computing", g))
        mbs = sorted({r["mb"] for r in rs})
        q = max(1, (len(mbs) + 3) // 4)
        for i in range(0, len(mbs), q):
            g = [r for r in rs if mbs[i] <= r["mb"] <= mbs[min(i + q, len(mbs)) - 1]]
            print(group_line("microbatch %d-%d" % (mbs[i], mbs[min(i + q, len(mbs)) - 1]), g))
        waited = [r for r in rs if r["wait"] > 0]
        if waited and len(waited) < len(rs):
            print(group_line("waited for the sender", waited))
            print(group_line("message already there", [r for r in rs if r["wait"] == 0]))
        print("  rank correlation of measured time with position in the step: %+.2f; with wait: %+.2f" % (
            spearman([r["start"] for r in rs], [r["meas_us"] for r in rs]),
            spearman([r["wait"] for r in rs], [r["meas_us"] for r in rs])))
    # What a model with one more figure per group could reach at best: each message (a send carries
    # its receive's transfer) predicted at its group's measured median, every other instruction as
    # predicted. Groups: one for all messages (what one link figure fitted to the median gives),
    # per direction (recv_act / recv_grad, with their sends), per direction and microbatch quarter.
    def best_median(group_of):
        med = {}
        for r in rows:
            if r["op"] in MESSAGES:
                med.setdefault(group_of(r), []).append(r["meas_us"])
        med = {g: statistics.median(v) for g, v in med.items()}
        return statistics.median(abs(med[group_of(r)] - r["meas_us"]) / r["meas_us"] if r["op"] in MESSAGES
                                 else abs(r["err"]) for r in rows)
    direction = lambda r: r["op"].split("_")[1]
    print("median |error| over every instruction with each message at its group's measured median: "
          "one group %.1f%%, per direction %.1f%%, per direction and pipeline rank %.1f%%" % (
              100 * best_median(lambda r: 0), 100 * best_median(direction),
              100 * best_median(lambda r: (direction(r), r["rank"]))))
    if len(argv) == 4:
        with open(argv[3], "w") as f:
            f.write("rank\top\tmicrobatch\tchunk\tpeer\tbytes\tstart_us\tpred_us\tmeas_us\terr\twait_us\tphase\tpeer_busy\n")
            for r in sorted(rows, key=lambda r: (r["rank"], r["start"])):
                f.write("%d\t%s\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.4f\t%.2f\t%s\t%d\n" % (
                    r["rank"], r["op"], r["mb"], r["chunk"], r["peer"], r["bytes"], r["start"] / 1e3,
                    r["pred_us"], r["meas_us"], r["err"], r["wait"] / 1e3, r["phase"], r["busy"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
