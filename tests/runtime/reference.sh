#!/usr/bin/env bash
# The single-process reference run: tokenizes the data (once) and trains 20 steps (in bf16 or fp16
# the first 10 of them, the learning-rate schedule still 20 steps', as half_equivalence.sh's runs)
# with t = p = d = 1, writing the losses and a full parameter dump.
# usage: reference.sh PTDP WORKDIR NAME LAYERS DROPOUT [PRECISION]
set -euo pipefail
ptdp=$1 work=$2 name=$3 layers=$4 dropout=$5 prec=${6:-fp32}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
text=/usr/share/common-licenses/GPL-3
[ -f "$text" ] || text="$here/../../ARCHITECTURE.md"
[ -f "$text" ] || text="$here/CMakeLists.txt"
if [ ! -f "$work/data.bin" ]; then
  "$ptdp" tokenize --in "$text" --out "$work/data.$name.tmp" && mv -f "$work/data.$name.tmp" "$work/data.bin"
fi
"$here/write_plan.sh" "$ptdp" "$work/$name.plan.json" "$layers" "$dropout" 256 16 1 1 1 4 1 1f1b none true \
  "$prec"
steps=20
[ "$prec" = fp32 ] || steps=10
exec timeout 300 "$ptdp" train --plan "$work/$name.plan.json" --data "$work/data.bin" --steps "$steps" \
  --decay-steps 20 \
  --log "$work/$name.jsonl" --dump-params "$work/$name.params"
