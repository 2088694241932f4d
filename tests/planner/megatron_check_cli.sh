#!/usr/bin/env bash
# `make megatron-check` without Megatron-LM (runs in `make test`): SKIPPED and exit 0 without a
# checkout, one error line and exit 2 for a path that is not one, and the checker's own bad input.
# The parse itself needs a checkout and torch: `make megatron-check MEGATRON_LM=/path`.
# usage: megatron_check_cli.sh PTDP SOURCE_DIR WORK_DIR
set -u
ptdp=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail=0
expect() {  # WANT_RC REGEX command...
  local want=$1 re=$2
  shift 2
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -qE -- "$re" <<< "$out"; then
    echo "FAIL: $* -> rc $rc (want $want), output: $out"; fail=1
  else
    echo "ok: $(head -n 1 <<< "$out")"
  fi
}
expect 0 "^SKIPPED megatron-check: MEGATRON_LM is not set" \
  env -u MEGATRON_LM "$src/tools/megatron_check.sh" "$ptdp" "$work"
expect 2 "^error: MEGATRON_LM: /nonexistent/mlm has no megatron/training/arguments.py$" \
  env MEGATRON_LM=/nonexistent/mlm "$src/tools/megatron_check.sh" "$ptdp" "$work"
expect 2 "^error: --megatron-lm: no Megatron-LM checkout given" \
  env -u MEGATRON_LM python3 "$src/tools/check_megatron_flags.py" "$work/x.json"
# A directory shaped like a checkout, and a plan file that is not one: FAIL naming the file.
mkdir -p "$work/fake/megatron/training" && touch "$work/fake/megatron/training/arguments.py"
echo '{"model": {}}' > "$work/broken.json"
expect 1 "^FAIL broken: .*broken.json: not a plan file" \
  python3 "$src/tools/check_megatron_flags.py" --megatron-lm "$work/fake" "$work/broken.json"
exit $fail
