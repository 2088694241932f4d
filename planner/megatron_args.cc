// Megatron-LM's pretrain_gpt.py flags for a model and a layout (MegatronArgs, MegatronLayout,
// MegatronModelNote: planner/report.h), apart from the table and JSON writers of report.cc, with
// which they share nothing.
#include <algorithm>
#include <sstream>

#include "core/checked.h"
#include "core/interleaved_order.h"
#include "planner/report.h"

namespace ptdp::planner {

namespace {

// The model's own flags: sizes, dropout and the architecture (Megatron-LM's TransformerConfig
// fields and megatron/training/arguments.py; parsed by its parse_args/validate_args at
// NVIDIA/Megatron-LM d98e8a64ddf3 of 2026-08-22 in `make megatron-check`).
void AppendModelArgs(const ModelSpec& m, std::ostringstream& o) {
  o << " --num-layers " << m.layers << " --hidden-size " << m.hidden << " --num-attention-heads "
    << m.heads << " --ffn-hidden-size " << m.FfnHidden() << " --seq-length " << m.seq_len
    << " --max-position-embeddings " << m.seq_len;
  o << " --hidden-dropout " << m.dropout << " --attention-dropout " << m.dropout;
  if (m.KvHeads() != m.heads) {
    o << " --group-query-attention --num-query-groups " << m.KvHeads();
  }
  if (m.mtp_layers > 0) o << " --mtp-num-layers " << m.mtp_layers;  // on the last stage
  if (m.window_size > 0) o << " --window-size " << m.window_size << ",0";
  if (m.window_full_every > 0) o << " --window-attn-skip-freq " << m.window_full_every;
  if (m.IsMla()) {  // --kv-channels does not apply: the heads' widths are MLA's own
    o << " --multi-latent-attention";
    if (m.mla_q_lora > 0) o << " --q-lora-rank " << m.mla_q_lora;
    o << " --kv-lora-rank " << m.mla_kv_lora << " --qk-head-dim " << m.HeadDim()
      << " --qk-pos-emb-head-dim " << m.mla_rope_dim << " --v-head-dim " << m.mla_v_dim;
  } else if (m.head_dim > 0) {
    o << " --kv-channels " << m.HeadDim();  // else Megatron's h / a
  }
  // An RMSNorm with --normalization RMSNorm (under MLA, on the two latents).
  if (m.qk_norm) o << " --qk-layernorm";
  if (m.swiglu) o << " --swiglu";
  if (m.squared_relu) o << " --squared-relu";
  if (m.layernorm_1p) o << " --apply-layernorm-1p";
  if (m.rmsnorm) o << " --normalization RMSNorm";
  if (m.norm_eps != 1e-5) o << " --norm-epsilon " << FormatDouble(m.norm_eps);  // else Megatron's
  // YaRN: a GPT's position embedding type; multi-latent attention's rope type, whose original
  // length and betas Megatron-Core fixes at 4096, 32 and 1 (MegatronModelNote).
  const bool gpt_yarn = m.RopeYarn() && !m.IsMla();
  if (m.rotary) {
    o << " --position-embedding-type " << (gpt_yarn ? "yarn" : "rope") << " --rotary-base "
      << int64_t(m.rotary_base);
    if (m.rotary_percent != 1) o << " --rotary-percent " << FormatDouble(m.rotary_percent);
  }
  if (m.RopeYarn()) {
    if (m.IsMla()) o << " --rope-type yarn";
    o << " --rotary-scaling-factor " << FormatDouble(m.rope_scaling_factor);
    if (gpt_yarn) {
      o << " --yarn-original-max-position-embeddings " << m.rope_original_max_positions
        << " --yarn-beta-fast " << FormatDouble(m.rope_yarn_beta_fast) << " --yarn-beta-slow "
        << FormatDouble(m.rope_yarn_beta_slow);
    }
    o << " --mscale " << FormatDouble(m.rope_yarn_mscale) << " --mscale-all-dim "
      << FormatDouble(m.rope_yarn_mscale_all_dim);
  } else if (m.rope_scaling_factor > 0) {
    // Llama 3.1's: Megatron-Core fixes the rest at 1, 4, 8192 (MegatronModelNote).
    o << " --use-rope-scaling --rope-scaling-factor " << FormatDouble(m.rope_scaling_factor);
  }
  if (!m.linear_bias) o << " --disable-bias-linear";
  if (!m.linear_bias && m.qkv_bias) o << " --add-qkv-bias";
  if (!m.tied_embeddings) o << " --untie-embeddings-and-output-weights";
  o << " --make-vocab-size-divisible-by " << m.vocab_divisible_by;
  // The experts as priced (costmodel/moe_cost.h): grouped GEMM (the dispatcher is the layout's).
  if (m.IsMoe()) {
    o << " --num-experts " << m.moe_experts << " --moe-router-topk " << m.moe_topk
      << " --moe-ffn-hidden-size " << m.MoeFfnHidden() << " --moe-grouped-gemm";
    if (m.moe_router_groups > 0) {
      o << " --moe-router-num-groups " << m.moe_router_groups << " --moe-router-group-topk "
        << m.moe_router_group_topk;
    }
    if (m.HasSharedExpert()) {
      o << " --moe-shared-expert-intermediate-size " << m.moe_shared_ffn_hidden;
      if (m.moe_shared_gate) o << " --moe-shared-expert-gate";
    }
    if (m.moe_router_pre_softmax) o << " --moe-router-pre-softmax";
    if (m.moe_router_sigmoid) o << " --moe-router-score-function sigmoid";
    if (m.moe_router_topk_scale != 1) {
      o << " --moe-router-topk-scaling-factor " << FormatDouble(m.moe_router_topk_scale);
    }
    if (m.moe_router_expert_bias) {
      o << " --moe-router-enable-expert-bias --moe-router-bias-update-rate "
        << FormatDouble(m.moe_router_bias_rate);
    }
    if (m.DropsTokens()) {
      o << " --moe-expert-capacity-factor " << FormatDouble(m.moe_capacity_factor)
        << " --moe-token-drop-policy " << (m.moe_drop_by_position ? "position" : "probs");
      if (m.moe_pad_to_capacity) o << " --moe-pad-expert-input-to-capacity";
    }
    // Leading dense layers as Megatron-Core's list pattern: 0 a dense layer, 1 a mixture.
    if (m.moe_dense_layers > 0) {
      o << " --moe-layer-freq \"([0]*" << m.moe_dense_layers << "+[1]*"
        << m.layers - m.moe_dense_layers << ")\"";
    }
    if (!m.moe_layer_pattern.empty()) {  // the list itself: "[0,1,0,1]"
      o << " --moe-layer-freq \"[";
      for (size_t l = 0; l < m.moe_layer_pattern.size(); ++l) {
        o << (l > 0 ? "," : "") << m.moe_layer_pattern[l];
      }
      o << "]\"";
    }
  }
}

}  // namespace

// Megatron-Core's --pipeline-model-parallel-layout for per-(virtual-)stage counts: stages joined
// by '|' in virtual-stage order (its stage i = chunk pp + rank, ours), "t*n" for n transformer
// layers, the embedding (E) on the first stage, the multi-token prediction layers (m) and the
// loss (L) on the last: 9/3/8/4 is "Et*9|t*3|t*8|t*4,L", 1/2/2/0 with one MTP layer
// "Et|t*2|t*2|m,L" (its parser takes ',' as a cosmetic separator).
std::string MegatronLayout(const std::vector<int>& stage_layers, int mtp_layers) {
  std::string out;
  for (size_t r = 0; r < stage_layers.size(); ++r) {
    std::vector<std::string> parts;
    const int n = stage_layers[r];
    std::string first = r == 0 ? "E" : "";
    if (n > 0) first += n == 1 ? "t" : "t*" + std::to_string(n);
    if (!first.empty()) parts.push_back(first);
    if (r + 1 == stage_layers.size()) {
      if (mtp_layers > 0)
        parts.push_back(mtp_layers == 1 ? "m" : "m*" + std::to_string(mtp_layers));
      parts.push_back("L");
    }
    if (r > 0) out += "|";
    for (size_t i = 0; i < parts.size(); ++i) out += (i > 0 ? "," : "") + parts[i];
  }
  return out;
}

namespace {
std::string MegatronRopeNote(const ModelSpec& m) {
  if (!(m.rope_scaling_factor > 0)) return "";
  if (m.RopeYarn()) {
    if (!m.IsMla() || (m.rope_original_max_positions == 4096 && m.rope_yarn_beta_fast == 32 &&
                       m.rope_yarn_beta_slow == 1)) {
      return "";
    }
    return "Megatron-Core's multi-latent attention fixes YaRN's original length and betas at "
           "4096, 32 and 1; this model's are " +
           std::to_string(m.rope_original_max_positions) + ", " +
           FormatDouble(m.rope_yarn_beta_fast) + " and " + FormatDouble(m.rope_yarn_beta_slow) +
           ", which its flags cannot express";
  }
  if (m.IsMla()) {
    return "Megatron-Core's multi-latent attention turns by YaRN or unscaled RoPE, not Llama "
           "3.1's scaling (--use-rope-scaling is ignored there)";
  }
  if (m.rope_low_freq_factor == 1 && m.rope_high_freq_factor == 4 &&
      m.rope_original_max_positions == 8192) {
    return "";
  }
  return "Megatron-Core's --use-rope-scaling fixes the low and high frequency factors and the "
         "original length at 1, 4 and 8192; this model's are " +
         FormatDouble(m.rope_low_freq_factor) + ", " + FormatDouble(m.rope_high_freq_factor) +
         " and " + std::to_string(m.rope_original_max_positions) +
         ", which its flags cannot express";
}
}  // namespace

std::string MegatronModelNote(const ModelSpec& m) {
  std::string note = MegatronRopeNote(m);
  if (m.DropsTokens()) {
    note += std::string(note.empty() ? "" : "; ") +
            "ptdp's expert capacity is per sequence (on a context-parallel rank), Megatron-Core's "
            "per rank's routed tokens (b s / (cp t)): they drop the same copies at b = 1, t = 1";
  }
  return note;
}

std::string MegatronArgs(const ModelSpec& m, const ParallelConfig& c,
                         const SoftwareProfile* software) {
  std::ostringstream o;
  o << "--tensor-model-parallel-size " << c.tp << " --pipeline-model-parallel-size " << c.pp;
  if (c.cp > 1) o << " --context-parallel-size " << c.cp;
  if (m.IsMoe()) {
    o << " --expert-model-parallel-size " << c.ep << " --expert-tensor-parallel-size "
      << c.ExpertTp();
  }
  // Interleaved with short ends (core/parallel.h): Megatron-LM counts the embedding and the loss
  // as a layer each when told to, and then places the layers as core/shapes.h does.
  const bool short_ends = c.vp > 1 && c.Uneven() && c.stage_layers.empty();
  if (c.schedule == ScheduleKind::kInterleaved) {
    int per_virtual_stage = m.layers / (c.pp * c.vp);
    if (short_ends) {
      const Result<int> per = ShortEndsVirtualStageLayers(m, c.pp, c.vp, c.first_stage_layers > 0,
                                                          c.last_stage_layers > 0, "layout");
      PTDP_CHECK(per.ok());  // the plan's layout was validated
      per_virtual_stage = *per;
    }
    // (A layout string sets the virtual stages itself; Megatron-Core refuses both.)
    if (c.stage_layers.empty()) {
      o << " --num-layers-per-virtual-pipeline-stage " << per_virtual_stage;
    }
    if (short_ends && c.first_stage_layers > 0) o << " --account-for-embedding-in-pipeline-split";
    if (short_ends && c.last_stage_layers > 0) o << " --account-for-loss-in-pipeline-split";
    // The group size the plan's Program was generated with, so Megatron-Core runs that order
    // (its default, pp, is left unsaid).
    const int64_t group = DefaultMicrobatchGroup(c.Microbatches(), c.pp);
    if (group != c.pp) o << " --microbatch-group-size-per-virtual-pipeline-stage " << group;
  }
  // Uneven stages: Megatron-LM splits the layers it is not told about evenly over the other
  // stages, as core/shapes.h does.
  if (!short_ends && c.first_stage_layers > 0) {
    o << " --decoder-first-pipeline-num-layers " << c.first_stage_layers;
  }
  if (!short_ends && c.last_stage_layers > 0) {
    o << " --decoder-last-pipeline-num-layers " << c.last_stage_layers;
  }
  // Per-stage counts: quoted, since '|' and '*' mean something to a shell.
  if (!c.stage_layers.empty()) {
    o << " --pipeline-model-parallel-layout \"" << MegatronLayout(c.stage_layers, m.mtp_layers)
      << "\"";
  }
  o << " --micro-batch-size " << c.mbs << " --global-batch-size " << c.global_batch;
  AppendModelArgs(m, o);
  if (m.IsMoe()) {  // the dispatcher priced: alltoall, or flex on DeepEP
    o << (c.moe_dispatcher == MoeDispatcher::kDeepEp
              ? " --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep"
              : " --moe-token-dispatcher-type alltoall");
  }
  if (c.recompute == Recompute::kFull) {
    o << " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
  } else if (c.recompute == Recompute::kSelective) {
    o << " --recompute-granularity selective";
    if (c.recompute_modules != 0) {  // Megatron-Core's default, core_attn, is left unsaid
      std::string modules = RecomputeModulesText(c.recompute_modules);
      std::replace(modules.begin(), modules.end(), '+', ' ');
      o << " --recompute-modules " << modules;
    }
  }
  // fp32 is Megatron-LM's default; 16-bit training names its dtype.
  if (c.precision == Precision::kFp16) o << " --fp16";
  if (c.precision == Precision::kBf16) o << " --bf16";
  // FP8 as priced (costmodel/layer_cost.h): bf16 around Transformer Engine's FP8 Linears, E4M3
  // forward and E5M2 gradients, delayed scaling from the largest amax of a 1024-step history
  // (NVIDIA's recommended recipe; Megatron-LM requires --bf16 or --fp16 with --fp8-format).
  if (c.precision == Precision::kFp8) {
    o << " --bf16 --fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024"
      << " --fp8-amax-compute-algo max";
  }
  if (c.sequence_parallel) o << " --sequence-parallel";
  if (c.distributed_optimizer) o << " --use-distributed-optimizer";
  // Megatron-FSDP's full sharding (ZeRO-3) on the distributed optimizer, as the plan priced it; it
  // saves its checkpoints in its own format only.
  if (c.optimizer_instances > 1) {
    o << " --num-distributed-optimizer-instances " << c.optimizer_instances;
  }
  if (c.fsdp) {
    o << " --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params"
      << " --ckpt-format fsdp_dtensor";
  }
  // The attention the plan priced: a fused FlashAttention-class kernel, or the unfused
  // scores-softmax-dropout-context sequence (Megatron-LM's AttnBackend flash / unfused).
  o << " --attention-backend " << (c.fused_attention ? "flash" : "unfused");
  // Today's Megatron-LM fuses the accumulation by default; the plan modelled the unfused add.
  if (!c.grad_accumulation_fusion) o << " --no-gradient-accumulation-fusion";
  if (c.grad_reduce_bf16) o << " --grad-reduce-in-bf16";
  if (c.optimizer_state_bf16) {  // fp32 main params kept as remainders (TE >= 2.1's default)
    o << " --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16";
  }
  // The combined 1F1B: the all-to-alls beside another microbatch's compute, the weight gradients
  // delayed to make room for them (Megatron-Bridge's moe_a2a_overlap sets both).
  if (c.moe_a2a_overlap) o << " --overlap-moe-expert-parallel-comm --delay-wgrad-compute";
  if (c.moe_shared_expert_overlap) o << " --moe-shared-expert-overlap";
  // The overlaps the plan priced (the software profile's, where the layout has what they need).
  if (software != nullptr) {
    if (software->tp_comm_overlap_fraction.value > 0 && c.sequence_parallel) {
      o << " --tp-comm-overlap";
    }
    // The gradients are reduced over the d * cp ranks holding each weight.
    const bool reduced = c.WeightReplicas() > 1;
    if (software->overlap_grad_reduce.value && reduced) o << " --overlap-grad-reduce";
    if (software->overlap_param_gather.value && c.distributed_optimizer && reduced) {
      o << " --overlap-param-gather";
    }
  }
  // No scatter/gather flag: today's Megatron-LM has dropped --no-scatter-gather-tensors-in-pipeline
  // (an unknown flag its parser refuses) and sends whole b s h messages without sequence
  // parallelism, as a plan with scatter_gather off does.
  return o.str();
}

}  // namespace ptdp::planner
