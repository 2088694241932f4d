#!/usr/bin/env bash
# ptdp calibrate from the command line: a run simulated under a slower profile is fitted starting
# from the cpu preset; the fitted profile loads in `ptdp simulate --plan --profile` and `ptdp plan
# --cluster`, and compare then matches the run. Bad input (a malformed trace, a trace of another
# plan, a plan that is not one, a profile with a broken calibration block) exits 2 with one line
# naming the flag, and no file is written; so does `simulate --profile` without --plan or with a
# profile that does not load.
# usage: calibrate_cli.sh PTDP CPU_PROFILE_JSON WORKDIR
set -euo pipefail
ptdp=$1 cpu=$2 work=$3/calibrate_cli
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$ptdp" plan --model tiny --cluster cpu --gpus 4 --global-batch 8 \
  --fix tp=1,pp=4,dp=1,mbs=1,recompute=none,schedule=1f1b --top 1 --out p4.json > /dev/null
"$ptdp" plan --model tiny --cluster cpu --gpus 2 --global-batch 8 \
  --fix tp=1,pp=2,dp=1,mbs=1,recompute=none,schedule=1f1b --top 1 --out p2.json > /dev/null
# The "machine": the cpu preset with GEMMs at half speed and a third of its bandwidths.
python3 - "$cpu" slow.json <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["gemm"]["tflops"] = [v / 2 for v in p["gemm"]["tflops"]]
p["memory_bound_GBps"]["value"] /= 3
p["intra_node"]["send_recv_GBps"]["value"] /= 3
json.dump(p, open(sys.argv[2], "w"))
PY
"$ptdp" simulate --plan p4.json --profile slow.json --trace meas.json > /dev/null
"$ptdp" simulate --plan p2.json --trace other.json > /dev/null
"$ptdp" calibrate --plan p4.json --measured meas.json --out fit.json > out.txt
grep -q "compute instructions (68): median |error| [1-9][0-9.]*% -> 0.0%" out.txt || { cat out.txt; fail "fit"; }
python3 - fit.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["calibration"]
assert c["tool"] == "ptdp calibrate" and c["trace"] == "meas.json" and c["plan"] == "p4.json", c
assert c["median_relative_error_after"] < 0.01 < c["median_relative_error_before"], c
PY
"$ptdp" simulate --plan p4.json --profile fit.json --trace pred.json > /dev/null
"$ptdp" compare --predicted pred.json --measured meas.json > cmp.txt
grep -q "median |error| per instruction 0.0%" cmp.txt || { cat cmp.txt; fail "compare after"; }
"$ptdp" plan --model tiny --cluster fit.json --gpus 4 --global-batch 8 --top 1 > /dev/null \
  || fail "plan --cluster fit.json"
# Refusals: exit 2, one line naming the flag, no profile written.
refuse() {  # refuse NAME EXPECTED_TEXT ARGS...
  local name=$1 want=$2; shift 2
  local rc=0
  "$ptdp" calibrate "$@" --out "bad-$name.json" > "$name.txt" 2>&1 || rc=$?
  [ $rc = 2 ] || { cat "$name.txt"; fail "$name: rc $rc"; }
  grep -q -- "$want" "$name.txt" || { cat "$name.txt"; fail "$name: message"; }
  [ "$(wc -l < "$name.txt")" = 1 ] || { cat "$name.txt"; fail "$name: not one line"; }
  [ ! -e "bad-$name.json" ] || fail "$name: wrote a profile"
}
head -c 200 meas.json > cut.json
refuse malformed "^ptdp calibrate: error: --measured: cut.json" --plan p4.json --measured cut.json
refuse mismatch "another layout" --plan p4.json --measured other.json
refuse not_a_plan "^ptdp calibrate: error: --plan" --plan meas.json --measured meas.json
refuse no_trace "^ptdp calibrate: error: --measured" --plan p4.json --measured missing.json
# Two runs of other message sizes (microbatch 1 and 4) on a link slower to start: fitted together,
# the latency is fitted too, and the block lists both runs.
python3 - slow.json slow_latency.json <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["intra_node"]["latency_us"]["value"] *= 4
json.dump(p, open(sys.argv[2], "w"))
PY
"$ptdp" plan --model tiny --cluster cpu --gpus 4 --global-batch 16 \
  --fix tp=1,pp=4,dp=1,mbs=4,recompute=none,schedule=1f1b --top 1 --out p4b.json > /dev/null
"$ptdp" simulate --plan p4.json --profile slow_latency.json --trace lat1.json > /dev/null
"$ptdp" simulate --plan p4b.json --profile slow_latency.json --trace lat2.json > /dev/null
"$ptdp" calibrate --plan p4.json --measured lat1.json --plan p4b.json --measured lat2.json \
  --out fit2.json > out2.txt || { cat out2.txt; fail "two runs"; }
grep -q "intra_node.latency_us" out2.txt || { cat out2.txt; fail "two runs: latency not fitted"; }
python3 - fit2.json "$cpu" <<'PY'
import json, sys
fit, cpu = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ratio = fit["intra_node"]["latency_us"]["value"] / cpu["intra_node"]["latency_us"]["value"]
assert abs(ratio / 4 - 1) < 0.01, ratio
runs = fit["calibration"]["runs"]
assert [r["plan"] for r in runs] == ["p4.json", "p4b.json"], runs
PY
refuse unpaired "^ptdp calibrate: error: --measured: one trace per --plan" --plan p4.json --plan p4b.json --measured lat1.json
refuse bad_quantile "^ptdp calibrate: error: --quantile: must be in (0, 1]" --plan p4.json --measured meas.json --quantile 0
python3 - fit.json broken.json <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
del p["calibration"]["trace"]
json.dump(p, open(sys.argv[2], "w"))
PY
refuse bad_start "calibration.trace: missing" --plan p4.json --measured meas.json --profile broken.json
# simulate --profile needs --plan, and names itself when its file does not load.
rc=0; "$ptdp" simulate --profile fit.json --gpus 4 --global-batch 8 > sim1.txt 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "^ptdp simulate: error: --profile: only with --plan" sim1.txt \
  || { cat sim1.txt; fail "simulate --profile without --plan: rc $rc"; }
rc=0; "$ptdp" simulate --plan p4.json --profile broken.json > sim2.txt 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "^ptdp simulate: error: --profile: broken.json.calibration.trace" sim2.txt \
  || { cat sim2.txt; fail "simulate --profile broken: rc $rc"; }
echo "calibrate: fitted, loaded by simulate and plan, bad input refused"
