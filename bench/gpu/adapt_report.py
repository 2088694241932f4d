#!/usr/bin/env python3
"""The adapt stage's figures (bench/gpu/adapt_stage.sh): from OUT's adapt.{base,slow,adapt}.jsonl
(--log), adapt.adapt.out (stdout of the adapted run), adapt.plan.json and adapt.runs.tsv, writes
OUT/adapt.json and prints the report; exit 1 unless the acceptance (issue 13) passes:
  every run exited 0;
  the first monitor window names the slowed rank (1) its slowest straggler;
  the lost throughput recovered, (adapt - slow) / (base - slow), is at least 50%; tokens/s is the
    mean of --log's tokens_per_s over the steps after the first window (bench/adapt/bench.sh's),
    with adapt_stage.sh --rounds R the mean of that over the R rounds (the rounds runs.tsv names:
    base, slow, adapt, then base.r2 ... with logs adapt.base.r2.jsonl ...; each round's own figure
    is printed too);
  every step's loss of every adapted run is within the equivalence bound of base's (round 1's):
    |L' - L| / L <= 2u (TV_k / L + 1 / sqrt(B s))   (tests/cuda/train_vs_cpu.sh's bound; TV_k: base's
    loss variation up to step k; B s: a step's tokens; u = 2^-8 in bf16, 2^-11 in fp16, 256 x 2^-24
    in fp32, as there).

usage: adapt_report.py OUT [--slow-factor F] [--monitor-every N] [--backend B] [--ranks P] [--sharing TEXT]
       adapt_report.py --loss-tol OUT   (prints the loosest per-step bound: ptdp's --loss-tol)
"""
import json
import math
import os
import re
import sys

SLOW_RANK = 1
UNIT_ROUNDOFF = {"bf16": 2.0**-8, "fp16": 2.0**-11, "fp32": 256 * 2.0**-24}


def read_log(path):
    """--log lines by step (the last of a step wins); {} when the file is missing."""
    steps = {}
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                rec = json.loads(line)
                steps[rec["step"]] = rec
    return steps


def loss_bounds(out):
    """Per step of base's log: the relative bound on an equivalent run's loss."""
    plan = json.load(open(os.path.join(out, "adapt.plan.json")))
    u = UNIT_ROUNDOFF[plan["layout"].get("precision", "fp32")]
    tokens = plan["global_batch"] * plan["model"]["seq_len"]
    base = read_log(os.path.join(out, "adapt.base.jsonl"))
    bounds, tv, prev = {}, 0.0, None
    for k in sorted(base):
        loss = base[k]["loss"]
        if prev is not None:
            tv += abs(loss - prev)
        prev = loss
        bounds[k] = 2 * u * (tv / loss + 1 / math.sqrt(tokens))
    return bounds


def mean_tps(log, first):
    v = [r["tokens_per_s"] for k, r in log.items() if k >= first]
    return sum(v) / len(v) if v else None


KINDS = ("base", "slow", "adapt")


def round_suffixes(runs):
    """The log suffix of each round runs.tsv lists: '' for round 1, then '.r2', '.r3', ..."""
    later = sorted({int(m.group(1)) for n in runs for m in [re.match(r"^\w+\.r(\d+)$", n)] if m})
    return [""] + [".r%d" % k for k in later]


def recovered(t):
    b, s, a = (t[k] for k in KINDS)
    return (a - s) / (b - s) if None not in (a, s, b) and b > s else None


def mean_over(values):
    return None if not values or None in values else sum(values) / len(values)


def first_line(lines, prefix):
    return next((l.rstrip("\n") for l in lines if l.startswith(prefix)), "")


def analyse(out, slow_factor, monitor, backend, ranks=2, sharing=""):
    runs = {}
    path = os.path.join(out, "adapt.runs.tsv")
    if os.path.exists(path):
        for line in list(open(path))[1:]:
            name, rc, seconds = line.rstrip("\n").split("\t")
            runs[name] = {"rc": int(rc), "seconds": float(seconds)}
    logs = {k: read_log(os.path.join(out, "adapt.%s.jsonl" % k)) for k in KINDS}
    path = os.path.join(out, "adapt.adapt.out")
    lines = open(path).readlines() if os.path.exists(path) else []
    r = {"backend": backend, "ranks": ranks, "sharing": sharing, "slow_rank": SLOW_RANK,
         "slow_factor": slow_factor, "monitor_every": monitor, "runs": runs,
         "first_step_measured": monitor + 1}
    # Ranks time-sharing one whole GPU are not P devices: a sleeping straggler frees the GPU for
    # the others (docs/cuda.md), so the recovery measures the sharing, not the re-planner.
    r["meaningful"] = not (backend == "cuda" and sharing.startswith("time-sliced"))
    r["monitor_line"] = first_line(lines, " monitor steps")
    named = re.search(r"^ monitor steps \d+-%d .*stragglers: rank (\d+) \(" % monitor, r["monitor_line"])
    r["straggler_named_first_window"] = bool(named) and int(named.group(1)) == SLOW_RANK
    r["replan_line"] = first_line(lines, " adapt after step")
    r["switch_line"] = first_line(lines, " switched after step")
    r["undone_line"] = next((l.rstrip("\n") for l in lines if "undoing the switch" in l), "")
    moved = re.search(r"^ switched after step (\d+) .* in ([0-9.]+) s[;)]", r["switch_line"])
    if moved:
        after = int(moved.group(1)) + 1
        r["switch_s"] = float(moved.group(2))
        r["first_step_after_switch_s"] = logs["adapt"].get(after, {}).get("iteration_s")
        parts = re.search(r"save ([0-9.]+), new trainer ([0-9.]+), load ([0-9.]+) s\)", r["switch_line"])
        if parts:
            r["switch_parts_s"] = dict(zip(("save", "new_trainer", "load"), map(float, parts.groups())))
    # Tokens/s after the first window (bench.sh's), and after the switch's trial window too; per
    # round, and their mean over the rounds (the figure the acceptance reads).
    suffixes = round_suffixes(runs)
    r["rounds"] = []
    adapt_logs = []
    for sfx in suffixes:
        lg = logs if not sfx else {
            k: read_log(os.path.join(out, "adapt.%s%s.jsonl" % (k, sfx))) for k in KINDS}
        adapt_logs.append(lg["adapt"])
        one = {w: {k: mean_tps(lg[k], first) for k in KINDS}
               for w, first in (("tokens_per_s", monitor + 1),
                                ("tokens_per_s_after_trial", 2 * monitor + 1))}
        one["recovered"] = recovered(one["tokens_per_s"])
        one["recovered_after_trial"] = recovered(one["tokens_per_s_after_trial"])
        r["rounds"].append(one)
    for w in ("tokens_per_s", "tokens_per_s_after_trial"):
        r[w] = {k: mean_over([one[w][k] for one in r["rounds"]]) for k in KINDS}
    r["recovered"] = recovered(r["tokens_per_s"])
    r["recovered_after_trial"] = recovered(r["tokens_per_s_after_trial"])
    # Losses: every step of every adapted run against base's (round 1's), each within its bound.
    bounds = loss_bounds(out) if logs["base"] else {}
    worst = None
    compared = 0
    complete = bool(bounds)
    for lg in adapt_logs:
        complete = complete and len(lg) == len(bounds) and all(k in lg for k in bounds)
        for k, bound in bounds.items():
            if k not in lg:
                continue
            compared += 1
            ref = logs["base"][k]["loss"]
            d = abs(lg[k]["loss"] - ref) / ref
            if worst is None or d / bound > worst["ratio"]:
                worst = {"step": k, "relative": d, "bound": bound, "ratio": d / bound}
    r["losses_compared"] = compared
    r["loss_worst"] = worst
    r["losses_within_bound"] = worst is not None and worst["ratio"] <= 1 and complete
    checks = {
        "every run exited 0": (len(runs) == 3 * len(suffixes) and
                               all(v["rc"] == 0 for v in runs.values())),
        "straggler named in the first window": r["straggler_named_first_window"],
        "recovered >= 50%": r["recovered"] is not None and r["recovered"] >= 0.5,
        "losses within the equivalence bound": r["losses_within_bound"],
    }
    r["failed_checks"] = [c for c, ok in checks.items() if not ok]
    r["acceptance"] = "PASS" if not r["failed_checks"] else "FAIL"
    return r


def pct(x):
    return "n/a" if x is None else "%.1f%%" % (100 * x)


def tps(x):
    return "n/a" if x is None else "%.0f" % x


def format_report(r):
    """The report's lines (also summarize.py's section)."""
    out = ["adapt (issue 13, %s): %d ranks t1 p%d d1 (%s), world rank %d slowed %gx, "
           "--monitor-every %d --adapt" % (r["backend"], r.get("ranks", 2), r.get("ranks", 2),
                                           r.get("sharing") or "sharing not recorded",
                                           r["slow_rank"], r["slow_factor"], r["monitor_every"])]
    out.append("  first monitor line: %s" % (r["monitor_line"].strip()[:220] or "none"))
    out.append("  re-plan: %s" % (r["replan_line"].strip()[:400] or "none"))
    out.append("  switch:  %s" % (r["switch_line"].strip()[:300] or "none"))
    if r["undone_line"]:
        out.append("  undone:  %s" % r["undone_line"].strip()[:200])
    if "switch_s" in r:
        parts = r.get("switch_parts_s")
        out.append("  the switch: state moved in %.3f s%s; the first step after it took %s s" % (
            r["switch_s"], "" if parts is None else
            " (rank 0: save %.3f, new trainer %.3f, load %.3f)" % (
                parts["save"], parts["new_trainer"], parts["load"]),
            "n/a" if r["first_step_after_switch_s"] is None
            else "%.4f" % r["first_step_after_switch_s"]))
    runs = r["runs"]
    rounds = r.get("rounds", [])
    of = "" if len(rounds) < 2 else " (mean of %d rounds)" % len(rounds)
    for k, label in (("base", "no straggler"), ("slow", "rank 1 slowed"), ("adapt", "slowed, --adapt")):
        v = runs.get(k, {})
        out.append("  %-16s tokens/s %10s (steps >= %d), %10s (steps >= %d)   exit %s, %s s%s" % (
            label, tps(r["tokens_per_s"][k]), r["first_step_measured"],
            tps(r["tokens_per_s_after_trial"][k]), 2 * r["monitor_every"] + 1, v.get("rc", "-"),
            v.get("seconds", "-"), of))
    if len(rounds) > 1:
        for i, one in enumerate(rounds):
            t = one["tokens_per_s"]
            out.append("    round %d: base %s, slowed %s, adapt %s: %s recovered (%s after the trial)"
                       % (i + 1, tps(t["base"]), tps(t["slow"]), tps(t["adapt"]),
                          pct(one["recovered"]), pct(one["recovered_after_trial"])))
    out.append("  lost throughput recovered (adapt - slow) / (base - slow): %s (steps >= %d); %s "
               "after the trial window" % (pct(r["recovered"]), r["first_step_measured"],
                                          pct(r["recovered_after_trial"])))
    w = r["loss_worst"]
    out.append("  losses vs base: %d steps compared; %s" % (r["losses_compared"], "none" if w is None else
               "worst step %d: relative %.2e, bound %.2e (%.2f of it)" % (
                   w["step"], w["relative"], w["bound"], w["ratio"])))
    out.append("  acceptance: %s%s" % (r["acceptance"], "" if not r["failed_checks"] else
                                       " (" + "; ".join(r["failed_checks"]) + ")"))
    if not r.get("meaningful", True):
        out.append("  (not a measure of the re-planner: the ranks time-shared one whole GPU, so the "
                   "sleeping straggler freed it for the others)")
    return out


def main(argv):
    if len(argv) == 2 and argv[0] == "--loss-tol":
        bounds = loss_bounds(argv[1])
        if not bounds:
            print("adapt_report.py --loss-tol: base's log has no steps", file=sys.stderr)
            return 1
        print("%.6e" % max(bounds.values()))
        return 0
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    out, opts = argv[0], dict(zip(argv[1::2], argv[2::2]))
    r = analyse(out, float(opts.get("--slow-factor", 3)), int(opts.get("--monitor-every", 4)),
                opts.get("--backend", "cuda"), int(opts.get("--ranks", 2)), opts.get("--sharing", ""))
    with open(os.path.join(out, "adapt.json"), "w") as f:
        json.dump(r, f, indent=1)
    print("\n".join(format_report(r)))
    return 0 if r["acceptance"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
