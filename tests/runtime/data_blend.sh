#!/usr/bin/env bash
# Blends and splits of the training data (docs/data.md "Blends and splits"): `ptdp train --data
# 0.3 data.bin 0.7 eval.bin --split 90,5,5`, the 4-layer GPT with dropout 0.1 (global batch 16),
# validation every 3 steps (2 global batches each) and the test after the last.
#   t2p2d2_1f1b   6 steps on 8 ranks against one process: training, validation and test losses
#       within 1e-5 (relative) each (every layout reads the same blend and the same parts)
#   forward       one process, 3 steps saved: the validation loss after step 3 equals the mean of
#       `ptdp forward --checkpoint --data (the blend) --split --part valid --step 1 and 2`, the test
#       loss that of --part test, within 1e-6 (the parts and the order each evaluation reads)
#   resume        one process, 4 steps against 2 steps saved and 2 resumed (--load): training and
#       test losses bit for bit (the blend's order replayed from sample 0 on resume)
#   megatron      a Megatron-LM dataset (PREFIX.bin and PREFIX.idx, written here as Megatron-Core's
#       builder writes them: uint16 tokens of documents of several sequences) read in place in the
#       blend, by its prefix and by PREFIX.bin: training, validation and test losses bit for bit
#       those of its conversion (ptdp tokenize --megatron) in its place
#   bad_input     each malformed blend or split, and each impossible one: exit 2, one line naming
#       the flag
# usage: data_blend.sh PTDP WORKDIR CASE
set -euo pipefail
ptdp=$(realpath "$1")
work=$2 case=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"  # OpenMPI as root, oversubscribed; fail; fresh_dir_with_data
fresh_dir_with_data "blend-$case"
other_text=/usr/share/common-licenses/Apache-2.0
[ -f "$other_text" ] || other_text="$here/equivalence.sh"
"$ptdp" tokenize --in "$other_text" --out eval.bin > /dev/null || fail "tokenize the second text"
plan() {  # NAME TP PP DP VP SCHED
  "$here/write_plan.sh" "$ptdp" "$1.json" 4 0.1 256 16 "$2" "$3" "$4" 2 "$5" "$6" none true
}
blend=(--data 0.3 data.bin 0.7 eval.bin --split 90,5,5)
train() {  # NAME NP STEPS [flags]: NAME.jsonl, NAME.out
  local name=$1 np=$2 steps=$3
  shift 3
  timeout 120 mpirun -np "$np" "$ptdp" train --plan "$name.json" "${blend[@]}" --steps "$steps" \
    --eval-iters 2 --log "$name.jsonl" "$@" > "$name.out" 2>&1 || { cat "$name.out"; fail "ptdp train $name $*"; }
}
field() { grep -o "\"$1\":[^,}]*" "$2" | cut -d: -f2; }
# Relative difference of two numbers within a tolerance, printed.
close() {  # WHAT A B TOL
  awk -v w="$1" -v a="$2" -v b="$3" -v t="$4" 'BEGIN {
    d = (a > b ? a - b : b - a) / b
    printf "%s: %.9f against %.9f, relative %.2e (tolerance %s)\n", w, a, b, d, t
    exit !(d <= t) }' || fail "$1"
}

case "$case" in
  bad_input)
    plan one 1 1 1 1 1f1b
    for args in "--data data.bin --split 1,2,3,4|--split: '1,2,3,4' is not up to three shares" \
                "--data data.bin --split 90,x,5|--split: '90,x,5' is not up to three shares" \
                "--data data.bin --split 0,1,0|--split 0,1,0: no training share" \
                "--data 0.3 data.bin eval.bin|--data: 3 words: give one FILE, or a blend" \
                "--data x data.bin 1 eval.bin|--data: 'x' is not a weight" \
                "--data 0 data.bin 1 eval.bin|--data: the weight of 'data.bin' is 0, not a positive number" \
                "--data data.bin --split 90,10 --eval-data eval.bin|--eval-data: --split 90,10 takes the validation data from --data already" \
                "--data data.bin --split 90,0,10 --test-data eval.bin|--test-data: --split 90,0,10 takes the test data from --data already" \
                "--data data.bin --split 99.99,0.01|--split 99.99,0.01: the validation part of --data 'data.bin' has" \
                "--data 1 data.bin 1 missing.bin|--data: data file 'missing.bin' cannot be opened" \
                "--data data.bin --test-data missing.bin|--test-data: data file 'missing.bin' cannot be opened"; do
      flags=${args%%|*} want=${args#*|}
      # shellcheck disable=SC2086
      "$ptdp" train --plan one.json $flags --steps 1 > bad.out 2>&1 && fail "$flags ran"
      rc=$?
      [ "$rc" -eq 2 ] || { cat bad.out; fail "$flags: exit $rc, want 2"; }
      [ "$(wc -l < bad.out)" -eq 1 ] && grep -qF -e "$want" bad.out || { cat bad.out; fail "$flags: the error line"; }
      echo "$flags: $(cat bad.out)"
    done
    "$ptdp" train --plan one.json "${blend[@]}" --steps 1 --save ck > /dev/null 2>&1 || fail "a checkpoint to forward"
    "$ptdp" forward --checkpoint ck "${blend[@]}" --part dev --step 1 --global-batch 16 > bad.out 2>&1 && fail "--part dev ran"
    grep -qF "ptdp forward: error: --part: 'dev' is not train, valid or test" bad.out || { cat bad.out; fail "--part dev: the error line"; }
    echo "forward --part dev: $(cat bad.out)"
    echo PASS
    exit 0 ;;
  forward)
    plan one 1 1 1 1 1f1b
    train one 1 3 --save ck
    grep -q " > validation data: data.bin \[.*) weight 0.3 + eval.bin \[.*) weight 0.7" one.out || { cat one.out; fail "the data lines"; }
    grep -q "validation loss at the end of training for test data | lm loss value" one.out || { cat one.out; fail "the test line"; }
    for part in valid test; do
      for k in 1 2; do
        "$ptdp" forward --checkpoint ck "${blend[@]}" --part "$part" --step "$k" --global-batch 16 > "$part$k.out" 2>&1 ||
          { cat "$part$k.out"; fail "ptdp forward --part $part --step $k"; }
      done
      a=$(sed -n 's/.*loss \([0-9.]*\) nats.*/\1/p' "${part}1.out") b=$(sed -n 's/.*loss \([0-9.]*\) nats.*/\1/p' "${part}2.out")
      key=eval_loss
      [ "$part" = test ] && key=test_loss
      close "$part loss against the mean of ptdp forward --part $part --step 1 and 2" \
        "$(field $key one.jsonl | tail -1)" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.12f", (a + b) / 2 }')" 1e-6
    done
    echo PASS
    exit 0 ;;
  megatron)
    # data.bin's tokens as a Megatron-LM dataset: sequences of 1 to 97 tokens, documents of 1 to 3
    # sequences, back to back in mg.bin (megatron/core/datasets/indexed_dataset.py's layout).
    python3 - data.bin mg <<'PY' || fail "write the Megatron dataset"
import struct, sys
raw = open(sys.argv[1], "rb").read()
count = struct.unpack("<Q", raw[16:24])[0]
tokens = struct.unpack("<%dH" % count, raw[24:24 + 2 * count])
lengths, at = [], 0
while at < count:
    n = min(1 + (at * 7919) % 97, count - at)
    lengths.append(n)
    at += n
docs, s = [0], 0
while s < len(lengths):
    s = min(s + 1 + s % 3, len(lengths))
    docs.append(s)
pointers, byte = [], 0
for n in lengths:
    pointers.append(byte)
    byte += 2 * n
with open(sys.argv[2] + ".bin", "wb") as f:
    f.write(struct.pack("<%dH" % count, *tokens))
with open(sys.argv[2] + ".idx", "wb") as f:
    f.write(b"MMIDIDX\0\0" + struct.pack("<QBQQ", 1, 8, len(lengths), len(docs)))
    f.write(struct.pack("<%di" % len(lengths), *lengths))
    f.write(struct.pack("<%dq" % len(pointers), *pointers))
    f.write(struct.pack("<%dq" % len(docs), *docs))
PY
    "$ptdp" tokenize --megatron mg --out converted.tok > /dev/null || fail "ptdp tokenize --megatron"
    plan conv 1 1 1 1 1f1b
    for run in conv prefix bin; do
      [ "$run" = conv ] || cp conv.json "$run.json"
      file=converted.tok
      [ "$run" = prefix ] && file=mg
      [ "$run" = bin ] && file=mg.bin
      blend=(--data 0.3 "$file" 0.7 eval.bin --split 90,5,5)
      train "$run" 1 3
    done
    grep -q " > training data: mg \[0, " prefix.out || { cat prefix.out; fail "the prefix's data line"; }
    for run in prefix bin; do
      for key in loss eval_loss test_loss; do
        [ "$(field $key $run.jsonl)" = "$(field $key conv.jsonl)" ] || fail "$run: $key differs from the conversion's"
      done
      echo "read in place by $run: training, validation and test losses bit for bit the conversion's"
    done
    echo PASS
    exit 0 ;;
  resume)
    plan whole 1 1 1 1 1f1b
    train whole 1 4 --decay-steps 4  # the same schedule in all three runs
    cp whole.json half.json
    train half 1 2 --decay-steps 4 --save ck
    cp whole.json rest.json
    train rest 1 4 --decay-steps 4 --load ck
    grep -q "resumed from step 2" rest.out || { cat rest.out; fail "no resume"; }
    [ "$(field loss whole.jsonl | tail -2)" = "$(field loss rest.jsonl | tail -2)" ] || fail "resumed training losses"
    [ "$(field test_loss whole.jsonl)" = "$(field test_loss rest.jsonl)" ] && [ -n "$(field test_loss rest.jsonl)" ] ||
      fail "resumed test loss"
    echo "steps 3 and 4 and the test loss, straight and resumed: bit for bit"
    # The same files in other weights: the checkpoint's parts differ, refused in one line.
    timeout 120 mpirun -np 1 "$ptdp" train --plan rest.json --data 0.5 data.bin 0.5 eval.bin \
      --split 90,5,5 --steps 4 --load ck > other.out 2>&1 && { cat other.out; fail "other weights resumed"; }
    grep -q "saved with training data .* (token ranges and weights), --data and --split give" other.out ||
      { cat other.out; fail "other weights' error"; }
    [ "$(grep -c "ptdp train: error:" other.out)" -eq 1 ] || { cat other.out; fail "error lines"; }
    echo "a resume with other blend weights: refused"
    echo PASS
    exit 0 ;;
  t2p2d2_1f1b)
    plan one 1 1 1 1 1f1b
    train one 1 6 --eval-every 3
    plan lay 2 2 2 1 1f1b
    train lay 8 6 --eval-every 3 --expect-losses one.jsonl
    [ "$(field eval_loss lay.jsonl | wc -l)" -eq 2 ] || fail "eval_loss on $(field eval_loss lay.jsonl | wc -l) lines, want 2"
    for k in 1 2; do
      close "validation $k" "$(field eval_loss lay.jsonl | sed -n ${k}p)" "$(field eval_loss one.jsonl | sed -n ${k}p)" 1e-5
    done
    close "test" "$(field test_loss lay.jsonl)" "$(field test_loss one.jsonl)" 1e-5
    echo PASS
    exit 0 ;;
  *) fail "unknown case $case" ;;
esac
