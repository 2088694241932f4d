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
mlm=$(realpath "$MEGATRON_LM")
[ -f "$mlm/megatron/training/arguments.py" ] ||
  { echo "error: MEGATRON_LM: $mlm has no megatron/training/arguments.py"; exit 2; }
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
    [ -n "$base" ] || { echo "error: python: Megatron-LM needs Python >= 3.12, none found"; exit 2; }
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
# paper's own layout, an FP8 plan, uneven first/last stages, and interleaving whose m % p != 0
# needs a microbatch group size.
plan gpt3-175b --model gpt3-175b --cluster dgx-h100 --gpus 1024 --global-batch 1536 || failed=1
plan llama3.1-405b --model llama3.1-405b --cluster dgx-h100 --gpus 16384 --global-batch 2048 || failed=1
plan llama3.1-405b-paper-layout --model llama3.1-405b --cluster dgx-h100 --gpus 16384 \
  --global-batch 2048 --fix tp=8,pp=16,dp=128 --fused-attention --sequence-parallel \
  --distributed-optimizer --grad-accumulation-fusion || failed=1
plan llama3-8b --model llama3-8b --cluster dgx-h100 --gpus 64 --global-batch 512 || failed=1
plan llama3-70b-fp8 --model llama3-70b --cluster dgx-h100 --gpus 1024 --global-batch 1024 \
  --precision fp8 || failed=1
plan uneven --model "$data/large_vocab.json" --cluster selene --gpus 64 --global-batch 512 || failed=1
plan interleaved-group --model gpt-1.7b --cluster selene --gpus 4 --global-batch 22 \
  --fix tp=1,pp=4,dp=1,mbs=1,vp=2,schedule=interleaved || failed=1
"$py" "$here/check_megatron_flags.py" --megatron-lm "$mlm" "$work"/*.json || failed=1
exit $failed
