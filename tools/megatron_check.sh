#!/usr/bin/env bash
# `make megatron-check MEGATRON_LM=/path/to/Megatron-LM`: the flags of `ptdp plan --emit megatron`
# for GPT and Llama plans parsed by Megatron-LM's own parser (tools/check_megatron_flags.py).
# Megatron-LM's parser is not on PyPI, so the user names a checkout; without one this prints
# SKIPPED and exits 0 (never counted as passed). Megatron-LM needs Python >= 3.12 and torch: a venv
# is made once under BUILD/megatron-venv (torch, numpy, packaging from PyPI; a few GB, hence not in
# `make test`). PTDP_MEGATRON_PYTHON names another interpreter with torch instead.
# usage: tools/megatron_check.sh PTDP BUILD_DIR
set -uo pipefail
ptdp=$(realpath "${1:?usage: megatron_check.sh PTDP BUILD_DIR}")
build=$(realpath "${2:?usage: megatron_check.sh PTDP BUILD_DIR}")
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${MEGATRON_LM:-}" ]; then
  echo "SKIPPED megatron-check: MEGATRON_LM is not set (Megatron-LM's argument parser is not on PyPI;"
  echo "  clone https://github.com/NVIDIA/Megatron-LM and run make megatron-check MEGATRON_LM=/path)"
  exit 0
fi
mlm=$(realpath -m "$MEGATRON_LM")
[ -f "$mlm/megatron/training/arguments.py" ] ||
  { echo "error: MEGATRON_LM: $mlm has no megatron/training/arguments.py" >&2; exit 2; }
py=${PTDP_MEGATRON_PYTHON:-}
if [ -z "$py" ]; then
  venv=$build/megatron-venv
  py=$venv/bin/python
  if ! "$py" -c "import torch, numpy, packaging" 2> /dev/null; then
    base=""
    for c in python3.13 python3.12 python3; do
      if command -v "$c" > /dev/null && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
        base=$c; break
      fi
    done
    [ -n "$base" ] || { echo "error: python: Megatron-LM needs Python >= 3.12, none found" >&2; exit 2; }
    echo "== installing torch, numpy and packaging into $venv with $base (once)"
    "$base" -m venv "$venv" || exit 2
    # shellcheck disable=SC2086
    "$venv/bin/pip" install -q ${PTDP_MEGATRON_PIP_ARGS:-} torch numpy packaging || exit 2
  fi
fi
echo "Megatron-LM $(git -C "$mlm" rev-parse HEAD 2> /dev/null || echo "(not a git checkout)") at $mlm"
"$py" -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__)" || exit 2
work=$build/megatron-check
rm -rf "$work"
mkdir -p "$work"
data=$here/../tests/planner/data
plan() {  # NAME ptdp-plan-arguments...
  local name=$1
  shift
  "$ptdp" plan "$@" --emit megatron --out "$work/$name.json" > "$work/$name.txt" 2>&1 ||
    { echo "FAIL $name: ptdp plan $*"; cat "$work/$name.txt"; return 1; }
}
failed=0
# GPT-3 175B and Llama 3.1 405B (issue 16) at the sizes of their papers, a small Llama, the Llama 3
# paper's own layout (fused attention, sequence parallelism, distributed optimizer, fused gradient
# accumulation), an FP8 plan, the 2021 paper's 1T run on its stack (fp16, interleaved, full
# recomputation, unfused attention and accumulation, no overlaps), selective recomputation
# with sequence parallelism, uneven first/last stages, and interleaving whose m % p != 0 needs a
# microbatch group size.
plan gpt3-175b --model gpt3-175b --cluster dgx-h100 --gpus 1024 --global-batch 1536 || failed=1
plan llama3.1-405b --model llama3.1-405b --cluster dgx-h100 --gpus 16384 --global-batch 2048 || failed=1
plan llama3.1-405b-paper-layout --model llama3.1-405b --cluster dgx-h100 --gpus 16384 \
  --global-batch 2048 --fix tp=8,pp=16,dp=128 --fused-attention --sequence-parallel \
  --distributed-optimizer --grad-accumulation-fusion || failed=1
plan llama3-8b --model llama3-8b --cluster dgx-h100 --gpus 64 --global-batch 512 || failed=1
plan llama3-70b-fp8 --model llama3-70b --cluster dgx-h100 --gpus 1024 --global-batch 1024 \
  --precision fp8 || failed=1
plan gpt-1t-paper --model gpt-1t --cluster selene --gpus 3072 --global-batch 3072 \
  --software megatron-lm-2021 || failed=1
plan gpt-22b-selective-sp --model gpt-22b --cluster selene --gpus 64 --global-batch 512 \
  --fix recompute=selective --sequence-parallel || failed=1
plan uneven --model "$data/large_vocab.json" --cluster selene --gpus 64 --global-batch 512 || failed=1
plan interleaved-group --model gpt-1.7b --cluster selene --gpus 4 --global-batch 22 \
  --fix tp=1,pp=4,dp=1,mbs=1,vp=2,schedule=interleaved || failed=1
# A mixture of experts with 128-wide heads, in the published Qwen3-235B layout (docs/moe.md).
plan qwen3-235b-moe --model qwen3-235b-a22b --cluster dgx-h100 --gpus 256 --global-batch 2048 \
  --precision fp8 --fix tp=2,pp=8,vp=4,schedule=interleaved,ep=32,etp=1 || failed=1
# DeepSeek-V3 (multi-latent attention, a shared expert, three leading dense layers, one
# multi-token prediction depth) in Megatron-Bridge's published layout "Et|(tt|)*30mL", with its
# all-to-alls beside another microbatch's compute (the combined 1F1B) and the DeepEP dispatcher
# (flex) with node-limited routing, and its recomputation of the MLA up projections and the dense
# MLPs (--recompute-modules), as that run had them.
dsv3_layout=1$(printf '/2%.0s' $(seq 30))/0
plan deepseek-v3 --model deepseek-v3 --cluster dgx-h100 --gpus 1024 --global-batch 8192 \
  --precision fp8 \
  --fix "tp=2,pp=8,vp=4,ep=64,etp=1,stage_layers=$dsv3_layout,moe_a2a_overlap=on,moe_dispatcher=deepep,recompute_modules=mla_up_proj+mlp" \
  || failed=1
# Fully sharded data parallelism (Megatron-FSDP, optim_grads_params) on a Llama 3 8B.
plan llama3-8b-fsdp --model llama3-8b --cluster dgx-h100 --gpus 64 --global-batch 512 \
  --fused-attention --grad-accumulation-fusion --fix tp=1,pp=1,fsdp=on || failed=1
# Hybrid sharding: FSDP within 8 ranks, 8 instances across (--num-distributed-optimizer-instances).
plan llama3-8b-hsdp --model llama3-8b --cluster dgx-h100 --gpus 64 --global-batch 512 \
  --fused-attention --grad-accumulation-fusion --fix tp=1,pp=1,fsdp=on,optimizer_instances=8 \
  || failed=1
# The distributed optimizer in 2 instances at t 8 (its shard over 4 data ranks).
plan gpt3-175b-instances --model gpt3-175b --cluster dgx-h100 --gpus 512 --global-batch 512 \
  --fix tp=8,pp=8,optimizer_instances=2 || failed=1
# Nemotron-4 15B (squared-ReLU MLP, RoPE on half of each head) in the DGX Cloud recipe's layout.
plan nemotron4-15b --model nemotron4-15b --cluster dgx-h100 --gpus 16 --global-batch 64 \
  --fused-attention --sequence-parallel --distributed-optimizer --fix tp=4,pp=1,mbs=4 || failed=1
# Nemotron-4 340B as dgxc-benchmarking ran it: 16-bit optimizer state (TE's precision-aware Adam),
# selective recomputation of the attention core beside fused attention.
plan nemotron4-340b --model nemotron4-340b --cluster dgx-h100 --gpus 128 --global-batch 32 \
  --fix tp=8,pp=8,mbs=1,vp=12,schedule=interleaved,precision=bf16,recompute=selective,sequence_parallel=on,distributed_optimizer=on,fused_attention=on,grad_accumulation_fusion=on,grad_reduce_bf16=on,optimizer_state_bf16=on \
  || failed=1
# A mixture recomputing SwiGLU's output and its pre-MLP norm (GPT-OSS's recipe's modules).
plan qwen3-30b-norm-recompute --model qwen3-30b-a3b --cluster dgx-h100 --gpus 16 \
  --global-batch 1024 --fix recompute_modules=moe_act+layernorm || failed=1
# A mixture with a shared expert recomputing its whole MoE block and its shared expert.
plan dsv3-moe-recompute --model deepseek-v3 --cluster dgx-h100 --gpus 1024 \
  --global-batch 8192 --fix tp=2,pp=8,ep=64,etp=1,mbs=1,recompute_modules=moe+shared_experts \
  || failed=1
# Sliding-window attention on every layer but each second one (GPT-OSS's alternation).
plan window-alternating --model "$data/window_alternating.json" --cluster dgx-h100 --gpus 8 \
  --global-batch 64 --fused-attention || failed=1
# Dense layers between the mixture ones (a per-layer pattern, emitted as Megatron-Core's list).
plan moe-pattern --model "$data/moe_pattern.json" --cluster dgx-h100 --gpus 16 \
  --global-batch 256 || failed=1
"$py" "$here/check_megatron_flags.py" --megatron-lm "$mlm" "$work"/*.json || failed=1
# Controls: the same check must refuse flags Megatron-LM does not know and flags that disagree with
# the plan (a tp, SwiGLU, a mixture's ep, the modules selective recomputation redoes, FSDP's
# sharding, Nemotron's partial RoPE and LayerNorm1P, 16-bit Adam moments, a window), or a PASS
# above means nothing.
mkdir -p "$work/controls"
"$py" - "$work" <<'PY' || exit 2
import json, sys
w = sys.argv[1]
gpt = json.load(open(f"{w}/gpt3-175b.json"))
llama = json.load(open(f"{w}/llama3-8b.json"))
moe = json.load(open(f"{w}/qwen3-235b-moe.json"))
dsv3 = json.load(open(f"{w}/deepseek-v3.json"))
fsdp = json.load(open(f"{w}/llama3-8b-fsdp.json"))
nemotron = json.load(open(f"{w}/nemotron4-15b.json"))
nemotron340 = json.load(open(f"{w}/nemotron4-340b.json"))
window = json.load(open(f"{w}/window-alternating.json"))
tp = gpt.get("megatron_layout", gpt["layout"])["tp"]  # the layout the flags are for
other = tp // 2 if tp > 1 else 2  # another tp that still divides the GPUs
for name, plan, old, new in [
        ("unknown-flag", gpt, " --bf16", " --bf16 --no-scatter-gather-tensors-in-pipeline"),
        ("wrong-tp", gpt, f"--tensor-model-parallel-size {tp} ",
         f"--tensor-model-parallel-size {other} "),
        ("no-swiglu", llama, " --swiglu", ""),
        ("wrong-ep", moe, " --expert-model-parallel-size 32 ", " --expert-model-parallel-size 16 "),
        ("wrong-recompute-modules", dsv3, " --recompute-modules mla_up_proj mlp",
         " --recompute-modules mla_up_proj"),
        ("wrong-fsdp-sharding", fsdp, " --data-parallel-sharding-strategy optim_grads_params",
         " --data-parallel-sharding-strategy optim_grads"),
        ("no-partial-rope", nemotron, " --rotary-percent 0.5", ""),
        ("fp32-moments", nemotron340, " --exp-avg-dtype bf16", ""),
        ("no-layernorm-1p", nemotron, " --apply-layernorm-1p", ""),
        ("wider-window", window, " --window-size 127,0", " --window-size 255,0")]:
    assert old in plan["megatron_args"], (name, old)
    json.dump(dict(plan, megatron_args=plan["megatron_args"].replace(old, new)),
              open(f"{w}/controls/{name}.json", "w"))
PY
# Each control must be refused for its own edit (the flag it changed named in the refusal), not for
# any failure: an interpreter without torch, or a crash, refuses everything.
declare -A reason=([unknown-flag]="unrecognized arguments: --no-scatter-gather"
                   [wrong-tp]="--tensor-model-parallel-size:" [no-swiglu]="--swiglu:"
                   [wrong-ep]="--expert-model-parallel-size:"
                   [wrong-recompute-modules]="--recompute-modules:"
                   [wrong-fsdp-sharding]="--data-parallel-sharding-strategy:"
                   [no-partial-rope]="--rotary-percent:" [fp32-moments]="--exp-avg-dtype:"
                   [no-layernorm-1p]="--apply-layernorm-1p:" [wider-window]="--window-size:")
for c in "$work"/controls/*.json; do
  name=$(basename "$c" .json)
  if "$py" "$here/check_megatron_flags.py" --megatron-lm "$mlm" "$c" > "${c%.json}.out"; then
    echo "FAIL control $name: the check passed flags it must refuse"; failed=1
  elif ! grep -qF -- "${reason[$name]:-@@no reason named@@}" "${c%.json}.out"; then
    echo "FAIL control $name: refused, but not for its edit: $(head -n 1 "${c%.json}.out" | cut -c1-150)"
    failed=1
  else
    echo "PASS control $name refused: $(head -n 1 "${c%.json}.out" | cut -c1-150)"
  fi
done
exit $failed
