#!/usr/bin/env python3
"""bench/gpu/adapt_report.py and summarize.py's adapt section on hand-made stage folders: a run that
meets issue 13's acceptance reads PASS with its figures; each way of missing it (straggler not named
in the first window, under half the lost throughput recovered, a loss outside its bound, a run that
failed, a step missing from the adapted log) reads FAIL naming that check. With rounds (adapt_stage.sh
--rounds), the figure is the rounds' mean and each round's is printed; a later round's failed run or
off loss fails the checks too.

usage: adapt_report_test.py REPO_ROOT WORKDIR
"""
import json
import math
import os
import shutil
import subprocess
import sys

ROOT, WORK = sys.argv[1], sys.argv[2]
REPORT = os.path.join(ROOT, "bench/gpu/adapt_report.py")
SUMMARIZE = os.path.join(ROOT, "bench/gpu/summarize.py")
STEPS, MONITOR = 12, 4
BASE_LOSS = [5.5 - 0.1 * k for k in range(STEPS)]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def write_log(path, losses, tps, skip_step=None):
    with open(path, "w") as f:
        for k, (loss, t) in enumerate(zip(losses, tps), start=1):
            if k != skip_step:
                f.write(json.dumps({"step": k, "loss": loss, "iteration_s": 1024 / t,
                                    "tokens_per_s": t}) + "\n")


def fixture(name, adapt_tps=800.0, monitor_line=None, loss_shift=None, adapt_rc=0, skip_step=None):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    json.dump({"layout": {"precision": "fp32"}, "global_batch": 8, "model": {"seq_len": 128}},
              open(os.path.join(d, "adapt.plan.json"), "w"))
    write_log(os.path.join(d, "adapt.base.jsonl"), BASE_LOSS, [1000.0] * STEPS)
    write_log(os.path.join(d, "adapt.slow.jsonl"), BASE_LOSS, [400.0] * STEPS)
    losses = list(BASE_LOSS)
    if loss_shift:
        step, rel = loss_shift
        losses[step - 1] *= 1 + rel
    # The first window and the trial run slowed; every step after the switch at adapt_tps.
    tps = [400.0] * MONITOR + [adapt_tps] * (STEPS - MONITOR)
    write_log(os.path.join(d, "adapt.adapt.jsonl"), losses, tps, skip_step)
    line = monitor_line or (" monitor steps 1-4 | utilisation 0.27 0.95 | bubble 0.376 | stage "
                            "imbalance 1.56 | stragglers: rank 1 (pp 1, tp 0, dp 0) 1.55x")
    with open(os.path.join(d, "adapt.adapt.out"), "w") as f:
        f.write(" iteration      4/    12 | ...\n" + line + "\n")
        f.write(" adapt after step 4: stage compute measured/modelled 11.8 40.6; 62 layouts "
                "simulated; running 5.0404 s, best 2.3515 s (tp=1,pp=2, layers 7/1, 53.3% shorter): "
                "switching\n")
        f.write(" switched after step 4 to tp=1,pp=2,last_stage_layers=1 (state moved through "
                "ptdp-switch in 0.776 s; rank 0: save 0.301, new trainer 0.125, load 0.340 s)\n")
    with open(os.path.join(d, "adapt.runs.tsv"), "w") as f:
        f.write("run\trc\tseconds\nbase\t0\t30.5\nslow\t0\t60.1\nadapt\t%d\t40.2\n" % adapt_rc)
    return d


def report(d):
    p = subprocess.run([sys.executable, REPORT, d, "--slow-factor", "3", "--monitor-every",
                        str(MONITOR), "--backend", "cpu"], capture_output=True, text=True)
    print(p.stdout + p.stderr)
    return p.returncode, p.stdout, json.load(open(os.path.join(d, "adapt.json")))


# Meets the acceptance: (800 - 400) / (1000 - 400) of the lost throughput recovered.
rc, text, r = report(fixture("pass"))
check(rc == 0 and r["acceptance"] == "PASS" and "acceptance: PASS" in text, "pass: PASS")
check(abs(r["recovered"] - 400 / 600) < 1e-12, "pass: recovered (800-400)/(1000-400)")
check(r["straggler_named_first_window"], "pass: rank 1 named in steps 1-4")
check(r["losses_compared"] == STEPS and r["loss_worst"]["relative"] == 0, "pass: 12 equal losses")
check(abs(r["switch_s"] - 0.776) < 1e-12 and abs(r["first_step_after_switch_s"] - 1.28) < 1e-12,
      "pass: the switch's seconds and the step after it")
check(r["switch_parts_s"] == {"save": 0.301, "new_trainer": 0.125, "load": 0.340} and
      "(rank 0: save 0.301, new trainer 0.125, load 0.340)" in text, "pass: the switch's parts")
check("66.7%" in text, "pass: the recovered share printed")
# --loss-tol: the loosest per-step bound, 2u (TV_k / L_k + 1 / sqrt(B s)), at the last step.
tol = float(subprocess.run([sys.executable, REPORT, "--loss-tol", os.path.join(WORK, "pass")],
                           capture_output=True, text=True).stdout)
u = 256 * 2.0**-24
want = 2 * u * (0.1 * (STEPS - 1) / BASE_LOSS[-1] + 1 / math.sqrt(8 * 128))
check(abs(tol - want) / want < 1e-5, "--loss-tol %g, expected %g" % (tol, want))


def fails(name, check_name, **kw):
    rc, text, r = report(fixture(name, **kw))
    check(rc == 1 and r["acceptance"] == "FAIL" and r["failed_checks"] == [check_name] and
          check_name in text, "%s: FAIL naming only '%s' (got %s)" % (name, check_name,
                                                                   r["failed_checks"]))


fails("rank0_named", "straggler named in the first window", monitor_line=(
    " monitor steps 1-4 | utilisation 0.9 0.9 | bubble 0.1 | stage imbalance 1.0 | stragglers: "
    "rank 0 (pp 0, tp 0, dp 0) 1.3x rank 1 (pp 1, tp 0, dp 0) 1.25x"))
fails("named_late", "straggler named in the first window", monitor_line=(
    " monitor steps 1-4 | utilisation 0.9 0.9 | bubble 0.1 | stage imbalance 1.0 | stragglers: none"))
fails("under_half", "recovered >= 50%", adapt_tps=690.0)
fails("loss_off", "losses within the equivalence bound", loss_shift=(7, 1e-3))
fails("adapt_failed", "every run exited 0", adapt_rc=1)
fails("step_missing", "losses within the equivalence bound", skip_step=9)



def add_round(d, k, base_tps, slow_tps, adapt_tps, adapt_rc=0, loss_shift=None):
    """Round k's three logs (adapt.{kind}.rK.jsonl) and runs.tsv lines, into fixture d."""
    sfx = ".r%d" % k
    write_log(os.path.join(d, "adapt.base%s.jsonl" % sfx), BASE_LOSS, [base_tps] * STEPS)
    write_log(os.path.join(d, "adapt.slow%s.jsonl" % sfx), BASE_LOSS, [slow_tps] * STEPS)
    losses = list(BASE_LOSS)
    if loss_shift:
        losses[loss_shift[0] - 1] *= 1 + loss_shift[1]
    tps = [slow_tps] * MONITOR + [adapt_tps] * (STEPS - MONITOR)
    write_log(os.path.join(d, "adapt.adapt%s.jsonl" % sfx), losses, tps)
    with open(os.path.join(d, "adapt.runs.tsv"), "a") as f:
        f.write("adapt%s\t%d\t40\nslow%s\t0\t60\nbase%s\t0\t30\n" % (sfx, adapt_rc, sfx, sfx))


# Two rounds: round 1 as "pass" (base 1000, slow 400, adapt 800 after the window), round 2 with a
# higher baseline (base 1400, slow 400, adapt 800): each round's figure and the rounds' mean,
# (800 - 400) / (1200 - 400) = 50%.
d = fixture("rounds")
add_round(d, 2, 1400.0, 400.0, 800.0)
rc, text, r = report(d)
check(len(r["rounds"]) == 2 and abs(r["rounds"][1]["recovered"] - 400 / 1000) < 1e-12,
      "rounds: round 2's own figure, 40%")
check(abs(r["tokens_per_s"]["base"] - 1200) < 1e-9 and abs(r["recovered"] - 0.5) < 1e-12,
      "rounds: the mean baseline 1200 and 50% recovered")
check(rc == 0 and r["acceptance"] == "PASS" and "(mean of 2 rounds)" in text and
      "round 2: base 1400, slowed 400, adapt 800: 40.0% recovered" in text,
      "rounds: PASS, each round printed")
check(r["losses_compared"] == 2 * STEPS, "rounds: both adapted runs' losses compared")
d = fixture("rounds_failed")
add_round(d, 2, 1000.0, 400.0, 800.0, adapt_rc=1)
rc, text, r = report(d)
check(rc == 1 and r["failed_checks"] == ["every run exited 0"], "rounds: round 2's failed run")
d = fixture("rounds_loss")
add_round(d, 2, 1000.0, 400.0, 800.0, loss_shift=(7, 1e-3))
rc, text, r = report(d)
check(rc == 1 and r["failed_checks"] == ["losses within the equivalence bound"],
      "rounds: round 2's loss off")

# summarize.py: the section from adapt.json, and the stage's status when there is none.
d = os.path.join(WORK, "pass")
with open(os.path.join(d, "stages.tsv"), "w") as f:
    f.write("stage\tstatus\tseconds\tnote\nadapt\tok\t131\t\n")
p = subprocess.run([sys.executable, SUMMARIZE, d, "989", "tiny"], capture_output=True, text=True)
print(p.stdout + p.stderr)
summary = json.load(open(os.path.join(d, "summary.json")))
check(p.returncode == 0 and "acceptance: PASS" in p.stdout and summary["adapt"]["acceptance"] == "PASS",
      "summarize: the adapt section and summary.json's adapt")
d = os.path.join(WORK, "skipped")
shutil.rmtree(d, ignore_errors=True)
os.makedirs(d)
with open(os.path.join(d, "stages.tsv"), "w") as f:
    f.write("stage\tstatus\tseconds\tnote\nadapt\tSKIPPED\t0\t--no-adapt\n")
p = subprocess.run([sys.executable, SUMMARIZE, d, "989", "tiny"], capture_output=True, text=True)
check(p.returncode == 0 and "adapt (issue 13): SKIPPED (stage adapt) --no-adapt" in p.stdout,
      "summarize: a skipped adapt stage says so")

print("FAILED: %d checks" % len(failures) if failures else "ok: every check passed")
sys.exit(1 if failures else 0)
