#!/usr/bin/env bash
# ptdp train --op-times: the table lists every op by shape with its calls per step (LayerNorm runs
# 2 per layer plus the final one per microbatch), and timing changes nothing the run computes
# (the per-step losses equal those of the same run without it). `ptdp compare --op-times` lays
# the table beside the cost model's prices and refuses a cut table or a missing plan in one line.
# usage: op_times.sh PTDP WORKDIR
set -euo pipefail
ptdp=$1 work=$2/op_times
rm -rf "$work" && mkdir -p "$work"
"$ptdp" plan --model tiny --cluster cpu --gpus 1 --global-batch 4 \
  --fix tp=1,pp=1,dp=1,mbs=2,recompute=none --software ptdp --top 1 --out "$work/plan.json" > /dev/null
"$ptdp" tokenize --in "$(dirname "$0")/../../README.md" --out "$work/tokens.bin" > /dev/null
"$ptdp" train --plan "$work/plan.json" --data "$work/tokens.bin" --steps 3 --log "$work/plain.jsonl" > /dev/null
"$ptdp" train --plan "$work/plan.json" --data "$work/tokens.bin" --steps 3 --log "$work/timed.jsonl" \
  --op-times > "$work/timed.txt"
python3 - "$work" <<'PY'
import json, re, sys
w = sys.argv[1]
layers = json.load(open(f"{w}/plan.json"))["model"]["layers"]
microbatches = 2  # global batch 4 / mbs 2
text = open(f"{w}/timed.txt").read()
assert "op times, rank 0, per step (steps after the first" in text, text
rows = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S+(?: \S+)?)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+[\d.]+%$", text, re.M)}
ln = [c for op, c in rows.items() if op.startswith("LayerNormForward ")]
assert ln == [(2 * layers + 1) * microbatches], (ln, rows)
for op in ("LinearForward+GeLU", "AttentionForward", "AttentionBackward", "AdamW"):
    assert any(k.startswith(op) for k in rows), (op, sorted(rows))
plain = [json.loads(l)["loss"] for l in open(f"{w}/plain.jsonl")]
timed = [json.loads(l)["loss"] for l in open(f"{w}/timed.jsonl")]
assert plain == timed, (plain, timed)
print(f"op table: {len(rows)} ops; LayerNormForward {ln[0]:.0f} calls/step; losses equal: {timed}")
PY
"$ptdp" compare --op-times "$work/timed.txt" --plan "$work/plan.json" > "$work/priced.txt"
grep -q "^  Linear GEMMs  *[0-9.]*  *[0-9.]*  *[0-9.]*$" "$work/priced.txt" || { cat "$work/priced.txt"; exit 1; }
grep -q "^AttentionBackward [0-9x]* .*[0-9]$" "$work/priced.txt" || { cat "$work/priced.txt"; exit 1; }
sed "/^all ops/,\$d" "$work/timed.txt" > "$work/cut.txt"
rc=0; "$ptdp" compare --op-times "$work/cut.txt" --plan "$work/plan.json" > "$work/bad.txt" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "^ptdp compare: error: --op-times .*cut.txt: the op table has no 'all ops' line" "$work/bad.txt" \
  && [ "$(wc -l < "$work/bad.txt")" = 1 ] || { echo "cut table: rc $rc"; cat "$work/bad.txt"; exit 1; }
rc=0; "$ptdp" compare --op-times "$work/timed.txt" > "$work/bad2.txt" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "needs --plan" "$work/bad2.txt" || { echo "no plan: rc $rc"; cat "$work/bad2.txt"; exit 1; }
echo "compare --op-times: $(grep -c . "$work/priced.txt") lines; cut table and missing plan refused"
# ptdp calibrate --op-times: the table alone and beside a trace of the same plan (the trace fit then
# starts from the table's fit); the written profile's sources and calibration block name the
# table; a cut table is refused in one line, writing nothing.
"$ptdp" calibrate --plan "$work/plan.json" --op-times "$work/timed.txt" --out "$work/fit.json" \
  > "$work/cal.txt"
grep -q "^from the op table .*timed.txt:" "$work/cal.txt" || { cat "$work/cal.txt"; exit 1; }
"$ptdp" train --plan "$work/plan.json" --data "$work/tokens.bin" --steps 3 --trace "$work/trace.json" > /dev/null
"$ptdp" calibrate --plan "$work/plan.json" --measured "$work/trace.json" --op-times "$work/timed.txt" \
  --out "$work/fit2.json" > "$work/cal2.txt" || { cat "$work/cal2.txt"; exit 1; }
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
for name, traced in (("fit.json", False), ("fit2.json", True)):
    p = json.load(open(f"{w}/{name}"))
    c = p["calibration"]
    assert c["op_times"] == f"{w}/timed.txt", c
    assert ("trace" in c) == traced, c
    fitted = [f["figure"] for f in c["op_times_fitted"]]
    assert fitted and len(fitted) + len(c["op_times_kept"]) >= 6, c
    def source(f):  # a profile key's, or a GEMM multiple's (the table or efficiency it scaled)
        if f in p: return p[f]["source"]
        if not f.startswith("backward"): return p["gemm"]["source"]
        return p["gemm_backward_data" if "gemm_backward_data" in p else "gemm_backward_efficiency"]["source"]
    for f in fitted:
        src = source(f)
        assert f"the op table {w}/timed.txt" in src, (f, src)
    if traced:  # the trace fit refits the GEMM multiples, starting from the table's
        assert any(f["figure"].startswith("gemm (forward") for f in c["fitted"]), c["fitted"]
    print(f"{name}: from the op table {fitted}; kept {len(c['op_times_kept'])}")
PY
rc=0; "$ptdp" calibrate --plan "$work/plan.json" --op-times "$work/cut.txt" --out "$work/bad.json" \
  > "$work/bad3.txt" 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "^ptdp calibrate: error: --op-times .*cut.txt: the op table has no 'all ops' line" "$work/bad3.txt" \
  && [ "$(wc -l < "$work/bad3.txt")" = 1 ] && [ ! -e "$work/bad.json" ] || { echo "calibrate cut table: rc $rc"; cat "$work/bad3.txt"; exit 1; }
echo "calibrate --op-times: alone and with a trace; cut table refused"
