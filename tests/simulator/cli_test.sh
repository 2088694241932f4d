#!/bin/sh
# CLI checks of `ptdp schedule` and `ptdp simulate`: outputs, exit codes, no partial files.
# Usage: cli_test.sh PTDP WORKDIR
set -u
PTDP=$1
W=$2
rm -rf "$W" && mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }

# schedule: the Figure-4 grid, and a rejected shape with exit code 2 and the reason.
out=$("$PTDP" schedule --kind interleaved --pp 4 --microbatches 8 --vp 2) || fail "schedule exit $?"
echo "$out" | grep -q "^rank 3 |" || fail "schedule grid lacks rank 3"
echo "$out" | grep -q "bubble: 0.1875" || fail "schedule bubble line: $out"
"$PTDP" schedule --kind interleaved --pp 4 --microbatches 3 --vp 2 2>"$W/err" && fail "m=3 accepted"
[ $? -eq 2 ] || fail "m=3: exit code not 2"
grep -q "at least pp = 4" "$W/err" || fail "m=3: reason missing: $(cat "$W/err")"
# m = 6 on p = 4 (one group of 6): the closed form holds; p = 2 with m = 3 (the padded order): the
# bubble line says the closed form's scope.
out=$("$PTDP" schedule --kind interleaved --pp 4 --microbatches 6 --vp 2) || fail "m=6 exit $?"
echo "$out" | grep -q "bubble: 0.2500 of the ideal time ((p-1)/(v m) = 0.2500)$" || fail "m=6 bubble line: $out"
out=$("$PTDP" schedule --kind interleaved --pp 2 --microbatches 3 --vp 2) || fail "p=2 m=3 exit $?"
echo "$out" | grep -q "not for pp = 2 with odd m" || fail "p=2 m=3 bubble line: $out"
"$PTDP" schedule --kind 1f1b --pp 2 --microbatches 2 --format text --lowered --message-bytes 8 | grep -q "^rank 0: F0 SA0>1:8" \
  || fail "lowered text form"

# The zero-bubble kinds: B and W apart in the grid and the SVG, the bubble beside Table 1's closed
# form (Qi et al. 2024): ZB-H1 (p-1)(F+B-W) = 3 cells at p = 4, ZB-H2 (p-1)(F+B-2W) = 0.
out=$("$PTDP" schedule --kind zb-h1 --pp 4 --microbatches 8 --svg "$W/zb.svg") || fail "zb-h1 exit $?"
echo "$out" | grep -q "^rank 0 |0 1 2 3  \. \. \.0=0-4 " || fail "zb-h1 grid: $out"
echo "$out" | grep -q "bubble: 3 cells idle per rank at most.* = 3 with F = B = W = 1 cell" || fail "zb-h1 bubble: $out"
grep -q "W: weight gradient" "$W/zb.svg" || fail "zb-h1 svg has no W legend"
grep -q "<title>W7 " "$W/zb.svg" || fail "zb-h1 svg has no W box"
out=$("$PTDP" schedule --kind zb-h2 --pp 4 --microbatches 8) || fail "zb-h2 exit $?"
echo "$out" | grep -q "bubble: 0 cells idle per rank at most.* = 0 with" || fail "zb-h2 bubble: $out"
"$PTDP" schedule --kind zb-h1 --pp 4 --microbatches 8 --format text --lowered | grep -q "^rank 3: .* BI0 SG0>2:0 " \
  || fail "zb-h1 lowered text"
"$PTDP" schedule --kind zb-h2 --pp 4 --microbatches 8 --vp 2 2>"$W/err" && fail "zb-h2 with vp 2 accepted"
[ $? -eq 2 ] || fail "zb-h2 vp 2: exit code not 2"
# ZB-V: two chunks per rank in a V (chunk b of rank 3 right after its chunk a: the turn), no bubble
# with equal costs (the published V-ZB figure), and fewer than 2p - 1 microbatches refused.
out=$("$PTDP" schedule --kind zb-v --pp 4 --microbatches 8 --svg "$W/zbv.svg") || fail "zb-v exit $?"
echo "$out" | grep -q "^rank 3 |  \.  \.  \.0a 0b 1a 1b " || fail "zb-v grid: $out"
echo "$out" | grep -q "bubble: 0 cells idle per rank at most.*0 (ZB-V) = 0 with" || fail "zb-v bubble: $out"
grep -q "<title>W7.1 " "$W/zbv.svg" || fail "zb-v svg has no W box of chunk 1"
"$PTDP" schedule --kind zb-v --pp 4 --microbatches 6 2>"$W/err" && fail "zb-v m=6 accepted"
[ $? -eq 2 ] || fail "zb-v m=6: exit code not 2"
grep -q "microbatches: the zb-v schedule needs at least 2 pp - 1 = 7" "$W/err" \
  || fail "zb-v m=6: reason missing: $(cat "$W/err")"

# simulate with the plan flags: JSON summary with the required keys, trace and SVG written.
"$PTDP" simulate --model gpt-1.7b --cluster selene --gpus 8 --global-batch 16 \
  --fix tp=2,pp=4,mbs=1,vp=2,schedule=interleaved --format json --trace "$W/t.trace.json" --svg "$W/g.svg" >"$W/s.json" \
  || fail "simulate exit $?"
for k in iteration_s bubble_fraction bubble_fraction_formula peak_activation_GiB events simulated_seconds tflops_per_gpu; do
  grep -q "\"$k\"" "$W/s.json" || fail "simulate json lacks $k"
done
[ -s "$W/t.trace.json" ] || fail "no trace"
grep -q '"traceEvents"' "$W/t.trace.json" || fail "trace lacks traceEvents"
grep -q '<svg' "$W/g.svg" || fail "svg"

# --precision: the simulated layout's; not beside --plan (the plan file's layout says it).
"$PTDP" simulate --model gpt-1.7b --cluster selene --gpus 8 --global-batch 16 \
  --fix tp=2,pp=4,mbs=1,vp=1,schedule=1f1b --precision bf16 --format json >"$W/p.json" || fail "precision exit"
grep -q '"precision": "bf16"' "$W/p.json" || fail "simulate --precision bf16 not in the layout"

# --ideal: the bubble equals the closed form.
"$PTDP" simulate --model gpt-1.7b --cluster selene --gpus 8 --global-batch 16 \
  --fix tp=2,pp=4,mbs=1,vp=1,schedule=1f1b --ideal --format json >"$W/i.json" || fail "ideal exit"
grep -q '"bubble_fraction": 0.1875' "$W/i.json" || fail "ideal bubble not (p-1)/m = 3/16: $(grep bubble "$W/i.json")"

# Zero-bubble schedules: (p-1)/(v m) does not hold for them; the closed form printed is the
# planner's (Qi et al.'s), which the measured bubble equals with --ideal costs.
for k in zb-h1 zb-h2; do
  "$PTDP" simulate --model gpt-1.7b --cluster selene --gpus 8 --global-batch 16 \
    --fix tp=2,pp=4,mbs=1,vp=1,schedule=$k --ideal --format json >"$W/$k.json" || fail "$k ideal exit"
  num() { sed -n "s/^ *\"$1\": \([0-9.e-]*\),*$/\1/p" "$W/$k.json" | head -n 1; }  # the summary's, before the ranks
  awk -v a="$(num bubble_fraction)" -v b="$(num bubble_fraction_formula)" \
    'BEGIN { d = a - b; exit !(a > 0 && d < 1e-4 && d > -1e-4 && (b - 0.1875 > 1e-3 || 0.1875 - b > 1e-3)) }' ||
    fail "$k: measured bubble $(num bubble_fraction) is not the closed form $(num bubble_fraction_formula), or that is (p-1)/m"
done
grep -q '"bubble_formula": "(p-1)(T_F+T_B-2T_W)/(m T)"' "$W/zb-h2.json" || fail "zb-h2 formula name"
out=$("$PTDP" simulate --model gpt-1.7b --cluster selene --gpus 8 --global-batch 16 \
  --fix tp=2,pp=4,mbs=1,vp=1,schedule=zb-h1) || fail "zb-h1 exit"
echo "$out" | grep -q "closed form (p-1)(T_F+T_B-T_W)/(m T) = " || fail "zb-h1 bubble line: $out"

# A plan file round trip, and a corrupt one rejected with exit 2 and no trace written.
"$PTDP" plan --model gpt-1.7b --cluster selene --gpus 8 --global-batch 16 --out "$W/plan.json" >/dev/null || fail "plan"
"$PTDP" simulate --plan "$W/plan.json" | grep -q "^iteration" || fail "simulate --plan"
"$PTDP" simulate --plan "$W/plan.json" --precision bf16 2>/dev/null && fail "--plan with --precision accepted"
grep -q '"program"' "$W/plan.json" || fail "plan --out wrote no program"
# The plan records its software profile (ptdp plan's default: megatron-core) and simulate --plan
# prices it with that one; --software megatron-lm-2021 travels the same way.
grep -q '"name": "megatron-core"' "$W/plan.json" || fail "plan file lacks its software profile"
"$PTDP" simulate --plan "$W/plan.json" | grep -q "^software: megatron-core" || fail "simulate --plan software"
"$PTDP" plan --model gpt-1.7b --cluster selene --gpus 8 --global-batch 16 --software megatron-lm-2021 \
  --out "$W/plan2021.json" | grep -q "^software megatron-lm-2021" || fail "plan --software megatron-lm-2021"
"$PTDP" simulate --plan "$W/plan2021.json" | grep -q "^software: megatron-lm-2021" || fail "simulate 2021 plan"
"$PTDP" simulate --plan "$W/plan2021.json" --software ptdp 2>/dev/null && fail "--plan with --software accepted"
# The plan's Program runs only if it is its layout's: a hand-edited message size or instruction
# order, or a version-1 plan without a Program, exits 2 naming it.
"$PTDP" plan --model tiny --cluster cpu --gpus 4 --global-batch 4 \
  --fix tp=1,pp=2,dp=2,mbs=1,schedule=1f1b,recompute=none --out "$W/tiny.json" >/dev/null || fail "plan tiny"
"$PTDP" simulate --plan "$W/tiny.json" >/dev/null || fail "simulate tiny plan"
sed 's/"SA1.0>1:8192"/"SA1.0>1:8000"/' "$W/tiny.json" >"$W/size.json"
grep -q '"SA1.0>1:8000"' "$W/size.json" || fail "size.json not edited"
"$PTDP" simulate --plan "$W/size.json" 2>"$W/err" && fail "edited message size accepted"
[ $? -eq 2 ] || fail "edited message size: exit code not 2"
grep -q "size.json: program: rank 0, instruction 3 is 'SA1>1:8000' but layout tp=1,pp=2,.*(4-byte activations) gives 'SA1>1:8192'" "$W/err" \
  || fail "edited message size: message: $(cat "$W/err")"
sed '/"pp_rank": 1/,$ { s/"F1.0"/"@@"/; s/"B1.0"/"F1.0"/; s/"@@"/"B1.0"/ }' "$W/tiny.json" >"$W/swap.json"
"$PTDP" simulate --plan "$W/swap.json" 2>"$W/err" && fail "swapped instructions accepted"
[ $? -eq 2 ] || fail "swapped instructions: exit code not 2"
grep -q "swap.json: program: rank 1, instruction 5 is 'B1' but layout .* gives 'F1'" "$W/err" \
  || fail "swapped instructions: message: $(cat "$W/err")"
sed -e '/"program": {/,/^ },$/d' -e 's/"ptdp_plan_version": 2/"ptdp_plan_version": 1/' "$W/tiny.json" >"$W/v1.json"
grep -q '"program"' "$W/v1.json" && fail "v1.json still has a program"
"$PTDP" simulate --plan "$W/v1.json" 2>"$W/err" && fail "version-1 plan accepted"
[ $? -eq 2 ] || fail "version-1 plan: exit code not 2"
grep -q "plan.program: missing (plan file version 1; re-run ptdp plan)" "$W/err" || fail "version-1 plan: $(cat "$W/err")"
# `ptdp schedule --plan --out` gives it back its Program: the same as ptdp plan wrote.
"$PTDP" schedule --plan "$W/v1.json" --out "$W/v2.json" >/dev/null || fail "schedule --plan --out"
"$PTDP" simulate --plan "$W/v2.json" >/dev/null || fail "simulate the re-programmed plan"
"$PTDP" schedule --plan "$W/tiny.json" --format text | grep -q "^rank 1: layers=[0-9]* RA0<0:8192 F0 B0 SG0>0:8192" \
  || fail "schedule --plan text"
echo '{"ptdp_plan_version": 1, "model": ' >"$W/bad.json"
"$PTDP" simulate --plan "$W/bad.json" --trace "$W/bad.trace.json" 2>"$W/err" && fail "corrupt plan accepted"
[ $? -eq 2 ] || fail "corrupt plan: exit code not 2"
[ -e "$W/bad.trace.json" ] && fail "partial trace written"
grep -q "ptdp simulate: error:" "$W/err" || fail "corrupt plan: message: $(cat "$W/err")"
"$PTDP" simulate --gpus 8 2>/dev/null && fail "missing --global-batch accepted"
# A plan whose layout does not fit its cluster: exit 2, the reason named.
# Uneven stages: each rank's row says its layers (gpt-1.7b has 24: 5 / 7 / 7 / 5).
"$PTDP" simulate --model gpt-1.7b --cluster selene --gpus 8 --global-batch 16 \
  --fix tp=2,pp=4,mbs=1,schedule=1f1b,first_stage_layers=5,last_stage_layers=5 >"$W/u.txt" \
  || fail "uneven simulate exit $?"
for row in "0 5" "1 7" "2 7" "3 5"; do
  grep -Eq "^ +${row% *} +${row#* } +[0-9]" "$W/u.txt" || fail "uneven: no row '$row': $(cat "$W/u.txt")"
done

# The combined 1F1B (moe_a2a_overlap): the plan's Program marks its paired forwards, simulate
# replays it, and a pair whose backward was taken away is refused naming the forward.
"$PTDP" plan --model qwen3-30b-a3b --cluster dgx-h100 --gpus 16 --global-batch 1024 \
  --fix pp=2,vp=12,ep=8,mbs=1,precision=fp8,moe_a2a_overlap=on --out "$W/a2a.json" >/dev/null \
  || fail "plan with moe_a2a_overlap"
grep -q '"F3.0+"' "$W/a2a.json" || fail "a2a plan: no paired forward in its program"
"$PTDP" simulate --plan "$W/a2a.json" >/dev/null || fail "simulate the a2a plan"
sed '0,/"F3.0+"/ s/"F3.0+"/"F3.0"/' "$W/a2a.json" >"$W/a2a_unpaired.json"
"$PTDP" simulate --plan "$W/a2a_unpaired.json" 2>"$W/err" && fail "unpaired a2a plan accepted"
[ $? -eq 2 ] || fail "unpaired a2a plan: exit code not 2"
grep -q "is 'F3.0' but layout .*moe_a2a_overlap=on.* gives 'F3.0+'" "$W/err" \
  || fail "unpaired a2a plan: message: $(cat "$W/err")"

sed 's/"tp": [0-9]*/"tp": 3/' "$W/plan.json" >"$W/tp3.json"
"$PTDP" simulate --plan "$W/tp3.json" 2>"$W/err" && fail "tp=3 plan accepted"
[ $? -eq 2 ] || fail "tp=3 plan: exit code not 2"
grep -q "tp" "$W/err" || fail "tp=3 plan: reason: $(cat "$W/err")"
echo "cli ok"
