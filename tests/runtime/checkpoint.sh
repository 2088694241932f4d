#!/usr/bin/env bash
# Checkpoints under mpirun (docs/checkpoints.md). Every case that compares against it first trains
# the reference: 8 uninterrupted steps of a 4-layer model with dropout in layout A (t2 p2 d1, 1F1B).
# (resume_fp16, reshard_padding and preempt train their own; the damaged-checkpoint cases need none.)
#   resume_exact        A, stop after step 4 (saves at 2 and 4), resume with --load latest: the
#                       per-step losses of steps 5..8, the whole --log and the final saved state
#                       (weights, Adam m and v) equal the uninterrupted run's bit for bit
#   resume_fp16         the same in fp16 with an overflow before the save: loss scale state restored
#   reshard_tpd         A's step-4 checkpoint loaded by t1 p1 d4: losses within 1e-5 (relative)
#   reshard_interleaved A's checkpoint loaded by t1 p2 d2 interleaved (v2); that layout's own
#                       checkpoint loaded by t2 p1 d2 1F1B: losses within 1e-5
#   reshard_zbv         A's step-4 checkpoint loaded by t1 p2 d2 ZB-V (the V placement, head on
#                       rank 0); that layout's step-6 checkpoint loaded by A: losses within 1e-5
#   reshard_padding     vocabulary 300, padded to 384 rows at t1 and 512 at t2: t1 d2 -> t2 d1 (rows
#                       the writer lacks keep their initial values) and back, losses within 1e-5
#   reshard_uneven      A's step-3 checkpoint (layers 2/2) loaded by t1 p2 d2 with uneven stages
#                       1/3; its step-5 checkpoint by t1 p3 d1 with 1/2/1; its step-7 one by A
#                       again: losses within 1e-5 at every hop
#   reshard_uneven_interleaved  6 layers: t2 p2 d1 (3/3) saves at step 3, t1 p2 d2 interleaved vp 2
#                       with short ends (chunks 1+2 / 2+1) loads it and saves at step 5, t2 p2 d1
#                       loads that: losses within 1e-5 of t2 p2 d1's uninterrupted run at every hop
#   resume_distopt      bf16 with the distributed optimizer (t2 p1 d2, vocabulary 300: the masters,
#                       m and v sharded over d, padding rows): a first half started with --load
#                       latest on an empty folder, stopped after step 4, resumed: steps 1..8 and
#                       the final saved state bit-identical to the uninterrupted run
#   reshard_distopt     fp32, vocabulary 300: t1 p1 d2 without it saves at step 3, t2 p1 d2 with
#                       the distributed optimizer (more padded rows, moments sharded) loads it and
#                       saves at step 6, t1 p1 d2 loads that: losses within 1e-5 at every hop
#   reshard_cp          fp32, vocabulary 300: t1 p1 d2 saves at step 3, cp 2 d2 with the distributed
#                       optimizer (state sharded over d cp = 4 ranks) loads it and saves at step 6,
#                       t1 p1 d2 loads that: losses within 1e-5 at every hop
#   reshard_moe         a mixture of experts (write_plan.sh PTDP_TEST_ARCH=moe: a dense layer, then
#                       4 experts of 48, top 2): t2 p2 d1 with sequence parallelism (each expert
#                       split over t) saves at step 3, t1 p1 d2 loads it and saves at step 6, t2 p2
#                       d1 loads that: losses within 1e-5 at every hop; `ptdp export --to hf-llama`
#                       refuses it by name; `--to hf-qwen3-moe` writes Qwen3-MoE's folder, which
#                       `--init-from` reads back byte for byte, but with norm_topk_prob false
#                       (pre-softmax routing) not into this plan's renormalising router
#   expert_bias         DeepSeek-V3's kind (write_plan.sh PTDP_TEST_ARCH=deepseek: its latent attention,
#                       prediction depth and router, sigmoid scores and the
#                       expert bias the step moves) at t1 d4 ep 2: the manifest holds every mixture
#                       layer's bias, moved off zero; a resume bit for bit (a bias lost would route
#                       otherwise); its step-3 checkpoint loaded by t2 p2 d2 ep 2 and back within
#                       1e-5, and a --switch-plan to ep 4 after step 3 within 1e-5 of the
#                       unswitched run; `ptdp forward` of a no-dropout run's step-3 checkpoint
#                       gives training's step-4 loss (so forward routes with the bias); a manifest
#                       without the bias refused by name
#   hf_glm              GLM-4.5's kind (write_plan.sh PTDP_TEST_ARCH=glm) at t2 p2 d1 with sequence
#                       parallelism, 3 steps: `--to hf-glm4-moe` writes every mixture layer's expert
#                       bias as its e_score_correction_bias (F32, the manifest's values, moved off
#                       zero); `ptdp forward --hf` of the folder gives `--checkpoint`'s loss;
#                       --init-from the folder (lr 0, bias rate 0), saved and exported again: byte
#                       for byte; `--to hf-qwen3-moe` refuses it by name
#   reshard_llama       the Llama-style model (write_plan.sh PTDP_TEST_ARCH=llama): t2 p2 d1 (key
#                       and value heads, SwiGLU features and the untied output split over t) saves at
#                       step 3, t1 p1 d2 loads it and saves at step 6, t2 p2 d1 loads that: losses
#                       within 1e-5 at every hop; `ptdp export --to hf-gpt2` refuses the checkpoint;
#                       `--to hf-llama` writes LlamaForCausalLM's tensor names and shapes, a
#                       config.json `ptdp plan --model` reads back as the same model, and a q_proj
#                       that is the query rows of the checkpoint's QKV (bench/hf checks the logits);
#                       `--init-from` that folder at t2 p2 (--lr 0), saved and exported again:
#                       byte-identical; the same from the folder split into 3 shards
#                       (model.safetensors.index.json) and from export's own shards (--max-shard-size
#                       100KB); --dtype bf16 each value rounded to nearest even (check_bf16_export.py);
#                       a shard index naming the wrong file for a tensor, the folder with rms_norm_eps
#                       1e-6 (not the plan's) and a shard size of 5XB refused by name
#   latest_skips        a crashed save (tmp-00000006, partial) and a step-00000005 without a
#                       manifest: --load latest skips them, says why, resumes from step 4 exactly
#   killed              the last rank SIGKILLed inside the save of step 4 (shards written, nothing
#                       published): step-00000002 survives, --load latest resumes from it exactly
#   preempt             SIGTERM to every rank of a 40-step run: it finishes its step, saves and
#                       exits 0; relaunched with --load latest it ends bit-identical to the
#                       uninterrupted 40 steps
#   legacy_fnv          A's step-4 checkpoint with its manifest rewritten as the code before CRC32C
#                       wrote it (each file's "fnv1a64", FNV-1a 64 computed here in Python, in place
#                       of "crc32c"): --load latest resumes from it exactly
#   flip | truncate | missing | model: a flipped byte, a truncated shard, a missing shard, a plan
#                       whose model differs: exit 2 on every rank, one error line naming the file
#                       and the reason, the checkpoint's files unchanged
#   unread              the same for a damaged file that the manifest lists but no piece names (so
#                       no rank reads it for its blocks): one rank checksums it anyway
# usage: checkpoint.sh PTDP WORKDIR CASE
set -uo pipefail
ptdp=$1 work=$2 case=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$(dirname "$0")/lib.sh"  # OpenMPI as root, oversubscribed; fail
fresh_dir_with_data "ckpt-$case"
declare -A ranks
plan() {  # NAME TP PP DP VP SCHEDULE [LAYERS [PRECISION [VOCAB]]]
  ranks[$1]=$(($2 * $3 * $4 * ${PTDP_TEST_CP:-1}))
  "$here/write_plan.sh" "$ptdp" "$1.json" "${7:-4}" 0.1 "${9:-256}" 16 "$2" "$3" "$4" 2 "$5" "$6" none true \
    "${8:-fp32}" || fail "plan $1"
}
train() {  # NAME [flags]: mpirun with the plan's rank count, output in NAME.out
  local name=$1
  shift
  timeout 120 mpirun -np "${ranks[$name]}" --oversubscribe "$ptdp" train --plan "$name.json" --data data.bin \
    --steps "${STEPS:-8}" "$@" > "$name.out" 2>&1
}
fields() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1"; }  # step and loss, exactly as logged
# HOME's reference run; its step-3 checkpoint loaded by AWAY, which saves at step 6; that loaded
# by HOME again: losses within 1e-5 of the reference at both hops.
there_and_back() {  # HOME AWAY WHAT-AWAY WHAT-BACK
  local home=$1 away=$2
  train "$home" --log eref.jsonl || { cat "$home.out"; fail "$home reference"; }
  train "$home" --stop-at 3 --save ck || { cat "$home.out"; fail "$home first part"; }
  train "$away" --stop-at 6 --load ck --save ck2 --expect-losses eref.jsonl --loss-tol 1e-5 \
    || { cat "$away.out"; fail "$3"; }
  grep "losses vs reference" "$away.out"
  train "$home" --load ck2 --expect-losses eref.jsonl --loss-tol 1e-5 \
    || { cat "$home.out"; fail "$4"; }
  grep "losses vs reference" "$home.out"
}
# PLAN resumed from DIR's step-4 checkpoint (its reference in sref.jsonl, its first half's log in
# srun.jsonl): steps 5..8 and the final saved state bit for bit the uninterrupted run's.
resumes_bit_for_bit() {  # PLAN DIR
  local p=$1 dir=$2
  train "$p" --load "$dir" --save "$dir" --expect-losses sref.jsonl --loss-tol 0 --log srun.jsonl \
    || { cat "$p.out"; fail "resumed run"; }
  grep -q "resumed from step 4" "$p.out" || fail "did not resume from step 4"
  cmp <(fields sref.jsonl) <(fields srun.jsonl) || fail "steps 5..8 differ"
  train "$p" --save refck || { cat "$p.out"; fail "uninterrupted save"; }
  for f in refck/step-00000008/*.safetensors; do
    cmp "$f" "$dir/step-00000008/$(basename "$f")" || fail "final state differs: $(basename "$f")"
  done
  echo "steps 5..8 and the final sharded state bit-identical to the uninterrupted run"
}
# `ptdp forward` of a one-rank plan Q without dropout (write_plan.sh's PTDP_TEST_* as set): its
# loss on step 4's batch from Q's step-3 checkpoint (left in fk) is training's step-4 loss within
# 1e-6, so forward computes what training does.
forward_is_train_step4() {
  "$here/write_plan.sh" "$ptdp" Q.json 4 0.0 256 16 1 1 1 2 1 1f1b none true || fail "plan Q"
  ranks[Q]=1
  STEPS=4 train Q --stop-at 3 --save fk || { cat Q.out; fail "first part"; }
  STEPS=4 train Q --load fk --log q.jsonl || { cat Q.out; fail "resumed run"; }
  "$ptdp" forward --checkpoint fk --data data.bin --step 4 --global-batch 16 > f.out 2>&1 ||
    { cat f.out; fail "forward of the step-3 checkpoint"; }
  local a b
  a=$(sed -n 's/.*loss \([0-9.]*\) nats.*/\1/p' f.out)
  b=$(grep -o '"step":4,"loss":[^,]*' q.jsonl | cut -d: -f3)
  echo "step 4: train $b, forward $a"
  awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= 1e-6 * b) }' ||
    fail "forward's loss $a is not train's loss $b at step 4"
}
plan A 2 2 1 1 1f1b
case "$case" in
  resume_fp16 | reshard_padding | reshard_uneven_interleaved | resume_distopt | reshard_distopt \
    | reshard_cp | reshard_llama | reshard_moe | reshard_ep | ep_distopt | forward_moe | expert_bias \
    | hf_glm | preempt \
    | flip | truncate | missing | model | unread) ;;
  *) train A --log ref.jsonl || { cat A.out; fail "reference run"; } ;;
esac

case "$case" in
  resume_exact)
    train A --stop-at 4 --save-every 2 --save ck --log run.jsonl || { cat A.out; fail "first half"; }
    [ -d ck/step-00000002 ] && [ -d ck/step-00000004 ] || fail "checkpoints 2 and 4 missing"
    train A --save-every 2 --save ck --load latest --log run.jsonl --expect-losses ref.jsonl \
      --loss-tol 0 || { cat A.out; fail "resumed run"; }
    grep -q "resumed from step 4" A.out || fail "did not resume from step 4"
    cmp <(fields ref.jsonl) <(fields run.jsonl) || fail "logs differ"
    [ "$(ls ck | tr '\n' ' ')" = "step-00000006 step-00000008 " ] || fail "--keep 2: $(ls ck)"
    # The final state, saved by an uninterrupted run: the same bytes (weights, Adam m and v).
    train A --save refck || { cat A.out; fail "uninterrupted save"; }
    for f in refck/step-00000008/*.safetensors; do
      cmp "$f" "ck/step-00000008/$(basename "$f")" || fail "final state differs: $(basename "$f")"
    done
    echo "steps 5..8 and the final state bit-identical to the uninterrupted run; log continues" ;;
  resume_fp16)
    # fp16 with an overflow at step 2 (skipped, scale halved) and a window of 2: the loss scale, its
    # clean-step count and the skipped count (Adam's step) must all come back.
    plan H 2 2 1 1 1f1b 4 fp16
    fp16=(--inject-overflow-step 2 --loss-scale-window 2)
    train H "${fp16[@]}" --log href.jsonl || { cat H.out; fail "fp16 reference"; }
    train H "${fp16[@]}" --stop-at 5 --save ck || { cat H.out; fail "fp16 first half"; }
    train H "${fp16[@]}" --load ck --expect-losses href.jsonl --loss-tol 0 \
      --log hrun.jsonl || { cat H.out; fail "fp16 resumed"; }
    metrics() { grep -o '"step":[678],.*"skipped_steps":[0-9]*' "$1"; }
    cmp <(metrics href.jsonl) <(metrics hrun.jsonl) \
      || fail "fp16 steps 6..8 differ (loss, grad norm, lr, loss scale or skipped count)" ;;
  reshard_tpd)
    train A --stop-at 4 --save ck || { cat A.out; fail "first half"; }
    plan B 1 1 4 1 1f1b
    train B --load ck --expect-losses ref.jsonl --loss-tol 1e-5 --log b.jsonl \
      || { cat B.out; fail "t1p1d4 resumed"; }
    grep "losses vs reference" B.out ;;
  reshard_interleaved)
    train A --stop-at 4 --save ck || { cat A.out; fail "first half"; }
    plan C 1 2 2 2 interleaved
    train C --stop-at 6 --load ck --save ck2 --expect-losses ref.jsonl --loss-tol 1e-5 \
      || { cat C.out; fail "interleaved resumed"; }
    grep "losses vs reference" C.out
    plan D 2 1 2 1 1f1b
    train D --load ck2/step-00000006 --expect-losses ref.jsonl --loss-tol 1e-5 \
      || { cat D.out; fail "1f1b from interleaved"; }
    grep "losses vs reference" D.out ;;
  reshard_zbv)
    # ZB-V's V: rank 0 holds layers 0 and 3 with the embedding and the head (no tied copy), rank 1
    # layers 1 and 2; checkpoints are by global name, so A's loads into it and its into A.
    train A --stop-at 4 --save ck || { cat A.out; fail "first half"; }
    plan V 1 2 2 2 zb-v
    train V --stop-at 6 --load ck --save ck2 --expect-losses ref.jsonl --loss-tol 1e-5 \
      || { cat V.out; fail "zb-v resumed"; }
    grep "losses vs reference" V.out
    train A --load ck2/step-00000006 --expect-losses ref.jsonl --loss-tol 1e-5 \
      || { cat A.out; fail "1f1b from zb-v"; }
    grep "losses vs reference" A.out ;;
  reshard_padding)
    plan E 1 1 2 1 1f1b 4 fp32 300
    plan F 2 1 1 1 1f1b 4 fp32 300
    there_and_back E F "t2 from t1 (fewer padded rows)" "t1 from t2 (more padded rows)" ;;
  reshard_uneven)
    # write_plan.sh reads the split from the environment (layout.first/last_stage_layers).
    train A --stop-at 3 --save ck || { cat A.out; fail "first part"; }
    PTDP_TEST_FIRST_LAYERS=1 plan G 1 2 2 1 1f1b
    train G --stop-at 5 --load ck --save ck2 --expect-losses ref.jsonl --loss-tol 1e-5 \
      || { cat G.out; fail "uneven 1/3 from even"; }
    grep "losses vs reference" G.out
    PTDP_TEST_FIRST_LAYERS=1 PTDP_TEST_LAST_LAYERS=1 plan U 1 3 1 1 1f1b
    train U --stop-at 7 --load ck2 --save ck3 --expect-losses ref.jsonl --loss-tol 1e-5 \
      || { cat U.out; fail "uneven 1/2/1 from uneven 1/3"; }
    grep "losses vs reference" U.out
    train A --load ck3 --expect-losses ref.jsonl --loss-tol 1e-5 \
      || { cat A.out; fail "even from uneven 1/2/1"; }
    grep "losses vs reference" A.out ;;
  reshard_uneven_interleaved)
    plan A6 2 2 1 1 1f1b 6
    train A6 --log ref6.jsonl || { cat A6.out; fail "6-layer reference run"; }
    train A6 --stop-at 3 --save ck || { cat A6.out; fail "first part"; }
    PTDP_TEST_FIRST_LAYERS=3 PTDP_TEST_LAST_LAYERS=3 plan I 1 2 2 2 interleaved 6
    train I --stop-at 5 --load ck --save ck2 --expect-losses ref6.jsonl --loss-tol 1e-5 \
      || { cat I.out; fail "interleaved short ends from even"; }
    grep "losses vs reference" I.out
    train A6 --load ck2 --expect-losses ref6.jsonl --loss-tol 1e-5 \
      || { cat A6.out; fail "even from interleaved short ends"; }
    grep "losses vs reference" A6.out ;;
  resume_distopt)
    PTDP_TEST_DIST_OPT=true plan S 2 1 2 1 1f1b 4 bf16 300
    train S --log sref.jsonl || { cat S.out; fail "distributed-optimizer reference"; }
    # --load latest on an empty folder: the store left for a load is initialised after all.
    train S --stop-at 4 --load latest --save ck --log srun.jsonl || { cat S.out; fail "first half"; }
    grep -q "no checkpoint under ck yet" S.out || fail "the first half found a checkpoint"
    resumes_bit_for_bit S ck ;;
  reshard_distopt)
    plan E 1 1 2 1 1f1b 4 fp32 300
    PTDP_TEST_DIST_OPT=true plan P 2 1 2 1 1f1b 4 fp32 300
    there_and_back E P "t2 d2 distributed optimizer from t1 d2" \
      "t1 d2 from the distributed optimizer's checkpoint" ;;
  reshard_cp)
    plan E 1 1 2 1 1f1b 4 fp32 300
    PTDP_TEST_CP=2 PTDP_TEST_FUSED_ATTENTION=true PTDP_TEST_DIST_OPT=true plan C 1 1 2 1 1f1b 4 fp32 300
    there_and_back E C "cp2 d2 distributed optimizer from t1 d2" "t1 d2 from the cp2 checkpoint" ;;
  reshard_moe)
    export PTDP_TEST_ARCH=moe
    PTDP_TEST_SEQ_PARALLEL=true plan L 2 2 1 1 1f1b
    plan M 1 1 2 1 1f1b
    there_and_back L M "t1 d2 from the t2 p2 checkpoint" "t2 p2 from the t1 d2 checkpoint"
    "$ptdp" export --checkpoint ck2 --to hf-llama hf > export.out 2>&1 && fail "export of a mixture"
    grep -q "it has a mixture of experts (--to hf-qwen3-moe writes it)" export.out ||
      { cat export.out; fail "export's error"; }
    [ ! -e hf/model.safetensors ] || fail "export wrote a file"
    # Qwen3-MoE's folder (bench/hf check 17 loads it in transformers): the router as mlp.gate, each
    # expert's gate, up and down projections; back through --init-from and out again, byte for byte.
    "$ptdp" export --checkpoint ck2 --to hf-qwen3-moe hfm > export.out 2>&1 || { cat export.out; fail "hf-qwen3-moe"; }
    grep -q '"num_experts": 4' hfm/config.json && grep -q '"mlp_only_layers": \[' hfm/config.json ||
      { cat hfm/config.json; fail "config.json's mixture"; }
    STEPS=1 train L --init-from hfm --lr 0 --min-lr 0 --save ck3 || { cat L.out; fail "init-from hfm"; }
    "$ptdp" export --checkpoint ck3 --to hf-qwen3-moe hfm2 > export.out 2>&1 || { cat export.out; fail "export 2"; }
    cmp hfm/model.safetensors hfm2/model.safetensors || fail "model.safetensors differs after the round trip"
    echo "hf-qwen3-moe -> init-from (t2 p2) -> save -> hf-qwen3-moe: byte-identical"
    sed -i 's/"norm_topk_prob": true/"norm_topk_prob": false/' hfm2/config.json
    STEPS=1 train L --init-from hfm2 > /dev/null 2>&1 && fail "norm_topk_prob false loaded"
    grep -q "norm_topk_prob is false, the plan's model has moe_router_pre_softmax false" L.out ||
      { cat L.out; fail "norm_topk_prob's error"; }
    ;;
  reshard_moedrop)
    # Token dropping (capacity 0.5, docs/token_dropping.md): its fields in the manifest, the same
    # copies kept per sequence in t2 p2 and t1 d2, so the losses continue across the reshard; the
    # export says transformers runs the folder dropless.
    export PTDP_TEST_ARCH=moedrop
    PTDP_TEST_SEQ_PARALLEL=true plan L 2 2 1 1 1f1b
    plan M 1 1 2 1 1f1b
    there_and_back L M "t1 d2 from the t2 p2 checkpoint" "t2 p2 from the t1 d2 checkpoint"
    grep -q '"moe_capacity_factor": 0.5' ck2/step-00000006/manifest.json || fail "the manifest's capacity"
    # The share of copies dropped, logged each step: the same in t2 p2 and t1 d2, and at least
    # half (an expert keeps 8 of a sequence's 64 copies / 4 experts).
    train M --log mlog.jsonl || { cat M.out; fail "t1 d2 log"; }
    grep -q "moe dropped: " M.out || fail "the dropped share's line"
    python3 - eref.jsonl mlog.jsonl <<'PY' || fail "the dropped share"
import json, sys
a, b = ([json.loads(l)["moe_dropped_share"] for l in open(p)] for p in sys.argv[1:])
assert a == b and len(a) == 8 and all(0.5 <= x < 1 for x in a), (a, b)
print("dropped share per step, t2 p2 and t1 d2 alike:", " ".join(f"{x:.4f}" for x in a))
PY
    "$ptdp" export --checkpoint ck2 --to hf-qwen3-moe hfm > export.out 2>&1 || { cat export.out; fail "export"; }
    grep -q "note: model.moe_capacity_factor 0.5 is not in config.json" export.out ||
      { cat export.out; fail "export's note"; } ;;
  reshard_ep)
    # Expert parallelism: data ranks 0 and 1 each write their experts (pp0-tp0.safetensors, and
    # pp0-tp0-ep1.safetensors with ep rank 1's alone); t1 d4 ep 2 (two replicas of each expert) to
    # t2 p2 d2 ep 2 with sequence parallelism and back; then Qwen3-MoE's folder through --init-from
    # into ep 2 and out again, byte for byte (every expert read and written by its global name).
    export PTDP_TEST_ARCH=moe
    PTDP_TEST_EP=2 plan E 1 1 4 1 1f1b
    PTDP_TEST_EP=2 PTDP_TEST_SEQ_PARALLEL=true plan F 2 2 2 1 1f1b
    there_and_back E F "t2 p2 d2 ep2 from the t1 d4 ep2 checkpoint" "t1 d4 ep2 from the t2 p2 d2 ep2 one"
    [ -f ck/step-00000003/pp0-tp0-ep1.safetensors ] || { ls ck/*; fail "ep rank 1's file"; }
    [ ! -e ck/step-00000003/pp0-tp0-ep2.safetensors ] || fail "a file of an expert replica"
    "$ptdp" export --checkpoint ck2 --to hf-qwen3-moe hfm > export.out 2>&1 || { cat export.out; fail "hf-qwen3-moe"; }
    STEPS=1 train E --init-from hfm --lr 0 --min-lr 0 --save ck3 || { cat E.out; fail "init-from hfm"; }
    "$ptdp" export --checkpoint ck3 --to hf-qwen3-moe hfm2 > export.out 2>&1 || { cat export.out; fail "export 2"; }
    cmp hfm/model.safetensors hfm2/model.safetensors || fail "model.safetensors differs after the round trip"
    echo "hf-qwen3-moe -> init-from (t1 d4 ep2) -> save -> hf-qwen3-moe: byte-identical"
    # A plan switch at a step boundary from ep 2 to ep 4 (each expert moves to its new rank through
    # the switch's scratch checkpoint).
    PTDP_TEST_EP=4 plan G 1 1 4 1 1f1b
    train E --switch-plan G.json --switch-at 3 --expect-losses eref.jsonl --loss-tol 1e-5 ||
      { cat E.out; fail "switch from ep 2 to ep 4"; }
    grep -q "switched after step 3 to tp=1,pp=1,dp=4,ep=4" E.out || { cat E.out; fail "no switch"; }
    grep "losses vs reference" E.out
    ;;
  ep_distopt)
    # Expert parallelism with the distributed optimizer (t1 d4 ep 2: the dense state in four
    # shards, each expert-parallel rank's experts' in two over its replicas), bf16: a resume bit
    # for bit, its final state the uninterrupted run's; then in fp32 its checkpoint loaded by t2 p2
    # d2 ep 2 without the distributed optimizer, and back.
    export PTDP_TEST_ARCH=moe PTDP_TEST_EP=2
    PTDP_TEST_DIST_OPT=true plan S 1 1 4 1 1f1b 4 bf16
    train S --log sref.jsonl || { cat S.out; fail "reference"; }
    train S --stop-at 4 --save rk --log srun.jsonl || { cat S.out; fail "first half"; }
    resumes_bit_for_bit S rk
    [ -f rk/step-00000008/pp0-tp0-ep1.safetensors ] || { ls rk/*; fail "ep rank 1's file"; }
    PTDP_TEST_DIST_OPT=true plan D 1 1 4 1 1f1b
    PTDP_TEST_SEQ_PARALLEL=true plan F 2 2 2 1 1f1b
    there_and_back D F "t2 p2 d2 ep2 from the t1 d4 ep2 distributed optimizer's checkpoint" \
      "t1 d4 ep2 distributed optimizer from the t2 p2 d2 ep2 one" ;;
  expert_bias)
    # DeepSeek-V3's kind whole (write_plan.sh deepseek): its multi-latent attention (the up
    # projections split by heads over t, the down projections whole), and its prediction depth
    # (runtime/model/mtp.h): a mixture layer too, with a bias of its own (layer 4), and parameters
    # on the head's stage that resharding moves.
    export PTDP_TEST_ARCH=deepseek PTDP_TEST_EP=2
    plan S 1 1 4 1 1f1b
    train S --log sref.jsonl || { cat S.out; fail "reference"; }
    train S --stop-at 4 --save rk --log srun.jsonl || { cat S.out; fail "first half"; }
    python3 - rk/step-00000004/manifest.json <<'PY' || fail "the manifest's expert biases"
import json, sys
b = json.load(open(sys.argv[1]))["router_expert_bias"]
assert sorted(b) == ["1", "2", "3", "4"], sorted(b)  # layer 0 is dense, 4 the prediction depth's
assert all(len(v) == 8 for v in b.values())
assert all(any(x != 0 for x in v) for v in b.values()), "a bias never moved"
print("manifest: expert biases of layers 1-3 and the depth's 4, e.g. layer 4", b["4"])
PY
    resumes_bit_for_bit S rk
    PTDP_TEST_SEQ_PARALLEL=true plan F 2 2 2 1 1f1b
    there_and_back S F "t2 p2 d2 ep2 from t1 d4 ep2's checkpoint" "t1 d4 ep2 from t2 p2 d2 ep2's"
    # A plan switch at a step boundary (ep 2 to ep 4, through a scratch checkpoint) takes them too.
    PTDP_TEST_EP=4 plan G 1 1 4 1 1f1b
    train S --switch-plan G.json --switch-at 3 --expect-losses sref.jsonl --loss-tol 1e-5 ||
      { cat S.out; fail "switch from ep 2 to ep 4"; }
    grep -q "switched after step 3 to tp=1,pp=1,dp=4,ep=4" S.out || { cat S.out; fail "no switch"; }
    grep "losses vs reference" S.out
    PTDP_TEST_EP=1 forward_is_train_step4
    # The bias taken out of the manifest: refused by name, the folder unchanged.
    python3 - fk/step-00000003/manifest.json <<'PY' || fail "rewriting the manifest"
import json, sys
m = json.load(open(sys.argv[1]))
del m["router_expert_bias"]
json.dump(m, open(sys.argv[1], "w"))
PY
    STEPS=4 train Q --load fk && fail "a manifest without the expert biases loaded"
    grep -q "router_expert_bias: missing (the model has moe_router_expert_bias)" Q.out ||
      { cat Q.out; fail "no error naming router_expert_bias"; }
    echo "a manifest without the expert biases refused by name" ;;
  hf_glm)
    # GLM-4.5's folder (`make hf-check` 21 compares its logits with transformers') with its
    # prediction depth as model.layers.4 (write_plan.sh PTDP_TEST_ARCH=glmmtp; docs/mtp.md): t2 p2
    # d1 with sequence parallelism trains 3 steps and saves.
    export PTDP_TEST_ARCH=glmmtp
    PTDP_TEST_SEQ_PARALLEL=true plan G 2 2 1 1 1f1b
    STEPS=3 train G --save gk || { cat G.out; fail "GLM-4.5-style training"; }
    "$ptdp" export --checkpoint gk --to hf-glm4-moe hfg > e.out 2>&1 || { cat e.out; fail "export"; }
    python3 - gk/step-00000003/manifest.json hfg/model.safetensors <<'PY' || fail "the biases"
import json, struct, sys
m = json.load(open(sys.argv[1]))["router_expert_bias"]
with open(sys.argv[2], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header, base = json.loads(f.read(n)), 8 + n
    for layer, want in m.items():
        t = header["model.layers.%s.mlp.gate.e_score_correction_bias" % layer]
        assert t["dtype"] == "F32" and t["shape"] == [len(want)], t
        f.seek(base + t["data_offsets"][0])
        got = struct.unpack("<%df" % len(want), f.read(4 * len(want)))
        assert list(got) == want, (layer, got, want)
assert any(x != 0 for v in m.values() for x in v), "the biases never moved"
print("the folder's e_score_correction_bias (F32) of layers %s: the manifest's" % sorted(m))
PY
    # `ptdp forward` of the folder and of the checkpoint: the same loss.
    "$ptdp" forward --checkpoint gk --data data.bin --step 4 --global-batch 16 > fc.out 2>&1 ||
      { cat fc.out; fail "forward --checkpoint"; }
    "$ptdp" forward --hf hfg --data data.bin --step 4 --global-batch 16 > fh.out 2>&1 ||
      { cat fh.out; fail "forward --hf"; }
    a=$(sed -n 's/.*loss \([0-9.]*\) nats.*/\1/p' fc.out)
    b=$(sed -n 's/.*loss \([0-9.]*\) nats.*/\1/p' fh.out)
    echo "forward: --checkpoint $a, --hf $b"
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "forward --hf gives $b, --checkpoint $a"
    # Read back at lr 0 and bias rate 0 (nothing moves), saved and exported again: the same bytes.
    python3 - G.json G0.json <<'PY' || fail "plan G0"
import json, sys
p = json.load(open(sys.argv[1]))
p["model"]["moe_router_bias_rate"] = 0
json.dump(p, open(sys.argv[2], "w"))
PY
    ranks[G0]=${ranks[G]}
    STEPS=1 train G0 --init-from hfg --lr 0 --min-lr 0 --save gk0 || { cat G0.out; fail "--init-from"; }
    "$ptdp" export --checkpoint gk0 --to hf-glm4-moe hfg0 > /dev/null 2>&1 || fail "export again"
    cmp hfg/model.safetensors hfg0/model.safetensors || fail "the round trip changed the folder"
    echo "--init-from the folder and exported again: byte for byte"
    "$ptdp" export --checkpoint gk --to hf-qwen3-moe hfq > q.out 2>&1 && fail "--to hf-qwen3-moe ran"
    grep -q "its router has sigmoid scores (--to hf-glm4-moe writes it)" q.out ||
      { cat q.out; fail "--to hf-qwen3-moe: no error naming the router"; }
    echo "--to hf-qwen3-moe refused: $(head -1 q.out)" ;;
  forward_moe)
    # `ptdp forward` of a mixture with Qwen2-MoE's gated shared expert (no dropout): its loss on
    # step 4's batch from the step-3 checkpoint is training's step-4 loss, so forward computes
    # what training does (it had left the shared expert out, until 2026-11-30).
    PTDP_TEST_ARCH=qwen2moe forward_is_train_step4 ;;
  reshard_llama)
    export PTDP_TEST_ARCH=llama
    plan L 2 2 1 1 1f1b
    plan M 1 1 2 1 1f1b
    there_and_back L M "t1 d2 from the t2 p2 checkpoint" "t2 p2 from the t1 d2 checkpoint"
    "$ptdp" export --checkpoint ck2 --to hf-gpt2 hf > export.out 2>&1 && fail "export of a Llama"
    grep -q "is not a GPT-2 (RMSNorm, SwiGLU" export.out || { cat export.out; fail "export's error"; }
    [ ! -e hf/model.safetensors ] || fail "export wrote a file"
    "$ptdp" export --checkpoint ck2 --to hf-llama hfl > export.out 2>&1 || { cat export.out; fail "hf-llama"; }
    "$ptdp" plan --model hfl/config.json --cluster cpu --gpus 4 --global-batch 16 \
      --fix tp=2,pp=2,dp=1,mbs=2,schedule=1f1b,recompute=none --software ptdp --out back.json \
      > back.out 2>&1 || { cat back.out; fail "ptdp plan --model hfl/config.json"; }
    python3 "$here/check_hf_llama.py" L.json back.json hfl/model.safetensors ck2 \
      || fail "the hf-llama folder"
    STEPS=1 train L --init-from hfl --lr 0 --min-lr 0 --save ck3 || { cat L.out; fail "init-from hfl"; }
    "$ptdp" export --checkpoint ck3 --to hf-llama hfl2 > export.out 2>&1 || { cat export.out; fail "export 2"; }
    cmp hfl/model.safetensors hfl2/model.safetensors || fail "model.safetensors differs after the round trip"
    cmp hfl/config.json hfl2/config.json || fail "config.json differs after the round trip"
    echo "hf-llama -> init-from (t2 p2) -> save -> hf-llama: byte-identical"
    python3 "$here/shard_safetensors.py" hfl hfs 3 || fail "sharding the folder"
    STEPS=1 train L --init-from hfs --lr 0 --min-lr 0 --save ck4 || { cat L.out; fail "init-from shards"; }
    "$ptdp" export --checkpoint ck4 --to hf-llama hfl3 > export.out 2>&1 || { cat export.out; fail "export 3"; }
    cmp hfl/model.safetensors hfl3/model.safetensors || fail "the shards' round trip differs"
    echo "3 shards -> init-from (t2 p2) -> save -> hf-llama: byte-identical"
    # ptdp's own shards and bf16, the forms Hugging Face ships checkpoints in.
    "$ptdp" export --checkpoint ck2 --to hf-llama --max-shard-size 100KB hfp > export.out 2>&1 \
      || { cat export.out; fail "sharded export"; }
    [ -e hfp/model.safetensors.index.json ] && [ ! -e hfp/model.safetensors ] || fail "hfp's files"
    shards=$(ls hfp/model-*-of-*.safetensors | wc -l)
    [ "$shards" -ge 3 ] || fail "$shards shards of at most 100 KB"
    STEPS=1 train L --init-from hfp --lr 0 --min-lr 0 --save ck5 || { cat L.out; fail "init-from hfp"; }
    "$ptdp" export --checkpoint ck5 --to hf-llama hfl4 > export.out 2>&1 || { cat export.out; fail "export 4"; }
    cmp hfl/model.safetensors hfl4/model.safetensors || fail "ptdp's shards' round trip differs"
    echo "$shards shards written by export --max-shard-size 100KB -> init-from (t2 p2) -> save -> hf-llama: byte-identical"
    "$ptdp" export --checkpoint ck2 --to hf-llama --dtype bf16 hfb > export.out 2>&1 \
      || { cat export.out; fail "bf16 export"; }
    python3 "$here/check_bf16_export.py" hfl/model.safetensors hfb/model.safetensors || fail "bf16"
    grep -q '"torch_dtype": "bfloat16"' hfb/config.json || fail "bf16's config.json"
    "$ptdp" export --checkpoint ck2 --to hf-llama --max-shard-size 5XB hfx > export.out 2>&1 \
      && fail "a shard size of 5XB"
    grep -q "max-shard-size: '5XB' is not a size" export.out || { cat export.out; fail "5XB's error"; }
    python3 "$here/shard_safetensors.py" hfl hfm 3 --misplace model.embed_tokens.weight || fail "misplacing"
    STEPS=1 train L --init-from hfm && fail "a misplaced shard index was read"
    grep -q "error: --init-from: hfm/model-00001-of-00003.safetensors: tensor 'model.embed_tokens.weight' is not listed for this file" L.out \
      || { cat L.out; fail "the misplaced tensor's error"; }
    sed -i 's/"rms_norm_eps": 1e-05/"rms_norm_eps": 1e-06/' hfl2/config.json
    STEPS=1 train L --init-from hfl2 && fail "a folder with rms_norm_eps 1e-06 was read"
    grep -q "error: --init-from: hfl2/config.json: rms_norm_eps is 1e-06, the plan's model.norm_eps is 1e-05" L.out \
      || { cat L.out; fail "rms_norm_eps's error" ; } ;;
  latest_skips)
    train A --stop-at 4 --save ck || { cat A.out; fail "first half"; }
    # A save killed before its rename, and a folder that lost its manifest.
    mkdir -p ck/tmp-00000006 ck/step-00000005
    head -c 1000 ck/step-00000004/pp0-tp0.safetensors > ck/tmp-00000006/pp0-tp0.safetensors
    cp ck/step-00000004/pp0-tp0.safetensors ck/step-00000005/
    train A --save ck --load latest --expect-losses ref.jsonl --loss-tol 0 \
      || { cat A.out; fail "resume"; }
    grep -q "skipping .*step-00000005: .*manifest.json" A.out || { cat A.out; fail "no skip note"; }
    grep -q "resumed from step 4" A.out || fail "did not resume from step 4" ;;
  killed)
    train A --save-every 2 --save ck --kill-in-save-step 4 --log run.jsonl
    rc=$?
    [ "$rc" -ne 0 ] || fail "the job survived a killed rank"
    [ "$(ls ck | tr '\n' ' ')" = "step-00000002 tmp-00000004 " ] || fail "after the kill: $(ls ck)"
    train A --save-every 2 --save ck --load latest --log run.jsonl --expect-losses ref.jsonl \
      --loss-tol 0 || { cat A.out; fail "resume after the kill"; }
    grep -q "resumed from step 2" A.out || fail "did not resume from step 2"
    cmp <(fields ref.jsonl) <(fields run.jsonl) || fail "logs differ"
    [ "$(ls ck | tr '\n' ' ')" = "step-00000006 step-00000008 " ] || fail "tmp- left: $(ls ck)" ;;
  preempt)
    STEPS=40 train A --log ref40.jsonl || { cat A.out; fail "40-step reference"; }
    STEPS=40 train A --save "$dir/ckp" --log run.jsonl &
    job=$!
    for _ in $(seq 600); do [ -f run.jsonl ] && [ "$(wc -l < run.jsonl)" -ge 3 ] && break; sleep 0.05; done
    pids=$(ps -eo pid=,args= | awk -v s="--save $dir/ckp" 'index($0, s) && !/mpirun/ && !/timeout/ {print $1}')
    [ -n "$pids" ] || { kill "$job"; fail "no rank processes found"; }
    kill -TERM $pids
    wait "$job"
    rc=$?
    [ "$rc" -eq 0 ] || { cat A.out; fail "exit code $rc after SIGTERM, want 0"; }
    grep -q "stopping after step" A.out || { cat A.out; fail "no stop message"; }
    saved=$(ls ckp)
    echo "pre-empted: $saved"
    [ "$saved" != step-00000040 ] || fail "finished before the signal: nothing was pre-empted"
    STEPS=40 train A --save "$dir/ckp" --load latest --log run.jsonl --expect-losses ref40.jsonl \
      --loss-tol 0 || { cat A.out; fail "relaunch"; }
    cmp <(fields ref40.jsonl) <(fields run.jsonl) || fail "logs differ" ;;
  legacy_fnv)
    train A --stop-at 4 --save ck || { cat A.out; fail "first half"; }
    python3 - ck/step-00000004 << 'PY' || fail "rewriting the manifest"
import json, sys
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
for f in m["files"]:
    h = 0xCBF29CE484222325
    for b in open(d + "/" + f["name"], "rb").read():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    del f["crc32c"]
    f["fnv1a64"] = "%016x" % h
json.dump(m, open(d + "/manifest.json", "w"), indent=1)
PY
    grep -q '"fnv1a64"' ck/step-00000004/manifest.json || fail "manifest not rewritten"
    train A --save ck --load latest --log run.jsonl --expect-losses ref.jsonl --loss-tol 0 ||
      { cat A.out; fail "resumed run"; }
    grep -q "resumed from step 4" A.out || fail "did not resume from step 4"
    echo "an FNV-1a 64 manifest resumes exactly" ;;
  flip|truncate|missing|model|unread)
    train A --stop-at 4 --save ck || { cat A.out; fail "first half"; }
    f=ck/step-00000004/pp1-tp0.safetensors
    case "$case" in
      flip)     printf '\x55' | dd of="$f" bs=1 seek=5000 conv=notrunc status=none
                expect="pp1-tp0.safetensors: checksum mismatch" ;;
      truncate) truncate -s 4000 "$f"; expect="pp1-tp0.safetensors: 4000 bytes, the manifest says" ;;
      missing)  rm "$f"; expect="pp1-tp0.safetensors: missing" ;;
      unread)   python3 - ck/step-00000004 << 'PY' || fail "adding the file"
import json, shutil, sys
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
shutil.copy(d + "/pp1-tp0.safetensors", d + "/extra.safetensors")
m["files"].append(dict(next(f for f in m["files"] if f["name"] == "pp1-tp0.safetensors"),
                       name="extra.safetensors"))
json.dump(m, open(d + "/manifest.json", "w"), indent=1)
PY
                printf '\x55' | dd of=ck/step-00000004/extra.safetensors bs=1 seek=5000 conv=notrunc status=none
                expect="extra.safetensors: checksum mismatch" ;;
      model)    plan A 2 2 1 1 1f1b 8
                expect="step-00000004/manifest.json: model.layers is 4 in the checkpoint but 8" ;;
    esac
    before=$(cd ck && find . -type f | sort | xargs md5sum)
    train A --load ck/step-00000004 --save ck
    rc=$?
    cat A.out
    [ "$rc" -eq 2 ] || fail "exit code $rc, want 2"
    grep -q "$expect" A.out || fail "no line matching '$expect'"
    n=$(grep -c "ptdp train: error:" A.out)
    [ "$n" -eq 1 ] || fail "$n error lines, want exactly 1 (rank 0)"
    [ "$before" = "$(cd ck && find . -type f | sort | xargs md5sum)" ] || fail "checkpoint changed" ;;
  *) fail "unknown case $case" ;;
esac
echo PASS
