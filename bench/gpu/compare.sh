#!/usr/bin/env bash
# Side-by-side training speed of ptdp and PyTorch (eager and torch.compile) on the same device in
# the same call, for GPT ~125M (gpt2-124m, s 1024), ~350M (gpt2-350m, s 1024) and 1.3B (gpt-1.3b,
# s 2048), each at the largest microbatch that fits; prints tokens/s and MFU side by side, and the
# iteration time ptdp's planner/simulator predicts from a profile measured in the same call.
#
# usage (on a GPU machine, from the repository root):
#   bench/gpu/compare.sh --peak-tflops 989 --peak-source "NVIDIA H100 SXM datasheet, dense BF16"
#        [--links-from profiles/dgx-h100.json] [--models "gpt2-124m gpt2-350m gpt-1.3b"]
#        [--steps 20] [--python python3] [--build-dir build-bench] [--skip-build] [--work DIR]
#        [--profile FILE] [--only ptdp|pytorch] [--min-mbs 1] [--max-mbs 128]
#   bench/gpu/compare.sh --backend cpu --models tiny     # smoke test of the whole pipeline on a CPU
#
# MFU = model FLOPs (Narayanan et al. eq. 3 without recomputation, padded vocabulary) per second
# over --peak-tflops (the card's dense bf16 peak; on the cpu backend the profile's best GEMM).
set -euo pipefail
backend=cuda
models="gpt2-124m gpt2-350m gpt-1.3b"
steps=20
python=python3
build=build-bench
skip_build=0
work=""
peak=""
peak_source=""
links_from=""
max_mbs=128
min_mbs=1
profile=""
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) backend=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    --work) work=$2; shift 2 ;;
    --peak-tflops) peak=$2; shift 2 ;;
    --peak-source) peak_source=$2; shift 2 ;;
    --links-from) links_from=$2; shift 2 ;;
    --max-mbs) max_mbs=$2; shift 2 ;;
    --min-mbs) min_mbs=$2; shift 2 ;;  # the doubling's first microbatch
    --profile) profile=$2; shift 2 ;;   # a profile measured earlier: skip ptdp profile
    --only) only=$2; shift 2 ;;         # one side only (bench/gpu/run_all.sh overlaps them)
    *) echo "compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$backend" in cuda|cpu) ;; *) echo "compare.sh: --backend must be cuda or cpu" >&2; exit 2 ;; esac
case "$only" in ""|ptdp|pytorch) ;; *) echo "compare.sh: --only must be ptdp or pytorch" >&2; exit 2 ;; esac
if [ "$backend" = cuda ] && { [ -z "$peak" ] || [ -z "$peak_source" ]; }; then
  echo "compare.sh: --peak-tflops and --peak-source are required on cuda (the card's dense bf16" \
       "peak and where it is published)" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
# One GPU measures no links: take them (with their sources) from the shipped DGX H100 profile.
if [ "$backend" = cuda ] && [ -z "$links_from" ] && [ -f "$root/profiles/dgx-h100.json" ]; then
  links_from="$root/profiles/dgx-h100.json"
fi
work=${work:-$(mktemp -d /tmp/ptdp-compare.XXXXXX)}
mkdir -p "$work"
log() { echo "[compare] $*" >&2; }

# 1. Build.
# A relative --build-dir is under the repository root; an absolute one is taken as it is.
case "$build" in /*) build_path=$build ;; *) build_path=$root/$build ;; esac
if [ $skip_build = 0 ]; then
  cuda_flag=OFF
  [ "$backend" = cuda ] && cuda_flag=ON
  cmake -S "$root" -B "$build_path" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPTDP_WITH_CUDA=$cuda_flag >&2
  cmake --build "$build_path" --target ptdp -j"$(nproc)" >&2
fi
ptdp="$build_path/tools/ptdp"
[ -x "$ptdp" ] || { echo "compare.sh: $ptdp not built" >&2; exit 1; }

# 2. Tokens (byte-level; valid ids for every model) and a profile of this device.
text=/usr/share/common-licenses/GPL-3
[ -f "$text" ] || text="$root/README.md"
"$ptdp" tokenize --in "$text" --out "$work/tokens.bin" >&2
profile_args=(--backend "$backend" --out "$work/profile.json" --raw "$work/profile.raw.json")
[ "$backend" = cpu ] && profile_args+=(--quick)
# Attention at the models' shapes (s 1024 and 2048, d 64 and 128; docs/profile.md).
[ "$backend" = cuda ] && profile_args+=(--attention-grid 1024,2048,4096 64,128)
[ -n "$peak" ] && profile_args+=(--peak-tflops "$peak" --peak-source "$peak_source")
[ -n "$links_from" ] && profile_args+=(--links-from "$links_from")
if [ -n "$profile" ]; then
  [ "$(cd "$(dirname "$profile")" && pwd)/$(basename "$profile")" = "$work/profile.json" ] || cp "$profile" "$work/profile.json"
else
  log "profiling the device: ptdp profile ${profile_args[*]}"
  "$ptdp" profile "${profile_args[@]}" > "$work/profile.txt"
fi
if [ -z "$peak" ]; then
  peak=$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak_tflops"]["value"])' \
         "$work/profile.json")
fi

# The CUDA backend's attention is fused (no s^2 tensors kept): the plan says so, so that its
# memory and the predicted time are those of the kernel that runs.
# (`--software ptdp`: the options this runtime executes; the CPU keeps the unfused attention.)
fused=off
[ "$backend" = cuda ] && fused=on
results="$work/results.jsonl"
: > "$results"
for model in $models; do
  # 3. ptdp: double the microbatch until the planner says it does not fit or the run fails.
  mbs=$min_mbs
  best=""
  while [ "$only" != pytorch ] && [ "$mbs" -le "$max_mbs" ]; do
    plan="$work/$model.mbs$mbs.plan.json"
    if ! "$ptdp" plan --model "$model" --cluster "$work/profile.json" --gpus 1 --global-batch "$mbs" \
         --fix "tp=1,pp=1,dp=1,mbs=$mbs,recompute=none,fused_attention=$fused" --software ptdp --top 1 --out "$plan" > "$work/$model.mbs$mbs.plan.txt" 2>&1; then
      log "$model: microbatch $mbs does not fit (planner)"; break
    fi
    if ! "$ptdp" train --backend "$backend" --plan "$plan" --data "$work/tokens.bin" --steps "$steps" \
         --log "$work/$model.mbs$mbs.jsonl" > "$work/$model.mbs$mbs.train.txt" 2>&1; then
      log "$model: microbatch $mbs failed (see $work/$model.mbs$mbs.train.txt)"; break
    fi
    best=$mbs
    mbs=$((mbs * 2))
  done
  if [ "$only" = pytorch ]; then
    :
  elif [ -n "$best" ]; then
    "$python" - "$work/$model.mbs$best.plan.json" "$work/$model.mbs$best.jsonl" "$peak" "$best" >> "$results" <<'PY'
import json, statistics, sys
plan = json.load(open(sys.argv[1]))
m = plan["model"]
rows = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
rows = rows[min(3, len(rows) - 1):]  # skip warm-up steps
it = statistics.median(r["iteration_s"] for r in rows)
b, s, l, h = int(sys.argv[4]), m["seq_len"], m["layers"], m["hidden"]
mult = m.get("vocab_divisible_by", 128)
v = (m["vocab"] + mult - 1) // mult * mult
flops = 72.0 * b * s * l * h * h * (1 + s / (6.0 * h) + v / (12.0 * l * h))
print(json.dumps({"impl": "ptdp", "mode": "", "model": m["name"], "microbatch": b,
                  "tokens_per_s": b * s / it, "mfu": flops / it / (float(sys.argv[3]) * 1e12),
                  "step_ms": it * 1e3,
                  "predicted_step_ms": plan["prediction"]["iteration_s"] * 1e3}))
PY
  else
    # The run's own last line says why (e.g. the backend is not wired yet): keep it in the table.
    why=$(tail -n 1 "$work/$model.mbs1.train.txt" 2>/dev/null || tail -n 1 "$work/$model.mbs1.plan.txt" 2>/dev/null || echo "did not run")
    "$python" -c 'import json,sys; print(json.dumps({"impl": "ptdp", "mode": "", "model": sys.argv[1], "error": sys.argv[2][:160]}))' \
      "$model" "${why:-did not run}" >> "$results"
  fi
  [ "$only" = ptdp ] && continue
  # 4. PyTorch on the same model (read from the plan file) and device.
  plan1="$work/$model.mbs1.plan.json"
  if [ ! -f "$plan1" ]; then
    "$ptdp" plan --model "$model" --cluster "$work/profile.json" --gpus 1 --global-batch 1 \
      --fix "tp=1,pp=1,dp=1,mbs=1" --software ptdp --top 1 --out "$plan1" > /dev/null 2>&1 || true
  fi
  dev=cuda
  [ "$backend" = cpu ] && dev=cpu
  for mode in eager compile; do
    if ! "$python" "$root/bench/pytorch/train_gpt_torch.py" --plan "$plan1" --mode "$mode" \
         --device "$dev" --steps "$steps" --peak-tflops "$peak" --find-max-batch --max-batch "$max_mbs" \
         >> "$results" 2> "$work/$model.torch.$mode.txt"; then
      log "$model: pytorch $mode failed (see $work/$model.torch.$mode.txt)"
      echo "{\"impl\": \"pytorch\", \"mode\": \"$mode\", \"model\": \"$model\", \"error\": \"failed\"}" >> "$results"
    fi
  done
done

# 5. The table.
"$python" - "$results" "$peak" "$work" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("peak %s TFLOP/s; results in %s" % (sys.argv[2], sys.argv[3]))
print("%-12s %-16s %5s %14s %7s %10s %14s" % ("model", "impl", "mbs", "tokens/s", "MFU", "step_ms",
                                              "predicted_ms"))
for r in rows:
    impl = r["impl"] + ("/" + r["mode"] if r.get("mode") else "")
    if "error" in r:
        print("%-12s %-16s %s" % (r["model"], impl, r["error"]))
        continue
    pred = r.get("predicted_step_ms")
    print("%-12s %-16s %5d %14.1f %6.1f%% %10.2f %14s" % (
        r["model"], impl, r["microbatch"], r["tokens_per_s"], 100 * r.get("mfu", 0), r["step_ms"],
        "%.2f (%+.1f%%)" % (pred, 100 * (pred - r["step_ms"]) / r["step_ms"]) if pred else ""))
PY
