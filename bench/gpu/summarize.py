#!/usr/bin/env python3
"""The summary of bench/gpu/run_all.sh: stages (ok / FAILED / TIMEOUT / SKIPPED), then tokens/s, MFU
and step time of ptdp and PyTorch per model, with ptdp's predicted step time beside its measured one,
then the calibrate stage's table (calibration.json: every ptdp run's step predicted from the measured
and from the calibrated profile, bench/gpu/close_loop.py), then the adapt stage's report and PASS/FAIL
(adapt.json, bench/gpu/adapt_report.py). Writes OUT_DIR/summary.json; prints the text table (run_all.sh saves it as summary.txt).

usage: summarize.py OUT_DIR PEAK_TFLOPS MODEL...
"""
import json
import os
import sys

from adapt_report import format_report
from close_loop import format_table


def read_json_lines(path):
    rows = []
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    return rows


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    out, peak, models = argv[0], argv[1], argv[2:]
    stages = []
    with open(os.path.join(out, "stages.tsv")) as f:
        next(f)
        for line in f:
            name, status, seconds, note = (line.rstrip("\n").split("\t") + [""] * 4)[:4]
            stages.append({"stage": name, "status": status, "seconds": int(seconds or 0), "note": note})
    def why(stage):  # a missing result: its stage's status and note, SKIPPED told apart from FAILED
        for st in stages:
            if st["stage"] == stage:
                return "%s (stage %s) %s" % (st["status"], stage, st["note"])
        return "no result (stage %s not run)" % stage

    rows = []
    for m in models:
        ptdp = read_json_lines(os.path.join(out, "ptdp-" + m, "results.jsonl"))
        rows += ptdp or [{"impl": "ptdp", "mode": "", "model": m, "error": why("ptdp-" + m)}]
        for mode in ("eager", "compile"):
            got = read_json_lines(os.path.join(out, "torch.%s.%s.json" % (m, mode)))
            rows += got[-1:] or [{"impl": "pytorch", "mode": mode, "model": m, "error": why("torch-" + m)}]
    probe = os.path.join(out, "probe.log")
    if os.path.exists(probe):
        print("".join(open(probe).readlines()[:14]).rstrip())
        print()
    print("%-16s %-8s %7s  %s" % ("stage", "status", "seconds", "note"))
    for s in stages:
        print("%-16s %-8s %7d  %s" % (s["stage"], s["status"], s["seconds"], s["note"]))
    failed = [s["stage"] for s in stages if s["status"] in ("FAILED", "TIMEOUT")]
    skipped = [s["stage"] for s in stages if s["status"] == "SKIPPED"]
    print("failed: %s; skipped: %s" % (", ".join(failed) or "none", ", ".join(skipped) or "none"))
    print()
    print("peak %s TFLOP/s for MFU" % peak)
    print("%-10s %-16s %5s %12s %7s %10s %22s" % ("model", "impl", "mbs", "tokens/s", "MFU", "step_ms",
                                                  "predicted_ms (error)"))
    for r in rows:
        impl = r["impl"] + ("/" + r["mode"] if r.get("mode") else "")
        if "error" in r:
            e = str(r["error"])
            if not e.startswith(("SKIPPED", "FAILED", "TIMEOUT")):
                e = "FAILED: " + e
            print("%-10s %-16s %s" % (r.get("model", "?"), impl, e[:120]))
            continue
        pred = r.get("predicted_step_ms")
        err = ("%.2f (%+.1f%%)" % (pred, 100 * (pred - r["step_ms"]) / r["step_ms"])) if pred else ""
        print("%-10s %-16s %5d %12.1f %6.1f%% %10.2f %22s" % (
            r.get("model", "?"), impl, r.get("microbatch", 0), r.get("tokens_per_s", 0),
            100 * (r.get("mfu") or 0), r.get("step_ms", 0), err))
    print()
    calibration = None
    path = os.path.join(out, "calibration.json")
    if os.path.exists(path):
        calibration = json.load(open(path))
        print("ptdp compare / calibrate (stage calibrate): step time predicted from the measured "
              "profile (before) and the calibrated one (after)")
        print(format_table(calibration))
    else:
        print("ptdp compare / calibrate: %s" % why("calibrate"))
    # Issue 13's monitor, straggler and --adapt (stage adapt, bench/gpu/adapt_stage.sh).
    print()
    adapt = None
    path = os.path.join(out, "adapt.json")
    if os.path.exists(path):
        adapt = json.load(open(path))
        print("\n".join(format_report(adapt)))
    else:
        print("adapt (issue 13): %s" % why("adapt"))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"peak_tflops": float(peak), "stages": stages, "failed": failed, "skipped": skipped,
                   "results": rows, "calibration": calibration, "adapt": adapt}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
