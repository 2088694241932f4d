#!/usr/bin/env bash
# `make megatron-data-check`: `ptdp tokenize --megatron` against Megatron-Core's own indexed-dataset
# writer and reader (check.py). torch, numpy and megatron-core come from PyPI into BUILD/hf-venv,
# the venv `make hf-check` uses (made once, a few GB, so not in `make test`). PASS/FAIL per dataset,
# exit 1 on a FAIL.
# usage: bench/megatron_data/check.sh PTDP BUILD_DIR   (PTDP_HF_PIP_ARGS: extra pip arguments)
set -uo pipefail
ptdp=$(realpath "${1:?usage: check.sh PTDP BUILD_DIR}")
build=$(realpath "${2:?usage: check.sh PTDP BUILD_DIR}")
here=$(cd "$(dirname "$0")" && pwd)
venv=$build/hf-venv
py=$venv/bin/python
if ! "$py" -c "import torch, numpy, megatron.core" 2> /dev/null; then
  echo "== installing torch, numpy and megatron-core into $venv (once)"
  [ -x "$py" ] || python3 -m venv "$venv" || exit 2
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q ${PTDP_HF_PIP_ARGS:-} torch numpy megatron-core || exit 2
fi
"$py" -c "import megatron.core, torch; print('megatron-core', megatron.core.__version__, '| torch', torch.__version__)" 2> /dev/null
"$py" "$here/check.py" "$ptdp" "$build/megatron-data-check"
