#!/usr/bin/env python3
"""The calibrate stage of bench/gpu/run_all.sh (issue 13, "close the loop" on a GPU): which run to
trace, and the table of every trained run's step time predicted from the measured profile and from
the profile `ptdp calibrate` fitted to the traced run.

usage: close_loop.py fastest WORKDIR MODEL
           the microbatch of MODEL's fastest run in WORKDIR (bench/gpu/compare.sh's
           MODEL.mbsB.jsonl logs, tokens/s = B x seq_len / measured step)
       close_loop.py fix PLAN
           the plan's layout as a `ptdp plan --fix` string
       close_loop.py clocks CSV
           one line of the SM clock, power and temperature nvidia-smi sampled while the traced
           run trained (run_all.sh writes OUT_DIR/clocks.MODEL.csv)
       close_loop.py table OUT_DIR TRACED_MODEL TRACED_MBS
           reads OUT_DIR/close-loop/*.{start,calibrated}.json (ptdp simulate --format json of each
           run's plan with either profile), each run's log in OUT_DIR/ptdp-MODEL/, and the traced
           run's ptdp compare reports (OUT_DIR/compare.MODEL.{before,after}.txt); writes
           OUT_DIR/calibration.json and prints the table
"""
import glob
import json
import os
import re
import statistics
import sys

WARMUP_STEPS = 3  # the first steps of a log are warm-up, as compare.sh counts them


def measured_step_s(log_path):
    """Median iteration time of a `ptdp train --log` file after its warm-up steps (compare.sh's
    rule: skip the first 3 steps, or all but the last when there are fewer)."""
    rows = [json.loads(l) for l in open(log_path) if l.strip()]
    if not rows:
        raise ValueError("%s: no steps logged" % log_path)
    rows = rows[min(WARMUP_STEPS, len(rows) - 1):]
    return statistics.median(r["iteration_s"] for r in rows)


def runs_of(workdir, model):
    """(microbatch, plan path, log path) of every run of MODEL that trained (a log with steps)."""
    out = []
    for plan in glob.glob(os.path.join(workdir, "%s.mbs*.plan.json" % model)):
        mbs = int(re.search(r"\.mbs(\d+)\.plan\.json$", plan).group(1))
        log = os.path.join(workdir, "%s.mbs%d.jsonl" % (model, mbs))
        if os.path.exists(log) and os.path.getsize(log) > 0:
            out.append((mbs, plan, log))
    return sorted(out)


def fastest(workdir, model):
    best = None
    for mbs, _, log in runs_of(workdir, model):
        rate = mbs / measured_step_s(log)  # tokens/s over seq_len, the same for every run of MODEL
        if best is None or rate > best[0]:
            best = (rate, mbs)
    if best is None:
        print("close_loop.py: no trained run of %s in %s" % (model, workdir), file=sys.stderr)
        return 1
    print(best[1])
    return 0


def fix_of(plan_path):
    """The plan's layout as a `ptdp plan --fix` string (every key, so that a plan made from it has
    the same layout)."""
    layout = json.load(open(plan_path))["layout"]
    return ",".join("%s=%s" % (k, ("on" if v else "off") if isinstance(v, bool) else v)
                    for k, v in layout.items())


def compare_medians(path):
    """(step error, median |error| over all instructions, over the compute ones) of a ptdp compare
    report, in percent; None for what it does not hold."""
    if not os.path.exists(path):
        return None, None, None
    text = open(path).read()
    def grab(pattern):
        m = re.search(pattern, text)
        return float(m.group(1)) if m else None
    return (grab(r"step time: predicted [0-9.]+ ms, measured [0-9.]+ ms \(([-+0-9.]+)%\)"),
            grab(r"median \|error\| per instruction ([0-9.]+)%"),
            grab(r"optimizer step\) ([0-9.]+)%"))


def table(out, traced_model, traced_mbs):
    rows = []
    for work in sorted(glob.glob(os.path.join(out, "ptdp-*"))):
        model = os.path.basename(work)[len("ptdp-"):]
        for mbs, plan, log in runs_of(work, model):
            name = "%s.mbs%d" % (model, mbs)
            pred = {}
            for profile in ("start", "calibrated"):
                path = os.path.join(out, "close-loop", "%s.%s.json" % (name, profile))
                if os.path.exists(path):
                    pred[profile] = json.load(open(path))["iteration_s"]
            meas = measured_step_s(log)
            row = {"model": model, "microbatch": mbs, "plan": plan,
                   "traced": model == traced_model and mbs == traced_mbs,
                   "step_ms": meas * 1e3}
            for profile, key in (("start", "before"), ("calibrated", "after")):
                if profile in pred:
                    row["predicted_%s_ms" % key] = pred[profile] * 1e3
                    row["error_%s" % key] = (pred[profile] - meas) / meas
            rows.append(row)
    traced = {}
    for when in ("before", "after"):
        step, every, compute = compare_medians(
            os.path.join(out, "compare.%s.%s.txt" % (traced_model, when)))
        traced[when] = {"step_error_pct": step, "median_error_pct": every,
                        "median_error_compute_pct": compute}
    # The traced run is a run of its own (the stage trains the same layout again, several
    # microbatches a step): its step is in the header, not in the rows.
    rerun_log = os.path.join(out, "trace.%s.jsonl" % traced_model)
    rerun_ms = measured_step_s(rerun_log) * 1e3 if os.path.exists(rerun_log) else None
    traced_plan = os.path.join(out, "traced.%s.plan.json" % traced_model)
    microbatches = None
    if os.path.exists(traced_plan):
        p = json.load(open(traced_plan))
        microbatches = p["global_batch"] // p["layout"]["mbs"]
    result = {"traced": {"model": traced_model, "microbatch": traced_mbs, "step_ms": rerun_ms,
                         "microbatches": microbatches, "plan": traced_plan,
                         "trace": os.path.join(out, "trace.%s.json" % traced_model),
                         "calibrated_profile": os.path.join(out, "profile.calibrated.json"),
                         "compare": traced},
              "runs": rows}
    with open(os.path.join(out, "calibration.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(format_table(result))
    return 0


def pct(x):
    return "%+.1f%%" % (100 * x) if x is not None else "-"


def format_table(result):
    """The text summarize.py prints too (one source for both)."""
    t = result["traced"]
    c = t["compare"]
    lines = ["calibrated on %s mbs %d at %s microbatches a step (trace %s, step %s ms); that run's "
             "step error %s -> %s, median |error| per instruction %s -> %s (compute %s -> %s)" % (
                 t["model"], t["microbatch"], t.get("microbatches", "?"), os.path.basename(t["trace"]),
                 "%.2f" % t["step_ms"] if t.get("step_ms") is not None else "-",
                 fmt_pct(c["before"]["step_error_pct"], True), fmt_pct(c["after"]["step_error_pct"], True),
                 fmt_pct(c["before"]["median_error_pct"]), fmt_pct(c["after"]["median_error_pct"]),
                 fmt_pct(c["before"]["median_error_compute_pct"]),
                 fmt_pct(c["after"]["median_error_compute_pct"]))]
    lines.append("%-10s %4s %10s %12s %12s %9s %9s" % (
        "model", "mbs", "step_ms", "pred_before", "pred_after", "err_bef", "err_aft"))
    for r in result["runs"]:
        lines.append("%-10s %4d %10.2f %12s %12s %9s %9s%s" % (
            r["model"], r["microbatch"], r["step_ms"],
            "%.2f" % r["predicted_before_ms"] if "predicted_before_ms" in r else "-",
            "%.2f" % r["predicted_after_ms"] if "predicted_after_ms" in r else "-",
            pct(r.get("error_before")), pct(r.get("error_after")),
            "  (the traced shapes)" if r["traced"] else ""))
    return "\n".join(lines)


def fmt_pct(x, signed=False):
    return ("%+.1f%%" if signed else "%.1f%%") % x if x is not None else "-"


def clocks(path):
    """One line from nvidia-smi's samples (timestamp, SM MHz, power W, temperature C, no header, no
    units) of the traced run: the SM clock's range, the highest power and temperature. Lines that
    do not parse (an error message, a row cut by the kill) are left out."""
    rows = []
    for line in open(path):
        parts = [p.strip() for p in line.split(",")]
        try:
            rows.append((float(parts[1]), float(parts[2]), float(parts[3])))
        except (IndexError, ValueError):
            continue
    if not rows:
        print("clocks: no sample in %s" % path)
        return 1
    sm = [r[0] for r in rows]
    print("clocks during the traced run (%d samples, 50 ms apart): SM %.0f-%.0f MHz (median %.0f), "
          "power up to %.0f W, temperature up to %.0f C" % (
              len(rows), min(sm), max(sm), statistics.median(sm), max(r[1] for r in rows),
              max(r[2] for r in rows)))
    return 0


def main(argv):
    if len(argv) == 2 and argv[0] == "clocks":
        return clocks(argv[1])
    if len(argv) == 3 and argv[0] == "fastest":
        return fastest(argv[1], argv[2])
    if len(argv) == 2 and argv[0] == "fix":
        print(fix_of(argv[1]))
        return 0
    if len(argv) == 4 and argv[0] == "table" and argv[3].isdigit():
        return table(argv[1], argv[2], int(argv[3]))
    print("close_loop.py: expected `fastest WORKDIR MODEL`, `fix PLAN`, `clocks CSV` or `table "
          "OUT_DIR MODEL MICROBATCH` (a whole number), got: %s" % " ".join(argv), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
