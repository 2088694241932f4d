#!/usr/bin/env python3
"""Published H100 training runs against `ptdp plan` (docs/validation-h100.md).

Each run of RUNS.json (tests/planner/data/published_h100_runs.json) names its source, model, GPUs,
global batch and the layout fields its source states; `ptdp plan --fix` predicts it on the data
file's cluster (or the run's `cluster`, a variant of a shipped profile named in cluster_variants:
some of its facts replaced, each with its source) and software profile (or the run's `software`, a
variant of a shipped software profile named in software_variants, the same way), the planner
choosing the fields no source states (for those runs the prediction is
the best layout ptdp finds within what was published). The published throughput becomes an
iteration time by a stated formula (tokens per second per GPU: B s / (x N); model TFLOP/s per GPU:
the named FLOP count / (x N)), and the error is that of ptdp's throughput, (t_published /
t_predicted) - 1: positive means ptdp predicts the run faster than it ran.

A run is held to 10% unless known_misses names it with its own band [lo, hi] of signed error in
percent (outside (-10, 10)): it fails once it comes within 10% (take it off the list) or leaves its
band (a regression, or a change that should move the band, with its reason). A run ptdp finds no
feasible layout for fails unless its known miss says "infeasible".

usage: published_runs.py PTDP RUNS.json WORKDIR [--markdown]
"""
import json
import os
import statistics
import subprocess
import sys

# Search options the fixed fields may name: a --fix value is only admitted when the search
# enumerates it, so every run opens them all and fixes what its source states.
SEARCH_FLAGS = ["--selective-recompute", "--sequence-parallel", "--distributed-optimizer",
                "--grad-accumulation-fusion", "--fused-attention"]
METRICS = ("tokens_per_s_per_gpu", "model_tflops_per_gpu")


class BadInput(Exception):
    pass


def need(obj, key, kind, where):
    if not isinstance(obj, dict) or key not in obj:
        raise BadInput("%s.%s: missing" % (where, key))
    v = obj[key]
    ok = {"int": isinstance(v, int) and not isinstance(v, bool) and v > 0,
          "num": isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0,
          "str": isinstance(v, str) and v != "",
          "list": isinstance(v, list), "dict": isinstance(v, dict)}[kind]
    if not ok:
        raise BadInput("%s.%s: expected %s, got %s" % (where, key, {
            "int": "a positive integer", "num": "a positive number", "str": "a non-empty string",
            "list": "a list", "dict": "an object"}[kind], json.dumps(v)))
    return v


def check(spec):
    """Every field the harness reads, so bad input stops with one line naming it."""
    need(spec, "cluster", "str", "spec")
    sources = need(spec, "sources", "dict", "spec")
    models = need(spec, "models", "dict", "spec")
    formulas = spec.get("flops_formulas", {})
    variants = spec.get("cluster_variants", {})
    for key, v in variants.items():
        where = "cluster_variants." + key
        need(v, "about", "str", where)
        if not os.path.exists(profile_path(need(v, "base", "str", where))):
            raise BadInput("%s.base: no profile %s" % (where, profile_path(v["base"])))
        for k, fact in need(v, "set", "dict", where).items():
            need(fact, "source", "str", where + ".set." + k)
        need(v, "drop", "list", where)
    software_variants = spec.get("software_variants", {})
    for key, v in software_variants.items():
        where = "software_variants." + key
        need(v, "about", "str", where)
        if not os.path.exists(profile_path("software/" + need(v, "base", "str", where))):
            raise BadInput("%s.base: no software profile %s" % (where, profile_path("software/" + v["base"])))
        for k, fact in need(v, "set", "dict", where).items():
            need(fact, "source", "str", where + ".set." + k)
    for key, m in models.items():
        need(m, "spec", "dict", "models." + key)
        need(m, "source", "str", "models." + key)
    ids = set()
    for i, run in enumerate(need(spec, "runs", "list", "spec")):
        where = "runs[%d]" % i
        rid = need(run, "id", "str", where)
        if rid in ids:
            raise BadInput("%s.id: %s given twice" % (where, rid))
        ids.add(rid)
        if need(run, "source", "str", where) not in sources:
            raise BadInput("%s.source: %s is not a key of sources" % (where, run["source"]))
        need(run, "model", "str", where)
        need(run, "gpus", "int", where)
        need(run, "global_batch", "int", where)
        need(run, "fixed", "str", where)
        pub = need(run, "published", "dict", where)
        if need(pub, "metric", "str", where + ".published") not in METRICS:
            raise BadInput("%s.published.metric: %s is not one of %s" % (where, pub["metric"], ", ".join(METRICS)))
        need(pub, "value", "num", where + ".published")
        if pub["metric"] == "model_tflops_per_gpu" and pub.get("flops_formula") not in formulas:
            raise BadInput("%s.published.flops_formula: %s is not a key of flops_formulas" % (where, json.dumps(pub.get("flops_formula"))))
        if pub["metric"] == "model_tflops_per_gpu" and pub["flops_formula"] not in FLOP_COUNTS:
            raise BadInput("%s.published.flops_formula: %s is not a count this harness knows (%s)" % (
                where, pub["flops_formula"], ", ".join(FLOP_COUNTS)))
        if "cluster" in run and run["cluster"] not in variants:
            raise BadInput("%s.cluster: %s is not a key of cluster_variants" % (where, json.dumps(run["cluster"])))
        if "software" in run and run["software"] not in software_variants:
            raise BadInput("%s.software: %s is not a key of software_variants" % (where, json.dumps(run["software"])))
    for rid, miss in spec.get("known_misses", {}).items():
        where = "known_misses." + rid
        if rid not in ids:
            raise BadInput("%s: no run has this id" % where)
        need(miss, "why", "str", where)
        band = miss.get("band")
        if band == "infeasible":
            continue
        if (not isinstance(band, list) or len(band) != 2 or not all(isinstance(x, (int, float)) for x in band)
                or not band[0] < band[1] or (band[0] < 10 and band[1] > -10)):
            raise BadInput("%s.band: expected [lo, hi] in percent outside (-10, 10) or \"infeasible\", got %s" % (where, json.dumps(band)))


def nemo_llama2_flops(m, batch):
    """NeMo's FLOPsMeasurementCallback._llama2 (nemo/collections/common/metrics/perf_metrics.py at
    9c5c5e97): B s l h^2 (12 + 12 g/a + 18 f/h + 12 s/h + 6 V/(l h)), V = 32000 as its map says."""
    l, h, a, s = m["layers"], m["hidden"], m["heads"], m["seq_len"]
    g = m.get("kv_heads") or a
    f = m.get("ffn_hidden") or 4 * h
    return batch * s * l * h * h * (12 + 12.0 * g / a + 18.0 * f / h + 12.0 * s / h + 6.0 * 32000 / (l * h))


FLOP_COUNTS = {"megatron-core-r0.8.0": lambda m, b, tp: megatron_core_flops(m, b, tp),
               "nemo-perf-metrics-llama2": lambda m, b, tp: nemo_llama2_flops(m, b)}


def megatron_core_flops(m, batch, tp):
    """Megatron-LM core_r0.8.0 num_floating_point_operations (training.py), for a ptdp model JSON."""
    l, h, a, s = m["layers"], m["hidden"], m["heads"], m["seq_len"]
    g = m.get("kv_heads") or a
    f = m.get("ffn_hidden") or 4 * h
    div = m.get("vocab_divisible_by", 128) * tp  # Megatron pads V to a multiple of this
    v = -(-m["vocab"] // div) * div
    glu = 1.5 if m.get("swiglu") else 1.0
    return 12.0 * batch * s * l * h * h * ((1 + g / a + s / h) + f / h * glu + v / (2.0 * l * h))


def fixed_value(fixed, key):
    for item in fixed.split(","):
        k, _, v = item.partition("=")
        if k == key:
            return v
    return None


def profile_path(name):
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "profiles", name + ".json")


def cluster_for(spec, run, work):
    """The data file's cluster, or the run's variant of a shipped profile: its `drop` keys removed
    and its `set` facts (each with its source) put in, written to WORKDIR."""
    name = run.get("cluster")
    if name is None:
        return spec["cluster"]
    v = spec["cluster_variants"][name]
    profile = json.load(open(profile_path(v["base"])))
    for key in v["drop"]:
        profile.pop(key, None)
    profile.update(v["set"])
    profile["name"] = name
    path = os.path.join(work, name + ".cluster.json")
    with open(path, "w") as f:
        json.dump(profile, f, indent=1)
    return path


def software_for(spec, run, work, software):
    """The ptdp plan flags of the run's software: the harness's, or with a `software` variant the
    shipped profile `base` with its `set` facts (each with its source) put in, written to WORKDIR."""
    name = run.get("software")
    if name is None or "--software" not in software:
        return software
    v = spec["software_variants"][name]
    profile = json.load(open(profile_path("software/" + v["base"])))
    profile.update(v["set"])
    profile["name"] = name
    path = os.path.join(work, name + ".software.json")
    with open(path, "w") as f:
        json.dump(profile, f, indent=1)
    at = software.index("--software")
    return software[:at + 1] + [path] + software[at + 2:]


def predict(ptdp, spec, run, work, software):
    """The fastest feasible plan over the run's allowed schedules: (iteration_s, plan) or None."""
    software = software_for(spec, run, work, software)
    model = run["model"]
    if model in spec["models"]:
        path = os.path.join(work, model + ".model.json")
        with open(path, "w") as f:
            json.dump(spec["models"][model]["spec"], f)
        model = path
    best = None
    for sched in run.get("schedules", [None]):
        fix = run["fixed"] + ("" if sched is None else ",schedule=" + sched)
        out = os.path.join(work, "%s%s.plan.json" % (run["id"], "" if sched is None else "." + sched))
        cmd = [ptdp, "plan", "--model", model, "--cluster", cluster_for(spec, run, work), "--gpus", str(run["gpus"]),
               "--global-batch", str(run["global_batch"]), "--fix", fix, "--top", "1", "--out", out] + software
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            if "no layout fits" in r.stderr:
                continue  # no feasible layout with this schedule; the others may have one
            # Anything else (a renamed flag, a refused --fix key) is the harness's problem, not a
            # prediction: stop rather than count it as infeasible.
            raise BadInput("run %s: %s" % (run["id"], r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "ptdp plan exited %d" % r.returncode))
        plan = json.load(open(out))
        t = plan["prediction"]["iteration_s"]
        if best is None or t < best[0]:
            best = (t, plan)
    return best


def published_seconds(spec, run, model_json):
    pub = run["published"]
    n, b = run["gpus"], run["global_batch"]
    if pub["metric"] == "tokens_per_s_per_gpu":
        return b * model_json["seq_len"] / (pub["value"] * n)
    tp = int(fixed_value(run["fixed"], "tp") or 1)
    return FLOP_COUNTS[pub["flops_formula"]](model_json, b, tp) / (pub["value"] * 1e12 * n)


def layout_text(plan):
    lay = plan["layout"]
    keys = ("tp", "pp", "dp", "cp", "ep", "etp", "mbs", "vp", "schedule", "recompute")  # cp, ep, etp: when set
    text = ",".join("%s=%s" % (k, lay[k]) for k in keys if k in lay)
    return text + (",moe_a2a_overlap=on" if lay.get("moe_a2a_overlap") else "") + (",fsdp=on" if lay.get("fsdp") else "")


def main(argv):
    if len(argv) not in (4, 5) or (len(argv) == 5 and argv[4] != "--markdown"):
        sys.exit(__doc__)
    ptdp, path, work = argv[1:4]
    markdown = len(argv) == 5
    try:
        spec = json.load(open(path))
        check(spec)
    except (OSError, ValueError) as e:
        sys.exit("published_runs.py: %s: %s" % (path, e))
    except BadInput as e:
        sys.exit("published_runs.py: %s: %s" % (path, e))
    os.makedirs(work, exist_ok=True)
    helptext = subprocess.run([ptdp, "plan", "--help"], capture_output=True, text=True).stdout
    software = ["--software", "megatron-core"] if "--software" in helptext else []
    # Only the search flags this ptdp has (a later ptdp may search some of them by default).
    software += [f for f in SEARCH_FLAGS if f in helptext]
    misses = spec.get("known_misses", {})
    rows, bad = [], 0
    for run in spec["runs"]:
        try:
            got = predict(ptdp, spec, run, work, software)
        except BadInput as e:
            sys.exit("published_runs.py: %s" % e)
        miss = misses.get(run["id"])
        if got is None:
            ok = miss is not None and miss["band"] == "infeasible"
            rows.append((run, None, None, None, ok, miss))
            bad += not ok
            continue
        t_pred, plan = got
        t_pub = published_seconds(spec, run, plan["model"])
        err = 100.0 * (t_pub / t_pred - 1.0)
        if miss is None:
            ok = abs(err) <= 10.0
        else:
            ok = miss["band"] != "infeasible" and abs(err) > 10.0 and miss["band"][0] <= err <= miss["band"][1]
        bad += not ok
        rows.append((run, t_pub, t_pred, err, ok, miss, plan))
    errors = [abs(r[3]) for r in rows if r[3] is not None]
    med = statistics.median(errors) if errors else float("nan")
    print("cluster %s, ptdp plan flags: %s%s" % (spec["cluster"], " ".join(software),
                                               "" if "--software" in software else " (ptdp plan has no --software)"))
    if markdown:
        print("| run | source | GPUs | B | published | predicted | error | predicted layout | held to |")
        print("|---|---|---|---|---|---|---|---|---|")
    else:
        print("%-30s %-24s %6s %5s %28s %10s %8s  %s" % ("run", "source", "GPUs", "B", "published", "predicted", "error", "held to"))
    for row in rows:
        run, t_pub, t_pred, err, ok, miss = row[:6]
        pub = run["published"]
        unit = "tok/s/GPU" if pub["metric"] == "tokens_per_s_per_gpu" else "TFLOP/s/GPU"
        held = ("known miss " + (json.dumps(miss["band"]) + ": " + miss["why"])) if miss else "10%"
        if t_pred is None:
            pred_txt, err_txt, lay = "none fits", "-", "-"
        else:
            pred_txt = "%.1f" % (pub["value"] * t_pub / t_pred)
            err_txt = "%+.1f%%" % err
            lay = layout_text(row[6])
        flag = "" if ok else "  <- FAILS" + (
            " (within 10% now: take it off known_misses)" if miss and err is not None and abs(err) <= 10
            else " (a layout fits now: record its error)" if miss and miss["band"] == "infeasible" and err is not None
            else "")
        if markdown:
            print("| %s | %s | %d | %d | %s %s | %s | %s | %s | %s |" % (
                run["id"], run["source"], run["gpus"], run["global_batch"], pub["value"], unit,
                pred_txt, err_txt, lay, held + flag))
        else:
            print("%-30s %-24s %6d %5d %16s %11s %10s %8s  %s%s" % (
                run["id"], run["source"], run["gpus"], run["global_batch"], pub["value"], unit,
                pred_txt, err_txt, held, flag))
    print("median |error| %.1f%% over %d runs (%d without a feasible layout); %d fail their bound" % (
        med, len(errors), len(rows) - len(errors), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
