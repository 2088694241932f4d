#!/usr/bin/env bash
# `make hf-check`: ptdp against transformers' GPT2LMHeadModel on the CPU (docs/checkpoints.md
# "Hugging Face GPT-2"). Too heavy for `make test` (torch and transformers from PyPI: a few GB),
# so it has its own target; the venv is made once under BUILD/hf-venv and reused.
#   1. export     a model trained 20 steps at t2 p2 (vocabulary 300, padded), saved and exported:
#                 GPT2LMHeadModel's logits on the folder against `ptdp forward --checkpoint`'s
#                 within 1e-4 (fp32), its loss against ptdp's
#   2. init-from  a random GPT2LMHeadModel (vocabulary 257, n_positions 64; every weight, bias and
#                 LayerNorm random) saved by save_pretrained: `ptdp train --init-from` at t2 p2 and
#                 in one process (seq_len 32): the first-step losses equal transformers' loss on
#                 that batch within 1e-5 (relative), and `ptdp forward --hf`'s logits its within 1e-4
#   3. untied     the same with tie_word_embeddings false (lm_head.weight) and n_inner 96
#   4. plan       `ptdp plan --model` on transformers' config.json, then 3 steps at t2 p2 from it
#   5. llama      a Llama-style model (RMSNorm, rotary embeddings with Llama 3.1's scaling of an
#                 original length of 16, 4 query heads over 2 key/value heads, SwiGLU, no biases,
#                 untied) trained 20 steps at t2 p2, exported with
#                 `--to hf-llama`: LlamaForCausalLM's logits against `ptdp forward --checkpoint`'s
#                 within 1e-4, its loss against ptdp's (docs/llama.md); and the same checkpoint
#                 exported in bf16 shards (--dtype bf16 --max-shard-size 1MB) loaded by transformers,
#                 within bf16's rounding of the weights (logits 5e-2, loss 1e-2)
#   6. llama-init a random LlamaForCausalLM (6 query heads over 2 key/value heads, rope_theta
#                 500000 with Llama 3.1's scaling of an original length of 16, which changes
#                 every pair's angles at s 32; every weight and norm random; saved in 400 KB shards
#                 with their model.safetensors.index.json) trained by ptdp from its folder at t1
#                 p1 and t2 p2:
#                 first-step losses against transformers' loss, `ptdp forward --hf`'s logits
#   7. mistral-init the same for a random MistralForCausalLM without a sliding window at t2 p2
#   8. qwen2-init   the same for a random Qwen2ForCausalLM (biases on q, k and v; rms_norm_eps 1e-6)
#   9. qwen3-init   the same for a random Qwen3ForCausalLM (QK norms, heads of 24 at hidden 64,
#                   rms_norm_eps 1e-6)
#  10. qwen3        a Qwen3-style model trained 20 steps at t2 p2, exported with `--to hf-qwen3`:
#                   Qwen3ForCausalLM's logits against `ptdp forward --checkpoint`'s, and its loss
#  11. qwen2        the same for a Qwen2-style model (biases on q, k and v) with `--to hf-qwen2`
#  12. llama3.2-init check 7's for a random tied LlamaForCausalLM with Llama 3.2's RoPE scaling
#                   (factor 32, original length 16): the tied embedding split over the pipeline
#  13. mistral-window-init check 7's for a random MistralForCausalLM with sliding_window 6 at s 32
#                   (each query and the 5 keys before it)
#  14. mistral      a Mistral-style model (window 9 keys) trained 20 steps at t2 p2, exported with
#                   `--to hf-mistral`: MistralForCausalLM's logits and loss against ptdp's
#  15. nemotron-init check 7's for a random NemotronForCausalLM (LayerNorm1P with random weights
#                   and biases, squared ReLU, RoPE on half of each head of 16)
#  16. nemotron     a Nemotron-style model trained 20 steps at t2 p2, exported with
#                   `--to hf-nemotron`: NemotronForCausalLM's logits and loss against ptdp's
#  17. qwen3-moe    a Qwen3-MoE-style model (one dense layer, then 4 experts of 48, top 2; QK
#                   norms) trained 20 steps at t2 p2 with sequence parallelism, exported with
#                   `--to hf-qwen3-moe`: Qwen3MoeForCausalLM's logits and loss against ptdp's
#  18. mixtral      a Mixtral-style model (4 experts of 48, top 2, on every layer; no QK norms)
#                   trained the same way, exported with `--to hf-mixtral`: MixtralForCausalLM's
#                   logits and loss against ptdp's
#  19. qwen3-moe-pre  check 17's model with pre-softmax routing (moe_router_pre_softmax: the top
#                   2's full-softmax values, unrenormalised), exported with norm_topk_prob false
#  20. qwen2-moe    a Qwen2-MoE-style model (Qwen2's bias on q, k and v; one dense layer, then 4
#                   experts of 48, top 2, beside a shared expert of 32 with its sigmoid gate;
#                   norm_topk_prob false) trained 20 steps at t2 p2 with sequence parallelism,
#                   exported with `--to hf-qwen2-moe`: Qwen2MoeForCausalLM's logits and loss
#                   against ptdp's; then read back (--init-from, lr 0) and exported byte for byte
#  21. glm4-moe     a GLM-4.5-style model (Glm4MoeForCausalLM: q, k, v biases, RoPE on half of each
#                   head, one dense layer, then 4 experts of 48, top 2 from the better of 2 groups,
#                   beside a shared expert of 48; DeepSeek-V3's router: sigmoid scores scaled by
#                   2.5 and the expert bias, moved by 0.01 a step) trained 20 steps at t2 p2 with
#                   sequence parallelism, exported with `--to hf-glm4-moe` (the bias as
#                   e_score_correction_bias): Glm4MoeForCausalLM's logits and loss against ptdp's;
#                   then read back (--init-from, lr 0 and bias rate 0) and exported byte for byte
#  22. deepseek-v3  a DeepSeek-V3-style model (DeepseekV3ForCausalLM: multi-latent attention with
#                   a query latent of 24 and a key/value latent of 20, heads of 24 + 8 query/key
#                   and 16 value features; check 21's router and mixture; one prediction depth)
#                   trained 20 steps at t2 p2 with sequence parallelism, exported with
#                   `--to hf-deepseek-v3` (rope_interleave false): DeepseekV3ForCausalLM's logits
#                   and loss against ptdp's; then read back and exported byte for byte
#  23. deepseek-v3-init  a random DeepseekV3ForCausalLM made by transformers (rope_interleave
#                   true: DeepSeek's interleaved rotated rows; weights 0.1, so a wrong pairing of
#                   them moves the logits by about 3) read by `ptdp forward --hf` and trained from
#                   at t2 p2 with sequence parallelism: the logits, the forward's and the first
#                   step's losses against transformers'. Both DeepSeek checks turn by YaRN (factor
#                   4 over an original 16 positions): 22 with DeepSeek-V3's mscales (1 and 1), 23
#                   with 0.9 and 1.1, so that cos and sin are scaled too; the softmax by
#                   mscale(4, mscale_all_dim)^2 in both
#  24. deepseek-v3-fp8  (run right after 23) check 23's model stored as DeepSeek-V3's released
#                   folders are (hf_check.py fp8: every Linear weight in F8_E4M3 blocks of 16 x 16,
#                   ragged at the edges, beside its float32 _scale_inv; quantization_config fp8)
#                   read by `ptdp forward --hf` and trained from at t2 p2: the logits and losses
#                   against transformers' on the same weights dequantized in float32
#  25. qwen3-yarn-init  check 9's with YaRN (factor 4, original 16, no mscale keys: cos and sin
#                   scaled by 0.1 ln 4 + 1, the softmax not)
# Prints PASS/FAIL lines; exit 1 on any FAIL.
# usage: bench/hf/hf_check.sh PTDP BUILD_DIR   (PTDP_HF_PIP_ARGS: extra pip arguments, e.g. an index)
set -uo pipefail
ptdp=$(realpath "${1:?usage: hf_check.sh PTDP BUILD_DIR}")
build=$(realpath "${2:?usage: hf_check.sh PTDP BUILD_DIR}")
here=$(cd "$(dirname "$0")" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1
venv=$build/hf-venv
py=$venv/bin/python
if ! "$py" -c "import torch, transformers, safetensors" 2> /dev/null; then
  echo "== installing torch, transformers and safetensors into $venv (once)"
  python3 -m venv "$venv" || exit 2
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q ${PTDP_HF_PIP_ARGS:-} torch transformers safetensors || exit 2
fi
"$py" -c "import torch, transformers; print('torch', torch.__version__, '| transformers', transformers.__version__)"
work=$build/hf-check
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 2
failed=0
check() { "$@" | tee -a summary.txt; [ "${PIPESTATUS[0]}" -eq 0 ] || failed=1; }
die() { echo "FAIL: $*" | tee -a summary.txt; exit 1; }
text=/usr/share/common-licenses/GPL-3
[ -f "$text" ] || text="$here/hf_check.py"
"$ptdp" tokenize --in "$text" --out data.bin > /dev/null || die "tokenize"
# $arch: more model keys; $layout: more layout keys (a window needs fused attention).
plan() {  # NAME TP PP LAYERS HIDDEN HEADS SEQ VOCAB DROPOUT [FFN TIED]
  local g=$(($2 * $3))
  cat > "$1.json" <<JSON
{"ptdp_plan_version": 2,
 "model": {"name": "$1", "layers": $4, "hidden": $5, "heads": $6, "seq_len": $7, "vocab": $8,
           "dropout": $9, "ffn_hidden": ${10:-0}, "tied_embeddings": ${11:-true}${arch:-}},
 "cluster": {"name": "cpu", "gpus": $g, "gpus_per_node": $g},
 "global_batch": 8,
 "layout": {"tp": $2, "pp": $3, "dp": 1, "mbs": 2, "vp": 1, "schedule": "1f1b",
            "recompute": "none", "scatter_gather": true, "precision": "fp32"${layout:-}}}
JSON
  "$ptdp" schedule --plan "$1.json" --out "$1.json" > /dev/null || die "plan $1"
}
train() {  # NP PLAN [flags]: output in PLAN.out
  local np=$1 name=$2
  shift 2
  timeout 600 mpirun -np "$np" --oversubscribe "$ptdp" train --plan "$name.json" --data data.bin \
    "$@" > "$name.out" 2>&1 || { cat "$name.out"; die "ptdp train --plan $name.json $*"; }
}
first_loss() { grep -o '"step":1,"loss":[^,]*' "$1" | cut -d: -f3; }
forward_loss() { sed -n 's/.*loss \([0-9.]*\) nats.*/\1/p' "$1"; }

echo "== 1. export: a model trained at t2 p2, exported, loaded by GPT2LMHeadModel"
plan trained 2 2 4 128 4 64 300 0.1
train 4 trained --steps 20 --lr 3e-3 --save ck
"$ptdp" export --checkpoint ck --to hf-gpt2 exported | tee -a summary.txt || die "export"
"$ptdp" forward --checkpoint ck --data data.bin --step 21 --global-batch 8 --out ptdp1.bin \
  --batch-out batch1.bin > fwd1.out 2>&1 || { cat fwd1.out; die "ptdp forward --checkpoint"; }
cat fwd1.out
check "$py" "$here/hf_check.py" compare exported batch1.bin 64 ptdp1.bin \
  --loss "ptdp-forward=$(forward_loss fwd1.out)"

for variant in tied untied; do
  if [ $variant = tied ]; then
    echo "== 2. init-from: a random GPT2LMHeadModel (vocabulary 257) trained by ptdp"
    extra=() ffn=0 tied=true
  else
    echo "== 3. untied: tie_word_embeddings false, n_inner 96"
    extra=(--untied --inner 96) ffn=96 tied=false
  fi
  hf=random-$variant
  "$py" "$here/hf_check.py" random "$hf" --layers 2 --hidden 64 --heads 4 --positions 64 \
    --vocab 257 "${extra[@]}" | tee -a summary.txt || die "making the random model"
  ls "$hf"
  plan "one-$variant" 1 1 2 64 4 32 257 0.0 $ffn $tied
  plan "tp-$variant" 2 2 2 64 4 32 257 0.0 $ffn $tied
  train 1 "one-$variant" --steps 2 --init-from "$hf" --log "one-$variant.jsonl"
  train 4 "tp-$variant" --steps 2 --init-from "$hf" --log "tp-$variant.jsonl"
  "$ptdp" forward --hf "$hf" --data data.bin --step 1 --global-batch 8 --seq-len 32 \
    --out "ptdp-$variant.bin" --batch-out "batch-$variant.bin" > "fwd-$variant.out" 2>&1 \
    || { cat "fwd-$variant.out"; die "ptdp forward --hf"; }
  cat "fwd-$variant.out"
  check "$py" "$here/hf_check.py" compare "$hf" "batch-$variant.bin" 32 "ptdp-$variant.bin" \
    --loss "train-t1p1-step1=$(first_loss "one-$variant.jsonl")" \
    --loss "train-t2p2-step1=$(first_loss "tp-$variant.jsonl")" \
    --loss "ptdp-forward=$(forward_loss "fwd-$variant.out")"
done

echo "== 4. the user's path: ptdp plan --model <folder>/config.json, then train --init-from <folder>"
if "$ptdp" plan --model random-tied/config.json --cluster cpu --gpus 4 --global-batch 8 \
     --fix tp=2,pp=2,dp=1,mbs=2,schedule=1f1b,recompute=none --software ptdp --out planned.json > planned.out 2>&1; then
  if timeout 600 mpirun -np 4 --oversubscribe "$ptdp" train --plan planned.json --data data.bin \
       --steps 3 --init-from random-tied --log planned.jsonl > planned-train.out 2>&1; then
    echo "PASS plan + train: ptdp plan read transformers' config.json (seq_len 64 = n_positions);" \
      "t2 p2 trained 3 steps from the folder, losses $(grep -o '"loss":[^,]*' planned.jsonl |
      cut -d: -f2 | tr '\n' ' ')" | tee -a summary.txt
  else
    cat planned-train.out
    echo "FAIL plan + train: ptdp train --init-from with the planned plan" | tee -a summary.txt
    failed=1
  fi
else
  cat planned.out
  echo "FAIL plan + train: ptdp plan --model random-tied/config.json" | tee -a summary.txt
  failed=1
fi

# A model of the family the plan's `arch` keys describe (4 layers, 4 heads, s 64, vocabulary 300,
# untied) trained 20 steps at t2 p2, exported with `--to FORMAT` and loaded by transformers: its
# logits against `ptdp forward --checkpoint`'s, and its loss.
export_check() {  # NAME FORMAT HIDDEN FFN
  local name=$1
  plan "$name" 2 2 4 "$3" 4 64 300 0.1 "$4" false
  arch=
  train 4 "$name" --steps 20 --lr 3e-3 --save "ck-$name"
  "$ptdp" export --checkpoint "ck-$name" --to "$2" "exported-$name" | tee -a summary.txt ||
    die "export --to $2"
  "$ptdp" forward --checkpoint "ck-$name" --data data.bin --step 21 --global-batch 8 \
    --out "ptdp-$name.bin" --batch-out "batch-$name.bin" > "fwd-$name.out" 2>&1 ||
    { cat "fwd-$name.out"; die "ptdp forward --checkpoint ($name)"; }
  cat "fwd-$name.out"
  check "$py" "$here/hf_check.py" compare "exported-$name" "batch-$name.bin" 64 "ptdp-$name.bin" \
    --loss "ptdp-forward=$(forward_loss "fwd-$name.out")"
}
# export_check's folder read back (--init-from, lr 0), saved and exported again: the same bytes.
round_trip() {  # NAME FORMAT LABEL
  train 4 "$1" --steps 1 --init-from "exported-$1" --lr 0 --min-lr 0 --save "ck-$1-back"
  "$ptdp" export --checkpoint "ck-$1-back" --to "$2" "back-$1" > /dev/null ||
    die "export of the read-back $3"
  if cmp -s "exported-$1/model.safetensors" "back-$1/model.safetensors"; then
    echo "PASS $3 round trip: --init-from and export again, byte for byte" | tee -a summary.txt
  else
    echo "FAIL $3 round trip: model.safetensors differs" | tee -a summary.txt
    failed=1
  fi
}
echo "== 5. llama: a Llama-3.1-style model trained at t2 p2, exported, loaded by LlamaForCausalLM"
arch=', "kv_heads": 2, "rmsnorm": true, "rotary": true, "swiglu": true, "linear_bias": false,
           "rope_scaling_factor": 8, "rope_low_freq_factor": 1, "rope_high_freq_factor": 4,
           "rope_original_max_positions": 16'
export_check llama hf-llama 128 352
# The same checkpoint as Hugging Face ships checkpoints: bf16 weights in shards with their index.
# transformers loads the folder; its logits and loss are the fp32 model's within what rounding
# every weight to bf16 (relative 2^-9) moves them.
"$ptdp" export --checkpoint ck-llama --to hf-llama --dtype bf16 --max-shard-size 1MB \
  exported-llama-bf16 | tee -a summary.txt || die "export --dtype bf16 --max-shard-size 1MB"
check "$py" "$here/hf_check.py" compare exported-llama-bf16 batch-llama.bin 64 ptdp-llama.bin \
  --loss "ptdp-forward-fp32=$(forward_loss fwd-llama.out)" --logit-tol 5e-2 --loss-tol 1e-2

echo "== 6. llama-init: a random LlamaForCausalLM trained by ptdp from its folder"
"$py" "$here/hf_check.py" random random-llama --llama --layers 2 --hidden 96 --heads 6 \
  --kv-heads 2 --positions 64 --vocab 257 --inner 160 --untied --rope-theta 500000 \
  --rope-scaling 8,1,4,16 --max-shard-size 400KB |
  tee -a summary.txt || die "making the random Llama"
ls random-llama
arch=', "kv_heads": 2, "rmsnorm": true, "rotary": true, "swiglu": true, "linear_bias": false,
           "rotary_base": 500000, "rope_scaling_factor": 8, "rope_low_freq_factor": 1,
           "rope_high_freq_factor": 4, "rope_original_max_positions": 16'
plan one-llama 1 1 2 96 6 32 257 0.0 160 false
plan tp-llama 2 2 2 96 6 32 257 0.0 160 false
arch=
train 1 one-llama --steps 2 --init-from random-llama --log one-llama.jsonl
train 4 tp-llama --steps 2 --init-from random-llama --log tp-llama.jsonl
"$ptdp" forward --hf random-llama --data data.bin --step 1 --global-batch 8 --seq-len 32 \
  --out ptdp-llama-init.bin --batch-out batch-llama-init.bin > fwd-llama-init.out 2>&1 ||
  { cat fwd-llama-init.out; die "ptdp forward --hf (llama)"; }
cat fwd-llama-init.out
check "$py" "$here/hf_check.py" compare random-llama batch-llama-init.bin 32 ptdp-llama-init.bin \
  --loss "train-t1p1-step1=$(first_loss one-llama.jsonl)" \
  --loss "train-t2p2-step1=$(first_loss tp-llama.jsonl)" \
  --loss "ptdp-forward=$(forward_loss fwd-llama-init.out)"

# A random FAMILY model (2 layers, h 64, 4 heads over 2, SwiGLU 112, untied, rope_theta 1e6) made
# by transformers, trained by ptdp from its folder at t2 p2 and compared. EXTRA: the plan's model
# keys beyond Llama's; PYARGS: hf_check.py random's arguments beyond them; NAME (default FAMILY)
# names its files; TIED (default false): tied embeddings.
family_init() {  # FAMILY EXTRA [PYARGS] [NAME] [TIED]
  local name=${4:-$1} tied=${5:-false} untied=--untied
  [ "$tied" = true ] && untied=
  # shellcheck disable=SC2086
  "$py" "$here/hf_check.py" random "random-$name" "--$1" --layers 2 --hidden 64 --heads 4 \
    --kv-heads 2 --positions 64 --vocab 257 --inner 112 $untied --rope-theta 1000000 ${3:-} |
    tee -a summary.txt || die "making the random $name model"
  local norm_mlp='"rmsnorm": true, "swiglu": true'
  [ "$1" = nemotron ] && norm_mlp='"rmsnorm": false, "swiglu": false'
  arch=", \"kv_heads\": 2, $norm_mlp, \"rotary\": true,
           \"linear_bias\": false, \"rotary_base\": 1000000$2"
  plan "tp-$name" 2 2 2 64 4 32 257 0.0 112 "$tied"
  arch=
  train 4 "tp-$name" --steps 2 --init-from "random-$name" --log "tp-$name.jsonl"
  "$ptdp" forward --hf "random-$name" --data data.bin --step 1 --global-batch 8 --seq-len 32 \
    --out "ptdp-$name.bin" --batch-out "batch-$name.bin" > "fwd-$name.out" 2>&1 ||
    { cat "fwd-$name.out"; die "ptdp forward --hf ($name)"; }
  check "$py" "$here/hf_check.py" compare "random-$name" "batch-$name.bin" 32 "ptdp-$name.bin" \
    --loss "train-t2p2-step1=$(first_loss "tp-$name.jsonl")" \
    --loss "ptdp-forward=$(forward_loss "fwd-$name.out")"
}
echo "== 7. mistral-init: a random MistralForCausalLM (no sliding window) trained by ptdp"
family_init mistral ""
echo "== 8. qwen2-init: a random Qwen2ForCausalLM (q, k, v biases, rms_norm_eps 1e-6) trained by ptdp"
family_init qwen2 ', "qkv_bias": true, "norm_eps": 1e-6'
qwen3_keys=', "head_dim": 24, "qk_norm": true, "norm_eps": 1e-6'
echo "== 9. qwen3-init: a random Qwen3ForCausalLM (QK norms, head_dim 24 at hidden 64) trained by ptdp"
family_init qwen3 "$qwen3_keys" "--head-dim 24"

echo "== 10. qwen3: a Qwen3-style model trained at t2 p2, exported, loaded by Qwen3ForCausalLM"
arch=", \"kv_heads\": 2, \"rmsnorm\": true, \"rotary\": true, \"swiglu\": true,
           \"linear_bias\": false, \"rotary_base\": 1000000$qwen3_keys"
export_check qwen3 hf-qwen3 64 176

echo "== 11. qwen2: a Qwen2-style model trained at t2 p2, exported, loaded by Qwen2ForCausalLM"
arch=", \"kv_heads\": 2, \"rmsnorm\": true, \"rotary\": true, \"swiglu\": true,
           \"linear_bias\": false, \"rotary_base\": 1000000, \"qkv_bias\": true, \"norm_eps\": 1e-6"
export_check qwen2 hf-qwen2 64 176

echo "== 12. llama3.2-init: a random tied LlamaForCausalLM with Llama 3.2's RoPE scaling (factor 32)"
family_init llama ', "rope_scaling_factor": 32, "rope_low_freq_factor": 1,
           "rope_high_freq_factor": 4, "rope_original_max_positions": 16' \
  "--rope-scaling 32,1,4,16" llama32 true

echo "== 13. mistral-window-init: a random MistralForCausalLM with sliding_window 6 trained by ptdp"
layout=', "fused_attention": true'
family_init mistral ', "window_size": 5' "--sliding-window 6" mistral-window

echo "== 14. mistral: a Mistral-style model (window 9) trained at t2 p2, exported, loaded by MistralForCausalLM"
arch=", \"kv_heads\": 2, \"rmsnorm\": true, \"rotary\": true, \"swiglu\": true,
           \"linear_bias\": false, \"rotary_base\": 1000000, \"window_size\": 9"
export_check mistral hf-mistral 64 176
layout=

nemotron_keys=', "squared_relu": true, "layernorm_1p": true, "rotary_percent": 0.5'
echo "== 15. nemotron-init: a random NemotronForCausalLM (LayerNorm1P, squared ReLU, half-turned RoPE) trained by ptdp"
family_init nemotron "$nemotron_keys"

echo "== 16. nemotron: a Nemotron-style model trained at t2 p2, exported, loaded by NemotronForCausalLM"
arch=", \"kv_heads\": 2, \"rotary\": true, \"linear_bias\": false, \"rotary_base\": 1000000$nemotron_keys"
export_check nemotron hf-nemotron 64 176

echo "== 17. qwen3-moe: a Qwen3-MoE-style model trained at t2 p2, exported, loaded by Qwen3MoeForCausalLM"
arch=", \"kv_heads\": 2, \"rmsnorm\": true, \"rotary\": true, \"swiglu\": true,
           \"linear_bias\": false, \"rotary_base\": 1000000$qwen3_keys, \"moe_experts\": 4,
           \"moe_topk\": 2, \"moe_ffn_hidden\": 48, \"moe_dense_layers\": 1"
layout=', "sequence_parallel": true'
export_check qwen3moe hf-qwen3-moe 64 176
echo "== 18. mixtral: a Mixtral-style model trained at t2 p2, exported, loaded by MixtralForCausalLM"
arch=", \"kv_heads\": 2, \"rmsnorm\": true, \"rotary\": true, \"swiglu\": true,
           \"linear_bias\": false, \"rotary_base\": 1000000, \"norm_eps\": 1e-6, \"moe_experts\": 4,
           \"moe_topk\": 2"
export_check mixtral hf-mixtral 64 48
echo "== 19. qwen3-moe-pre: check 17's model with pre-softmax routing (norm_topk_prob false)"
arch=", \"kv_heads\": 2, \"rmsnorm\": true, \"rotary\": true, \"swiglu\": true,
           \"linear_bias\": false, \"rotary_base\": 1000000$qwen3_keys, \"moe_experts\": 4,
           \"moe_topk\": 2, \"moe_ffn_hidden\": 48, \"moe_dense_layers\": 1,
           \"moe_router_pre_softmax\": true"
layout=', "sequence_parallel": true'
export_check qwen3moepre hf-qwen3-moe 64 176
grep -q '"norm_topk_prob": false' exported-qwen3moepre/config.json ||
  die "check 19's config.json has no norm_topk_prob false"
echo "== 20. qwen2-moe: a Qwen2-MoE-style model (gated shared expert) trained at t2 p2, exported, loaded by Qwen2MoeForCausalLM"
arch=", \"kv_heads\": 2, \"rmsnorm\": true, \"rotary\": true, \"swiglu\": true,
           \"linear_bias\": false, \"qkv_bias\": true, \"rotary_base\": 1000000,
           \"norm_eps\": 1e-6, \"moe_experts\": 4, \"moe_topk\": 2, \"moe_ffn_hidden\": 48,
           \"moe_dense_layers\": 1, \"moe_shared_ffn_hidden\": 32, \"moe_shared_gate\": true,
           \"moe_router_pre_softmax\": true"
layout=', "sequence_parallel": true'
export_check qwen2moe hf-qwen2-moe 64 176
round_trip qwen2moe hf-qwen2-moe qwen2-moe
echo "== 21. glm4-moe: a GLM-4.5-style model (DeepSeek-V3's router) trained at t2 p2, exported, loaded by Glm4MoeForCausalLM"
arch=", \"kv_heads\": 2, \"rmsnorm\": true, \"rotary\": true, \"rotary_percent\": 0.5,
           \"swiglu\": true, \"linear_bias\": false, \"qkv_bias\": true, \"rotary_base\": 1000000,
           \"moe_experts\": 4, \"moe_topk\": 2, \"moe_ffn_hidden\": 48, \"moe_dense_layers\": 1,
           \"moe_shared_ffn_hidden\": 48, \"moe_router_groups\": 2, \"moe_router_group_topk\": 1,
           \"moe_router_sigmoid\": true, \"moe_router_topk_scale\": 2.5,
           \"moe_router_expert_bias\": true, \"moe_router_bias_rate\": 0.01"
layout=', "sequence_parallel": true'
export_check glm hf-glm4-moe 64 176
# Read back without moving anything: the learning rate and the bias's rate 0.
"$py" - glm.json <<'PY' || die "plan glm with bias rate 0"
import json, sys
p = json.load(open(sys.argv[1]))
p["model"]["moe_router_bias_rate"] = 0
json.dump(p, open(sys.argv[1], "w"))
PY
round_trip glm hf-glm4-moe glm4-moe
echo "== 22. deepseek-v3: a DeepSeek-V3-style model (multi-latent attention) trained at t2 p2, exported, loaded by DeepseekV3ForCausalLM"
arch=", \"rmsnorm\": true, \"rotary\": true, \"swiglu\": true, \"linear_bias\": false,
           \"qk_norm\": true, \"norm_eps\": 1e-6, \"head_dim\": 24, \"mla_q_lora\": 24,
           \"mla_kv_lora\": 20,
           \"mla_rope_dim\": 8, \"mla_v_dim\": 16, \"moe_experts\": 4, \"moe_topk\": 2,
           \"moe_ffn_hidden\": 48, \"moe_dense_layers\": 1, \"moe_shared_ffn_hidden\": 48,
           \"moe_router_groups\": 2, \"moe_router_group_topk\": 1, \"moe_router_sigmoid\": true,
           \"moe_router_topk_scale\": 2.5, \"moe_router_expert_bias\": true,
           \"moe_router_bias_rate\": 0.01, \"mtp_layers\": 1, \"rope_scaling_type\": \"yarn\",
           \"rope_scaling_factor\": 4, \"rope_original_max_positions\": 16,
           \"rope_yarn_mscale\": 1, \"rope_yarn_mscale_all_dim\": 1"
layout=', "sequence_parallel": true'
export_check deepseek hf-deepseek-v3 64 176
"$py" - deepseek.json <<'PY' || die "plan deepseek with bias rate 0"
import json, sys
p = json.load(open(sys.argv[1]))
p["model"]["moe_router_bias_rate"] = 0
json.dump(p, open(sys.argv[1], "w"))
PY
round_trip deepseek hf-deepseek-v3 deepseek-v3
echo "== 23. deepseek-v3-init: a random DeepseekV3ForCausalLM (interleaved rotated rows) read and trained by ptdp"
"$py" "$here/hf_check.py" random random-deepseek --deepseek --layers 2 --hidden 64 --heads 4 \
  --positions 64 --vocab 257 --inner 112 --untied --rope-theta 1000000 --yarn 4,16,0.9,1.1 |
  tee -a summary.txt ||
  die "making the random DeepSeek-V3 model"
arch=", \"rmsnorm\": true, \"rotary\": true, \"swiglu\": true, \"linear_bias\": false,
           \"rotary_base\": 1000000, \"qk_norm\": true, \"norm_eps\": 1e-6, \"head_dim\": 24,
           \"mla_q_lora\": 24, \"mla_kv_lora\": 20, \"mla_rope_dim\": 8, \"mla_v_dim\": 16,
           \"moe_experts\": 4, \"moe_topk\": 2, \"moe_ffn_hidden\": 48, \"moe_dense_layers\": 1,
           \"moe_shared_ffn_hidden\": 48, \"moe_router_groups\": 2, \"moe_router_group_topk\": 1,
           \"moe_router_sigmoid\": true, \"moe_router_topk_scale\": 2.5,
           \"moe_router_expert_bias\": true, \"rope_scaling_type\": \"yarn\",
           \"rope_scaling_factor\": 4, \"rope_original_max_positions\": 16,
           \"rope_yarn_mscale\": 0.9, \"rope_yarn_mscale_all_dim\": 1.1"
plan tp-deepseek 2 2 2 64 4 32 257 0.0 112 false
arch=
train 4 tp-deepseek --steps 2 --init-from random-deepseek --log tp-deepseek.jsonl
"$ptdp" forward --hf random-deepseek --data data.bin --step 1 --global-batch 8 --seq-len 32 \
  --out ptdp-deepseek.bin --batch-out batch-deepseek.bin > fwd-deepseek.out 2>&1 ||
  { cat fwd-deepseek.out; die "ptdp forward --hf (deepseek)"; }
cat fwd-deepseek.out
check "$py" "$here/hf_check.py" compare random-deepseek batch-deepseek.bin 32 ptdp-deepseek.bin \
  --loss "train-t2p2-step1=$(first_loss tp-deepseek.jsonl)" \
  --loss "ptdp-forward=$(forward_loss fwd-deepseek.out)"
echo "== 24. deepseek-v3-fp8: check 23's model stored as DeepSeek-V3's released weights (F8_E4M3 blocks of 16 x 16 and their scales) read and trained by ptdp"
check "$py" "$here/hf_check.py" fp8 random-deepseek fp8-deepseek dequant-deepseek --block 16,16
train 4 tp-deepseek --steps 2 --init-from fp8-deepseek --log tp-fp8.jsonl
"$ptdp" forward --hf fp8-deepseek --data data.bin --step 1 --global-batch 8 --seq-len 32 \
  --out ptdp-fp8.bin --batch-out batch-fp8.bin > fwd-fp8.out 2>&1 ||
  { cat fwd-fp8.out; die "ptdp forward --hf (fp8)"; }
check "$py" "$here/hf_check.py" compare dequant-deepseek batch-fp8.bin 32 ptdp-fp8.bin \
  --loss "train-t2p2-step1=$(first_loss tp-fp8.jsonl)" --loss "ptdp-forward=$(forward_loss fwd-fp8.out)"
layout=
echo "== 25. qwen3-yarn-init: a random Qwen3ForCausalLM with YaRN (factor 4, original 16) trained by ptdp"
family_init qwen3 "$qwen3_keys"', "rope_scaling_type": "yarn", "rope_scaling_factor": 4,
           "rope_original_max_positions": 16' "--head-dim 24 --yarn 4,16,0,0" qwen3-yarn

echo "== summary ($work/summary.txt)"
grep -E "^(PASS|FAIL)" summary.txt
if [ $failed -ne 0 ]; then
  echo "hf-check: FAIL"
  exit 1
fi
echo "hf-check: PASS"
