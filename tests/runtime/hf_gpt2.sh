#!/usr/bin/env bash
# Hugging Face GPT-2 folders (docs/checkpoints.md "Hugging Face GPT-2") without transformers: the
# model is 2 layers, h 64, 4 heads, s 32, vocabulary 300 (padded to 384 rows at t1, 512 at t2).
# Every case first trains it 3 steps in one process, saves, and exports the checkpoint (hf/).
#   roundtrip   hf/ -> `train --init-from` at t2 p2 with --lr 0 (the step leaves the weights
#               unchanged) -> --save -> export: model.safetensors and config.json byte-identical
#   roundtrip_untied  the same with untied embeddings (lm_head.weight) and ffn_hidden 96
#   layout      --init-from hf/ at t2 p2 (4 ranks) against one process: per-step losses within 1e-5
#               (relative), the first step's loss equal to `ptdp forward --hf hf/` on that batch
#   forward     `ptdp forward` of the checkpoint and of its export: identical logits; the loss of
#               the batch of step 4 equals the loss of a run resumed from the checkpoint at step 4
#   missing_config | bad_header | wrong_shape | nonfinite | activation | plan | plan_llama: a
#               damaged folder, a plan of another model or of a Llama-style one: exit 2 on every
#               rank, one error line naming the file and the field or reason
# usage: hf_gpt2.sh PTDP WORKDIR CASE
set -uo pipefail
ptdp=$1 work=$2 case=$3
. "$(dirname "$0")/lib.sh"  # OpenMPI as root, oversubscribed; fail
here=$(cd "$(dirname "$0")" && pwd)
fresh_dir_with_data "hf-$case"
plan() {  # NAME TP PP DP [LAYERS]; $untied: tie_word_embeddings false and ffn_hidden 96
  local g=$(($2 * $3 * $4))
  cat > "$1.json" <<JSON
{"ptdp_plan_version": 2,
 "model": {"name": "hf-test", "layers": ${5:-2}, "hidden": 64, "heads": 4, "seq_len": 32,
           "vocab": 300, "dropout": 0.1${untied:+, \"tied_embeddings\": false, \"ffn_hidden\": 96}${llama:-}},
 "cluster": {"name": "cpu", "gpus": $g, "gpus_per_node": $g},
 "global_batch": 8,
 "layout": {"tp": $2, "pp": $3, "dp": $4, "mbs": 2, "vp": 1, "schedule": "1f1b",
            "recompute": "none", "scatter_gather": true, "precision": "fp32"}}
JSON
  "$ptdp" schedule --plan "$1.json" --out "$1.json" > /dev/null || fail "plan $1"
}
train() {  # NP PLAN [flags]: output in PLAN.out
  local np=$1 name=$2
  shift 2
  timeout 120 mpirun -np "$np" --oversubscribe "$ptdp" train --plan "$name.json" --data data.bin \
    "$@" > "$name.out" 2>&1
}
loss_of() { sed -n 's/.*loss \([0-9.]*\) nats.*/\1/p' "$1"; }
untied=
[ "$case" = roundtrip_untied ] && untied=1
plan one 1 1 1
plan tp 2 2 1
train 1 one --steps 3 --save ck || { cat one.out; fail "training the model to export"; }
"$ptdp" export --checkpoint ck --to hf-gpt2 hf > export.out 2>&1 || { cat export.out; fail "export"; }
[ -f hf/config.json ] && [ -f hf/model.safetensors ] || fail "export wrote $(ls hf)"

# Rewrites hf/model.safetensors's header with python3: $1 is a statement on `h` (the header dict).
edit_header() {
  python3 - "$1" <<'PY' || fail "editing the header"
import json, struct, sys
p = "hf/model.safetensors"
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
exec(sys.argv[1])
j = json.dumps(h).encode()
j += b" " * (-(8 + len(j)) % 8)
open(p, "wb").write(struct.pack("<Q", len(j)) + j + b[8 + n:])
PY
}

case "$case" in
  roundtrip|roundtrip_untied)
    if [ -n "$untied" ]; then
      grep -q '"tie_word_embeddings": false' hf/config.json || fail "config.json: not untied"
      grep -q '"n_inner": 96' hf/config.json || fail "config.json: n_inner"
    fi
    train 4 tp --steps 1 --init-from hf --lr 0 --min-lr 0 --save ck2 || { cat tp.out; fail "t2p2 run"; }
    grep -q "initialised from the Hugging Face folder hf" tp.out || fail "no init line"
    "$ptdp" export --checkpoint ck2 --to hf-gpt2 hf2 > export2.out 2>&1 || { cat export2.out; fail "export 2"; }
    cmp hf/model.safetensors hf2/model.safetensors || fail "model.safetensors differs after the round trip"
    cmp hf/config.json hf2/config.json || fail "config.json differs after the round trip"
    echo "export -> init-from (t2 p2) -> save -> export: byte-identical" ;;
  layout)
    train 1 one --steps 3 --init-from hf --log ref.jsonl || { cat one.out; fail "one process"; }
    train 4 tp --steps 3 --init-from hf --expect-losses ref.jsonl --loss-tol 1e-5 \
      || { cat tp.out; fail "t2 p2 against one process"; }
    grep "losses vs reference" tp.out
    # Dropout is on in training: the forward's loss is compared with a dropout-free plan's step 1.
    sed -i 's/"dropout": 0.1/"dropout": 0.0/' one.json
    train 1 one --steps 1 --init-from hf --log nodrop.jsonl || { cat one.out; fail "no dropout"; }
    "$ptdp" forward --hf hf --data data.bin --step 1 --global-batch 8 > fwd.out 2>&1 \
      || { cat fwd.out; fail "forward"; }
    a=$(loss_of fwd.out)
    b=$(grep -o '"loss":[^,]*' nodrop.jsonl | head -1 | cut -d: -f2)
    echo "first-step loss: train $b, forward $a"
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-6 * b) }' \
      || fail "forward's loss $a is not train's first-step loss $b" ;;
  forward)
    "$ptdp" forward --checkpoint ck --data data.bin --step 4 --global-batch 8 --out a.bin \
      > a.out 2>&1 || { cat a.out; fail "forward of the checkpoint"; }
    "$ptdp" forward --hf hf --data data.bin --step 4 --global-batch 8 --out b.bin \
      --batch-out batch.bin > b.out 2>&1 || { cat b.out; fail "forward of the export"; }
    cat a.out b.out
    cmp a.bin b.bin || fail "logits differ between the checkpoint and its export"
    [ "$(stat -c %s a.bin)" -eq $((8 * 32 * 300 * 4)) ] || fail "logits file size"
    # --tokens over the batch it wrote gives the same loss.
    "$ptdp" forward --hf hf --tokens batch.bin --out c.bin > c.out 2>&1 || { cat c.out; fail "--tokens"; }
    cmp b.bin c.bin || fail "--tokens logits differ from --data's"
    # Sequences of 33 tokens are not whole sequences of 17 + 1: refused, exit 2.
    "$ptdp" forward --hf hf --tokens batch.bin --seq-len 17 > e.out 2>&1
    rc=$?
    [ "$rc" -eq 2 ] && grep -q "ptdp forward: error: --tokens: 264 tokens are not whole sequences" e.out \
      || { cat e.out; fail "forward --seq-len 17: exit $rc"; }
    sed -i 's/"dropout": 0.1/"dropout": 0.0/' one.json
    train 1 one --steps 4 --save ck0 --stop-at 3 || { cat one.out; fail "no-dropout run"; }
    train 1 one --steps 4 --load ck0 --log resumed.jsonl || { cat one.out; fail "resumed"; }
    "$ptdp" forward --checkpoint ck0 --data data.bin --step 4 --global-batch 8 > d.out 2>&1 \
      || { cat d.out; fail "forward of ck0"; }
    a=$(loss_of d.out)
    b=$(grep -o '"step":4,"loss":[^,]*' resumed.jsonl | cut -d: -f3)
    echo "step 4: train $b, forward $a"
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-6 * b) }' \
      || fail "forward's loss $a is not train's loss $b at step 4" ;;
  missing_config|bad_header|wrong_shape|nonfinite|activation|plan|plan_llama)
    case "$case" in
      missing_config) rm hf/config.json; expect="hf/config.json: missing" ;;
      bad_header)     printf 'x' | dd of=hf/model.safetensors bs=1 seek=8 conv=notrunc status=none
                      expect="hf/model.safetensors: .*JSON" ;;
      wrong_shape)    edit_header 'h["transformer.wpe.weight"]["shape"] = [64, 32]'
                      expect="hf/model.safetensors: tensor 'transformer.wpe.weight' has shape \[64, 32\], config.json needs \[32, 64\]" ;;
      nonfinite)      python3 -c "
import json, struct
p = 'hf/model.safetensors'
b = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(bytes(b[8:8 + n]))
at = 8 + n + h['transformer.h.1.mlp.c_fc.bias']['data_offsets'][0] + 4 * 5
b[at:at + 4] = struct.pack('<f', float('nan'))
open(p, 'wb').write(b)" || fail "writing a NaN"
                      expect="hf/model.safetensors: tensor 'transformer.h.1.mlp.c_fc.bias' holds a non-finite value at element 5" ;;
      activation)     sed -i 's/"gelu_new"/"relu"/' hf/config.json
                      expect="hf/config.json: activation_function: 'relu' is not supported" ;;
      plan)           plan tp 2 2 1 4
                      expect="hf/config.json: n_layer is 2, the plan's model.layers is 4" ;;
      plan_llama)     llama=', "rmsnorm": true, "swiglu": true, "rotary": true, "linear_bias": false'
                      plan tp 2 2 1
                      expect="hf/config.json: the plan's model hf-test is not a GPT-2 (RMSNorm, SwiGLU" ;;
    esac
    train 4 tp --steps 1 --init-from hf
    rc=$?
    cat tp.out
    [ "$rc" -eq 2 ] || fail "exit code $rc, want 2"
    grep -q "ptdp train: error: --init-from: $expect" tp.out || fail "no line matching '$expect'"
    n=$(grep -c "error:" tp.out)
    [ "$n" -eq 1 ] || fail "$n error lines, want exactly 1 (rank 0)"
    # ptdp forward refuses the same folder the same way.
    if [ "$case" != plan ] && [ "$case" != plan_llama ]; then
      "$ptdp" forward --hf hf --data data.bin --step 1 --global-batch 8 > fwd.out 2>&1
      rc=$?
      cat fwd.out
      [ "$rc" -eq 2 ] || fail "forward: exit code $rc, want 2"
      grep -q "ptdp forward: error: .*$expect" fwd.out || fail "forward: no line matching '$expect'"
    fi ;;
  *) fail "unknown case $case" ;;
esac
echo PASS
