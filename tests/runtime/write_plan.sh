#!/usr/bin/env bash
# Writes a hand-made plan file (core/plan_file.h schema) for the runtime tests: the model, cluster
# and layout by hand, then the layout's Program added by `ptdp schedule --plan OUT --out OUT` (what
# `ptdp plan` writes; train refuses a plan without it). After editing the layout or model of such
# a plan, run that command again.
# usage: write_plan.sh PTDP OUT LAYERS DROPOUT VOCAB GLOBAL_BATCH TP PP DP MBS VP SCHEDULE RECOMPUTE SCATTER_GATHER [PRECISION]
# PRECISION (fp32 | bf16 | fp16 | fp8; default fp32) goes into layout.precision; fp16 plans set
# layout.grad_accumulation_fusion (the runtime keeps fp32 main gradients). The environment variable
# PTDP_TEST_FUSED_ATTENTION (true | false, default false) goes into layout.fused_attention, so the
# equivalence scripts run fused layouts against the unfused single-process references.
# PTDP_TEST_FIRST_LAYERS and PTDP_TEST_LAST_LAYERS (default 0: the even share) go into
# layout.first_stage_layers and layout.last_stage_layers (uneven pipeline stages).
# PTDP_TEST_STAGE_LAYERS (per-stage counts joined by '/', "3/1/2/2"; default none) goes into
# layout.stage_layers (any split, vp = 1). PTDP_TEST_CP (default 1) goes into layout.cp, and the
# cluster's GPUs count it (tp cp pp dp). PTDP_TEST_DIST_OPT (true | false, default false) goes into
# layout.distributed_optimizer; PTDP_TEST_SEQ_PARALLEL (default false) into layout.sequence_parallel;
# PTDP_TEST_RECOMPUTE_MODULES (default none: the key left out) into layout.recompute_modules.
# PTDP_TEST_EP (default 1) goes into layout.ep (expert parallelism; a mixture of experts).
# PTDP_TEST_ARCH (gpt | llama | llama_mha | qwen3 | partial | ln1p | nemotron | window | moe | moedrop | moepad | dsmoe | dsv3 | glm | qwen2moe | mtp | mtp2 | mtptied | glmmtp | mla | deepseek, default gpt): llama makes the model Llama-style (RMSNorm,
# SwiGLU of 176 features, rotary embeddings with Llama 3.1's scaling of an original length of 16
# (so that it changes every pair's angles at s 32), 2 key/value heads for the 4 query heads, no
# biases, untied output layer); llama_mha the same with 4 key/value heads;
# qwen3 the Llama-style model with Qwen3's attention: heads of 32 (128 wide at hidden 64), QK norm,
# and RMSNorm's epsilon 1e-6; partial the Llama-style model turning half of each head's 16
# features (rotary_percent 0.5, Nemotron-4's partial RoPE); ln1p the GPT with LayerNorm1P (its norms'
# weights stored as their offsets from 1, Nemotron's); nemotron Nemotron-4's layer: squared-ReLU
# MLP, LayerNorm1P, RoPE on half of each head, 2 key/value heads, no biases, untied output layer;
# window the Llama-style model with a sliding window of 7 keys before each query on every other
# layer (window_size 7, window_full_every 2; needs PTDP_TEST_FUSED_ATTENTION=true); moe the
# Llama-style model with a mixture of experts (Qwen3-MoE's kind, with its QK norms) after one dense
# layer: 4 SwiGLU experts of 48 features, top 2 (moe_dense_layers 1; needs sequence parallelism
# with tp > 1); moedrop the same dropping tokens at capacity factor 0.5 (8 of each sequence's 64
# copies an expert, by probability), moepad at factor 1 by position, padded to capacity; dsmoe the same with DeepSeek's kind of mixture: a shared expert of 32 features (no
# gate), group-limited routing (2 groups of 2 experts, each token's 2 from its best group) and
# pre-softmax routing (DeepSeek-V2's: the top 2's full-softmax values, unrenormalised); qwen2moe
# Qwen2-MoE's kind: the Llama-style model with the QKV bias (no QK norms), the mixture after one
# dense layer, a shared expert of 32 features with its sigmoid gate, pre-softmax routing
# (norm_topk_prob false); dsv3 DeepSeek-V3's kind of mixture and router: after one dense layer, 8
# SwiGLU experts of 24 features in 4 groups of 2, each token's top 2 from its 2 best groups (each
# group scored by its best expert), a shared expert of 32 features, the QK norms; sigmoid scores
# renormalised over the top 2 and scaled by 2.5, and the expert bias of the choice, moved by 0.01
# per step (ten times Megatron-Core's default, so that it moves choices within a test's steps);
# glm GLM-4.5's kind (transformers' Glm4MoeForCausalLM): Llama-style attention with a bias on q, k
# and v, RoPE on half of each head (no scaling), one dense layer, then 8 experts of 24, top 2 from
# the better of 2 groups, one shared expert of 24, DeepSeek-V3's router as dsv3's.
# mtp is the llama arch with one multi-token prediction depth (model.mtp_layers 1), mtp2 with two,
# mtptied with one and tied embeddings, glmmtp the glm arch with one; PTDP_TEST_MTP (default 0) sets model.mtp_layers of any rotary arch.
# mla the Llama-style model with DeepSeek-V3's multi-latent attention (runtime/model/mla.h): a query
# latent of 24 and a key/value latent of 20, each RMSNormed (qk_norm), heads of 24 unrotated and 8
# rotated query/key features (32: a head width kernels/cuda runs) and 16 value features, every head
# its own key and value, turned by Llama 3.1's scaling; deepseek DeepSeek-V3's kind whole: mla's
# attention turned by YaRN (factor 4 over 16 positions, mscales 0.9 and 1.1: cos and sin scaled by
# 0.98, the softmax by 1.33), dsv3's mixture and router, and one prediction depth
# (bench/hf/hf_check.sh 22 and 23 have the Hugging Face kind).
set -euo pipefail
ptdp=$1
shift
out=$1 layers=$2 dropout=$3 vocab=$4 gb=$5 tp=$6 pp=$7 dp=$8 mbs=$9 vp=${10} sched=${11} rec=${12} sg=${13}
prec=${14:-fp32}
fusion=false
fused=${PTDP_TEST_FUSED_ATTENTION:-false}
first=${PTDP_TEST_FIRST_LAYERS:-0} last=${PTDP_TEST_LAST_LAYERS:-0}
stages=""
[ -n "${PTDP_TEST_STAGE_LAYERS:-}" ] && stages=", \"stage_layers\": [${PTDP_TEST_STAGE_LAYERS//\//, }]"
[ "$prec" = fp16 ] && fusion=true
cp=${PTDP_TEST_CP:-1}
distopt=${PTDP_TEST_DIST_OPT:-false}
seqpar=${PTDP_TEST_SEQ_PARALLEL:-false}
ep=${PTDP_TEST_EP:-1}
modules=""
[ -n "${PTDP_TEST_RECOMPUTE_MODULES:-}" ] && modules=", \"recompute_modules\": \"$PTDP_TEST_RECOMPUTE_MODULES\""
gpus=$((tp * pp * dp * cp))
arch=""
arch_name=${PTDP_TEST_ARCH:-gpt} mtp=${PTDP_TEST_MTP:-0}
case "$arch_name" in
  mtp | mtptied) arch_name=llama mtp=1 ;;
  mtp2) arch_name=llama mtp=2 ;;
  glmmtp) arch_name=glm mtp=1 ;;
  deepseek) mtp=1 ;;
esac
case "$arch_name" in
  llama | llama_mha | partial | window | moe | moedrop | moepad | dsmoe | dsv3 | qwen2moe)
    kv=2
    [ "$PTDP_TEST_ARCH" = llama_mha ] && kv=4
    arch=", \"kv_heads\": $kv, \"swiglu\": true, \"ffn_hidden\": 176,
            \"rmsnorm\": true, \"rotary\": true, \"linear_bias\": false, \"tied_embeddings\": false,
            \"rope_scaling_factor\": 8, \"rope_low_freq_factor\": 1, \"rope_high_freq_factor\": 4,
            \"rope_original_max_positions\": 16"
    [ "$PTDP_TEST_ARCH" = partial ] && arch="$arch, \"rotary_percent\": 0.5"
    [ "$PTDP_TEST_ARCH" = window ] && arch="$arch, \"window_size\": 7, \"window_full_every\": 2"
    case "$PTDP_TEST_ARCH" in moe | moedrop | moepad | dsmoe)
      arch="$arch, \"moe_experts\": 4, \"moe_topk\": 2, \"moe_ffn_hidden\": 48, \"moe_dense_layers\": 1,
            \"qk_norm\": true" ;;
    esac
    [ "$PTDP_TEST_ARCH" = moedrop ] && arch="$arch, \"moe_capacity_factor\": 0.5"
    [ "$PTDP_TEST_ARCH" = moepad ] && arch="$arch, \"moe_capacity_factor\": 1,
            \"moe_token_drop_policy\": \"position\", \"moe_pad_to_capacity\": true"
    [ "$PTDP_TEST_ARCH" = dsmoe ] && arch="$arch, \"moe_shared_ffn_hidden\": 32,
            \"moe_router_groups\": 2, \"moe_router_group_topk\": 1, \"moe_router_pre_softmax\": true"
    [ "$PTDP_TEST_ARCH" = dsv3 ] && arch="$arch, \"moe_experts\": 8, \"moe_topk\": 2,
            \"moe_ffn_hidden\": 24, \"moe_dense_layers\": 1, \"qk_norm\": true,
            \"moe_shared_ffn_hidden\": 32, \"moe_router_groups\": 4, \"moe_router_group_topk\": 2,
            \"moe_router_sigmoid\": true,
            \"moe_router_topk_scale\": 2.5, \"moe_router_expert_bias\": true,
            \"moe_router_bias_rate\": 0.01"
    [ "$PTDP_TEST_ARCH" = qwen2moe ] && arch="$arch, \"moe_experts\": 4, \"moe_topk\": 2,
            \"moe_ffn_hidden\": 48, \"moe_dense_layers\": 1, \"moe_shared_ffn_hidden\": 32,
            \"moe_shared_gate\": true, \"moe_router_pre_softmax\": true, \"qkv_bias\": true"
    true ;;
  glm)
    arch=", \"kv_heads\": 2, \"swiglu\": true, \"ffn_hidden\": 176, \"rmsnorm\": true,
            \"rotary\": true, \"rotary_percent\": 0.5, \"linear_bias\": false, \"qkv_bias\": true,
            \"tied_embeddings\": false, \"moe_experts\": 8, \"moe_topk\": 2, \"moe_ffn_hidden\": 24,
            \"moe_dense_layers\": 1, \"moe_shared_ffn_hidden\": 24, \"moe_router_groups\": 2,
            \"moe_router_group_topk\": 1, \"moe_router_sigmoid\": true, \"moe_router_topk_scale\": 2.5,
            \"moe_router_expert_bias\": true, \"moe_router_bias_rate\": 0.01" ;;
  mla | deepseek)
    arch=", \"swiglu\": true, \"ffn_hidden\": 176, \"rmsnorm\": true, \"rotary\": true,
            \"linear_bias\": false, \"tied_embeddings\": false, \"qk_norm\": true,
            \"head_dim\": 24, \"mla_q_lora\": 24, \"mla_kv_lora\": 20, \"mla_rope_dim\": 8,
            \"mla_v_dim\": 16, \"rope_original_max_positions\": 16"
    if [ "$arch_name" = mla ]; then
      arch="$arch, \"rope_scaling_factor\": 8, \"rope_low_freq_factor\": 1,
            \"rope_high_freq_factor\": 4"
    else  # YaRN as DeepSeek-V3's, with unequal mscales so that cos and sin are scaled too
      arch="$arch, \"rope_scaling_type\": \"yarn\", \"rope_scaling_factor\": 4,
            \"rope_yarn_mscale\": 0.9, \"rope_yarn_mscale_all_dim\": 1.1"
    fi
    [ "$arch_name" = deepseek ] && arch="$arch, \"moe_experts\": 8, \"moe_topk\": 2,
            \"moe_ffn_hidden\": 24, \"moe_dense_layers\": 1, \"moe_shared_ffn_hidden\": 32,
            \"moe_router_groups\": 4, \"moe_router_group_topk\": 2, \"moe_router_sigmoid\": true,
            \"moe_router_topk_scale\": 2.5, \"moe_router_expert_bias\": true,
            \"moe_router_bias_rate\": 0.01"
    true ;;
  ln1p)
    arch=", \"layernorm_1p\": true" ;;
  nemotron)
    arch=", \"kv_heads\": 2, \"squared_relu\": true, \"layernorm_1p\": true, \"rotary\": true,
            \"rotary_percent\": 0.5, \"linear_bias\": false, \"tied_embeddings\": false" ;;
  qwen3)
    arch=", \"kv_heads\": 2, \"swiglu\": true, \"ffn_hidden\": 176, \"head_dim\": 32, \"qk_norm\": true,
            \"norm_eps\": 1e-6, \"rmsnorm\": true, \"rotary\": true, \"linear_bias\": false,
            \"tied_embeddings\": false" ;;
esac
[ "$mtp" -gt 0 ] && arch="$arch, \"mtp_layers\": $mtp"
# mtptied: mtp's model with the output matrix tied to the embedding (the head's stage holds one copy,
# which its prediction depth reads too).
[ "${PTDP_TEST_ARCH:-}" = mtptied ] && arch=${arch/'"tied_embeddings": false'/'"tied_embeddings": true'}
cat > "$out" <<JSON
{
  "ptdp_plan_version": 2,
  "model": {"name": "tiny", "layers": $layers, "hidden": 64, "heads": 4, "seq_len": 32,
            "vocab": $vocab, "dropout": $dropout$arch},
  "cluster": {"name": "cpu", "gpus": $gpus, "gpus_per_node": $gpus},
  "global_batch": $gb,
  "layout": {"tp": $tp, "pp": $pp, "dp": $dp, "cp": $cp, "ep": $ep, "mbs": $mbs, "vp": $vp, "schedule": "$sched",
             "recompute": "$rec", "scatter_gather": $sg, "precision": "$prec",
             "grad_accumulation_fusion": $fusion, "fused_attention": $fused,
             "first_stage_layers": $first, "last_stage_layers": $last$stages,
             "distributed_optimizer": $distopt, "sequence_parallel": $seqpar$modules}
}
JSON
"$ptdp" schedule --plan "$out" --out "$out" > /dev/null
