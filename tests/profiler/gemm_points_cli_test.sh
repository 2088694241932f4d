#!/usr/bin/env bash
# `ptdp profile --backend cpu --quick --gemm-shapes-of tiny` end to end: tiny's Linear GEMM shapes
# at microbatches 1 and 2 are written as gemm_points (read back by core's strict reader), and
# `ptdp plan` on that profile prices tiny's GEMMs from them: with the points of the plan's
# microbatch (2) slowed to 1e-3 TFLOP/s the predicted step grows by those GEMMs at that rate, with
# the other microbatch's slowed it is unchanged. Bad flags exit 2 with one line and no file.
# usage: gemm_points_cli_test.sh PTDP CHECKER WORKDIR
set -euo pipefail
ptdp=$1 check=$2 work=$3
mkdir -p "$work"
out="$work/gemm-points.json"
rm -f "$out"
timeout 60 "$ptdp" profile --backend cpu --quick --out "$out" --raw "$work/gemm-points.raw.json" \
  --gemm-shapes-of tiny --gemm-shapes-mbs 1,2 > "$work/gemm-points.txt"
"$check" "$out" 1 estimated
grep -q "# GEMM points: the Linear GEMMs" "$work/gemm-points.txt"

plan() {  # PROFILE: the predicted iteration time of tiny at microbatch 2, one microbatch a step
  "$ptdp" plan --model tiny --cluster "$1" --gpus 1 --global-batch 2 \
    --fix tp=1,pp=1,dp=1,mbs=2,recompute=none --top 1 --format json > "$work/plan.json"
  python3 -c 'import json,sys; print(repr(json.load(open(sys.argv[1]))["best"]["prediction"]["iteration_s"]))' \
    "$work/plan.json"
}
base=$(plan "$out")

python3 - "$work" "$base" <<'PY'
import json, sys
work, base = sys.argv[1], float(sys.argv[2])
profile = json.load(open(f"{work}/gemm-points.json"))
raw = json.load(open(f"{work}/gemm-points.raw.json"))
pts = profile["gemm_points"]["points"]
# tiny: h 64, 4 heads, ffn 256, V 256 (padded: 256), s 32. QKV (T, 192, 64), projection (T, 64, 64),
# fc1 (T, 256, 64), fc2 (T, 64, 256), logits (T, 256, 64) = fc1's shape: 4 distinct per microbatch.
want = sorted((t, n, k) for t in (32, 64) for n, k in ((192, 64), (64, 64), (256, 64), (64, 256)))
got = sorted((p["m"], p["n"], p["k"]) for p in pts)
assert got == want, f"points {got}, want {want}"
src = profile["gemm_points"]["source"]
assert src.startswith("ptdp profile run on ") and "of tiny at microbatch 1,2, t 1" in src, src
assert len(raw["gemm_points"]["points"]) == 8, raw["gemm_points"]
slow = 1e-3  # TFLOP/s: 1e9 FLOP/s
for m, name in ((64, "used"), (32, "unused")):
    edited = json.loads(json.dumps(profile))
    for p in edited["gemm_points"]["points"]:
        if p["m"] == m:
            for key in ("forward_tflops", "backward_data_tflops", "backward_weight_tflops"):
                p[key] = slow
    json.dump(edited, open(f"{work}/gemm-points.{name}.json", "w"), indent=1)
# The step's Linear GEMMs at microbatch 2: 4 layers x (QKV, projection, fc1, fc2) and the logits,
# each forward, input gradient and weight gradient (3 x 2 m n k FLOPs).
flops = 3 * 2 * 64 * (4 * (192 * 64 + 64 * 64 + 256 * 64 + 64 * 256) + 256 * 64)
open(f"{work}/gemm-points.slowed_s", "w").write(repr(flops / (slow * 1e12)))
PY
used=$(plan "$work/gemm-points.used.json")
unused=$(plan "$work/gemm-points.unused.json")
slowed=$(cat "$work/gemm-points.slowed_s")
python3 - "$base" "$used" "$unused" "$slowed" <<'PY'
import sys
base, used, unused, slowed = map(float, sys.argv[1:])
# Microbatch 1's points are not the plan's shapes: the step is priced bit for bit as before.
assert unused == base, f"unused points moved the step: {unused!r} != {base!r}"
# The slowed GEMMs alone take `slowed` s; the rest of the step is at most the whole base step.
assert slowed <= used <= slowed + base, f"step {used} s, slowed GEMMs {slowed} s, base {base} s"
print(f"base {base:.6g} s, with the plan's points slowed {used:.6g} s (their GEMMs {slowed:.6g} s)")
PY

# Bad input: exit 2, one line naming the flag, no file written.
bad="$work/gemm-points-bad.json"
rm -f "$bad"
refused() {  # FLAG ARGS...: the run must fail naming FLAG
  local flag=$1 msg rc
  shift
  set +e
  msg=$("$ptdp" profile --backend cpu --quick --out "$bad" "$@" 2>&1); rc=$?
  set -e
  [ $rc = 2 ] || { echo "expected exit 2 for $*, got $rc: $msg"; exit 1; }
  grep -q -- "$flag" <<<"$msg" || { echo "message does not name $flag: $msg"; exit 1; }
  [ "$(wc -l <<<"$msg")" = 1 ] || { echo "more than one line: $msg"; exit 1; }
  [ ! -e "$bad" ] || { echo "a file was written on bad input"; exit 1; }
}
refused --gemm-shapes-mbs --gemm-shapes-mbs 2
refused --gemm-shapes-of --gemm-shapes-of tiny
refused --gemm-shapes-of --gemm-shapes-of no-such-model --gemm-shapes-mbs 1
refused --gemm-shapes-mbs --gemm-shapes-of tiny --gemm-shapes-mbs 1,x
refused --gemm-shapes-tp --gemm-shapes-of tiny --gemm-shapes-mbs 1 --gemm-shapes-tp 3
echo "gemm_points_cli_test: ok"
