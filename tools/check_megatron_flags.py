#!/usr/bin/env python3
"""`make megatron-check`: the flags `ptdp plan --emit megatron` prints, parsed by Megatron-LM's own
argument parser (megatron/training/arguments.py parse_args + validate_args) from a Megatron-LM
checkout the user names, and the parsed namespace compared with the plan file it came from.

Megatron-LM's parser is not on PyPI (the megatron-core wheel ships megatron/core only), so this
cannot run in `make test`; tools/megatron_check.sh makes the Python environment and the plans.

usage: check_megatron_flags.py --megatron-lm PATH PLAN.json [PLAN.json ...]
  PLAN.json: written by `ptdp plan --out` (its "megatron_args", "model", "layout", "cluster").
  The checkout comes from --megatron-lm or $MEGATRON_LM; torch must be importable.
One line per plan: "PASS name: ..." or "FAIL name: <flag>: <reason>"; exit 1 on any FAIL,
2 on bad usage.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys

# What Megatron-LM needs beyond the layout and the model to get through parse_args and
# validate_args, none of which the plan decides: a tokenizer that needs no files (NullTokenizer
# with the plan's vocabulary), mock data instead of a dataset path, a run length and a learning
# rate. Kept here, apart from the emitted flags, so the check never hides a missing layout flag.
NON_LAYOUT_ARGS = [
    "--tokenizer-type", "NullTokenizer",
    "--mock-data",
    "--train-iters", "10",
    "--lr", "1e-4",
]


# GPU architecture (compute capability major) of the profiles' GPUs, for validate_args; another
# cluster is answered as Hopper (9), the rules of which hold for every GPU before Blackwell.
GPU_ARCH = {"selene": 8, "dgx-h100": 9, "h200-measured": 9}


def flags_layout(plan):
    """The layout the flags are for: the plan's, or when Megatron-Core has no schedule for its
    winner (zero-bubble, GPipe) the best ranked one it runs, which ptdp writes as
    "megatron_layout" beside a "megatron_note" (planner/report.h ChooseMegatronLayout)."""
    return plan.get("megatron_layout", plan["layout"])


def megatron_layout(stage_layers, mtp_layers=0):
    """9/3/8/4 -> "Et*9|t*3|t*8|t*4,L", 1/2/0 with one MTP layer -> "Et|t*2|m,L", per virtual
    stage in order, as planner/report.cc MegatronLayout writes it."""
    stages = []
    for i, n in enumerate(stage_layers):
        first = ("E" if i == 0 else "") + ("" if n == 0 else "t" if n == 1 else "t*%d" % n)
        parts = [first] if first else []
        if i == len(stage_layers) - 1:
            if mtp_layers:
                parts.append("m" if mtp_layers == 1 else "m*%d" % mtp_layers)
            parts.append("L")
        stages.append(",".join(parts))
    return "|".join(stages)


def expected_values(plan):
    """(flag, namespace attribute, expected value) triples the plan decides."""
    m, lay = plan["model"], flags_layout(plan)
    tp, pp, vp = lay["tp"], lay["pp"], lay.get("vp", 1)
    interleaved = lay.get("schedule") == "interleaved"
    precision = lay.get("precision", "fp32")
    recompute = lay.get("recompute", "none")
    kv_heads = m.get("kv_heads", 0) or m["heads"]
    ffn = m.get("ffn_hidden", 0) or 4 * m["hidden"]
    first = lay.get("first_stage_layers", 0)
    last = lay.get("last_stage_layers", 0)
    # Interleaved with short ends (core/parallel.h): Megatron-LM's account-for flags, not the
    # first/last stage layer counts.
    short_ends = interleaved and vp > 1 and (first or last)
    out = [
        ("--tensor-model-parallel-size", "tensor_model_parallel_size", tp),
        ("--pipeline-model-parallel-size", "pipeline_model_parallel_size", pp),
        ("--num-layers-per-virtual-pipeline-stage", "virtual_pipeline_model_parallel_size",
         vp if interleaved else None),
        ("WORLD_SIZE / (tp * pp)", "data_parallel_size", lay["dp"]),
        ("--micro-batch-size", "micro_batch_size", lay["mbs"]),
        ("--global-batch-size", "global_batch_size", plan["global_batch"]),
        ("--decoder-first-pipeline-num-layers", "decoder_first_pipeline_num_layers",
         None if short_ends else first or None),
        ("--decoder-last-pipeline-num-layers", "decoder_last_pipeline_num_layers",
         None if short_ends else last or None),
        ("--account-for-embedding-in-pipeline-split", "account_for_embedding_in_pipeline_split",
         bool(short_ends and first)),
        ("--account-for-loss-in-pipeline-split", "account_for_loss_in_pipeline_split",
         bool(short_ends and last)),
        # Per-stage counts (layout.stage_layers, vp = 1): Megatron-Core's layout string, the
        # embedding on the first stage and the loss on the last (planner/report.h MegatronLayout).
        ("--pipeline-model-parallel-layout", "pipeline_model_parallel_layout",
         megatron_layout(lay["stage_layers"], m.get("mtp_layers", 0))
         if lay.get("stage_layers") else None),
        ("--num-layers", "num_layers", m["layers"]),
        ("--hidden-size", "hidden_size", m["hidden"]),
        ("--num-attention-heads", "num_attention_heads", m["heads"]),
        ("--ffn-hidden-size", "ffn_hidden_size", ffn),
        ("--group-query-attention", "group_query_attention", kv_heads != m["heads"]),
        ("--seq-length", "seq_length", m["seq_len"]),
        ("--max-position-embeddings", "max_position_embeddings", m["seq_len"]),
        ("--hidden-dropout", "hidden_dropout", m.get("dropout", 0.1)),
        ("--attention-dropout", "attention_dropout", m.get("dropout", 0.1)),
        ("--make-vocab-size-divisible-by", "make_vocab_size_divisible_by",
         m.get("vocab_divisible_by", 128)),
        ("--fp16", "fp16", precision == "fp16"),
        ("--bf16", "bf16", precision in ("bf16", "fp8")),
        ("--fp8-format", "fp8", "hybrid" if precision == "fp8" else None),
        ("--recompute-granularity", "recompute_granularity",
         None if recompute == "none" else recompute),
        ("--recompute-method", "recompute_method", "uniform" if recompute == "full" else None),
        ("--sequence-parallel", "sequence_parallel", bool(lay.get("sequence_parallel", False))),
        ("--use-distributed-optimizer", "use_distributed_optimizer",
         bool(lay.get("distributed_optimizer", False))),
        ("--use-megatron-fsdp", "use_megatron_fsdp", bool(lay.get("fsdp", False))),
        ("--num-distributed-optimizer-instances", "num_distributed_optimizer_instances",
         int(lay.get("optimizer_instances", 1))),
        ("--no-gradient-accumulation-fusion", "gradient_accumulation_fusion",
         bool(lay.get("grad_accumulation_fusion", False))),
        # bf16 gradients: validate_args then turns accumulate_allreduce_grads_in_fp32 off.
        ("--grad-reduce-in-bf16", "grad_reduce_in_bf16", bool(lay.get("grad_reduce_bf16", False))),
        # 16-bit optimizer state: TE's FusedAdam with bf16 moments (dtypes compared as text).
        ("--use-precision-aware-optimizer", "use_precision_aware_optimizer",
         bool(lay.get("optimizer_state_bf16", False))),
        ("--exp-avg-dtype", "exp_avg_dtype",
         "torch.bfloat16" if lay.get("optimizer_state_bf16") else "torch.float32"),
        ("--exp-avg-sq-dtype", "exp_avg_sq_dtype",
         "torch.bfloat16" if lay.get("optimizer_state_bf16") else "torch.float32"),
        # The combined 1F1B (layout moe_a2a_overlap) sets both.
        ("--overlap-moe-expert-parallel-comm", "overlap_moe_expert_parallel_comm",
         bool(lay.get("moe_a2a_overlap", False))),
        ("--delay-wgrad-compute", "delay_wgrad_compute", bool(lay.get("moe_a2a_overlap", False))),
        # Architecture: a GPT's plan file leaves these keys out (core/model.h defaults).
        ("--swiglu", "swiglu", bool(m.get("swiglu", False))),
        ("--squared-relu", "squared_relu", bool(m.get("squared_relu", False))),
        ("--apply-layernorm-1p", "apply_layernorm_1p", bool(m.get("layernorm_1p", False))),
        # Sliding-window attention: (left, right) keys; every N-th layer full.
        ("--window-size", "window_size",
         (m["window_size"], 0) if m.get("window_size") else None),
        ("--window-attn-skip-freq", "window_attn_skip_freq", m.get("window_full_every") or None),
        ("--normalization", "normalization", "RMSNorm" if m.get("rmsnorm") else "LayerNorm"),
        ("--norm-epsilon", "norm_epsilon", float(m.get("norm_eps", 1e-5))),
        ("--position-embedding-type", "position_embedding_type",
         "rope" if m.get("rotary") else "learned_absolute"),
        ("--disable-bias-linear", "add_bias_linear", bool(m.get("linear_bias", True))),
        ("--untie-embeddings-and-output-weights", "untie_embeddings_and_output_weights",
         not m.get("tied_embeddings", True)),
    ]
    # The overlaps the plan priced: its software profile's, where the layout has what each needs
    # (tp overlap: sequence parallelism; the data-parallel ones: dp > 1; the parameter gather:
    # the distributed optimizer). Plans without a "software" key priced none.
    sw = plan.get("software", {})
    on = lambda key: bool(sw.get(key, {}).get("value", False))  # noqa: E731
    sp, dist_opt, dp = bool(lay.get("sequence_parallel")), bool(
        lay.get("distributed_optimizer")), lay["dp"]
    out += [
        ("--tp-comm-overlap", "tp_comm_overlap",
         sw.get("tp_comm_overlap_fraction", {}).get("value", 0) > 0 and sp),
        ("--overlap-grad-reduce", "overlap_grad_reduce", on("overlap_grad_reduce") and dp > 1),
        ("--overlap-param-gather", "overlap_param_gather",
         on("overlap_param_gather") and dist_opt and dp > 1),
    ]
    if kv_heads != m["heads"]:  # Megatron-LM reads num_query_groups only with GQA on
        out.append(("--num-query-groups", "num_query_groups", kv_heads))
    if recompute == "full":
        out.append(("--recompute-num-layers", "recompute_num_layers", 1))
    if recompute == "selective":  # the modules, when not Megatron-Core's default (core_attn)
        modules = lay.get("recompute_modules", "")
        out.append(("--recompute-modules", "recompute_modules",
                    modules.split("+") if modules else None))
    if m.get("rotary"):
        out.append(("--rotary-base", "rotary_base", int(m.get("rotary_base", 10000))))
        out.append(("--rotary-percent", "rotary_percent", float(m.get("rotary_percent", 1.0))))
    if not m.get("linear_bias", True):
        out.append(("--add-qkv-bias", "add_qkv_bias", bool(m.get("qkv_bias", False))))
    mla = bool(m.get("mla_kv_lora"))
    if m.get("head_dim") and not mla:  # else Megatron-LM's hidden / heads, as ptdp's
        out.append(("--kv-channels", "kv_channels", m["head_dim"]))
    if mla:  # multi-latent attention's widths, not --kv-channels (docs/moe.md)
        out += [
            ("--multi-latent-attention", "multi_latent_attention", True),
            ("--q-lora-rank", "q_lora_rank", m.get("mla_q_lora") or None),
            ("--kv-lora-rank", "kv_lora_rank", m["mla_kv_lora"]),
            ("--qk-head-dim", "qk_head_dim", m["head_dim"]),
            ("--qk-pos-emb-head-dim", "qk_pos_emb_head_dim", m["mla_rope_dim"]),
            ("--v-head-dim", "v_head_dim", m["mla_v_dim"]),
        ]
    out.append(("--mtp-num-layers", "mtp_num_layers", m.get("mtp_layers") or None))
    if lay.get("fsdp"):  # ZeRO-3: weights, gradients and optimizer state sharded
        out.append(("--data-parallel-sharding-strategy", "data_parallel_sharding_strategy",
                    "optim_grads_params"))
    out.append(("--qk-layernorm", "qk_layernorm", bool(m.get("qk_norm", False))))
    if m.get("moe_experts"):  # a mixture of experts (docs/moe.md)
        deepep = lay.get("moe_dispatcher", "alltoall") == "deepep"
        out += [
            ("--num-experts", "num_experts", m["moe_experts"]),
            ("--moe-router-topk", "moe_router_topk", m["moe_topk"]),
            ("--moe-ffn-hidden-size", "moe_ffn_hidden_size", m["moe_ffn_hidden"]),
            ("--moe-grouped-gemm", "moe_grouped_gemm", True),
            ("--moe-token-dispatcher-type", "moe_token_dispatcher_type",
             "flex" if deepep else "alltoall"),
            ("--moe-flex-dispatcher-backend", "moe_flex_dispatcher_backend", "deepep"),
            ("--moe-router-num-groups", "moe_router_num_groups",
             m.get("moe_router_groups") or None),
            ("--moe-router-group-topk", "moe_router_group_topk",
             m.get("moe_router_group_topk") or None),
            ("--expert-model-parallel-size", "expert_model_parallel_size", lay.get("ep", 1)),
            ("--expert-tensor-parallel-size", "expert_tensor_parallel_size",
             lay.get("etp", 0) or tp),
            ("--moe-shared-expert-intermediate-size", "moe_shared_expert_intermediate_size",
             m.get("moe_shared_ffn_hidden") or None),
            ("--moe-shared-expert-gate", "moe_shared_expert_gate",
             bool(m.get("moe_shared_gate", False))),
            ("--moe-shared-expert-overlap", "moe_shared_expert_overlap",
             bool(lay.get("moe_shared_expert_overlap", False))),
        ]
        dense = m.get("moe_dense_layers", 0)
        pattern = m.get("moe_layer_pattern") or (
            [0] * dense + [1] * (m["layers"] - dense) if dense else 1)
        out.append(("--moe-layer-freq", "moe_layer_freq", pattern))
    return out


# Arguments whose destination a later Megatron-LM renamed: d98e8a64's TransformerConfig declares
# layernorm_epsilon with arg_names ["--norm-epsilon"] (megatron/core/transformer/transformer_config.py),
# where arguments.py once stored norm_epsilon; likewise layernorm_zero_centered_gamma for
# --apply-layernorm-1p, once apply_layernorm_1p.
DEST_ALIASES = {"norm_epsilon": "layernorm_epsilon",
                "apply_layernorm_1p": "layernorm_zero_centered_gamma"}


def child(plan_path):
    """Runs in a fresh interpreter per plan: Megatron-LM's parser reads sys.argv and the
    environment, and validate_args keeps global state."""
    with open(plan_path) as f:
        plan = json.load(f)
    sys.argv = (["pretrain_gpt.py"] + shlex.split(plan["megatron_args"]) + NON_LAYOUT_ARGS +
                ["--vocab-size", str(plan["model"]["vocab"])])
    import torch
    import megatron.training.arguments as margs
    # validate_args asks CUDA for the GPU's architecture (get_device_arch_version: CUDA_DEVICE_MAX_
    # CONNECTIONS and stream rules differ from Blackwell on). There is no GPU here, so answer as the
    # plan's cluster would; nothing else is stubbed.
    major = GPU_ARCH.get(plan["cluster"].get("name", ""), 9)
    margs.get_device_arch_version = lambda: major
    torch.cuda.get_device_capability = lambda *a, **k: (major, 0)
    if "--delay-wgrad-compute" in plan["megatron_args"]:
        # validate_args asks the installed Transformer Engine's version, and --delay-wgrad-compute
        # beside --overlap-grad-reduce needs TE >= 2.8.0 (arguments.py at d98e8a64), a fact about
        # the machine, not the flags (docs/moe.md). There is no TE here: for these plans answer as
        # TE 2.8.0 would; every other plan keeps the answer of no TE.
        from packaging.version import Version
        te = Version("2.8.0")
        margs.is_te_min_version = lambda v, check_equality=True: (
            te >= Version(v) if check_equality else te > Version(v))
    args = margs.parse_args()  # argparse prints the refused flag and exits 2 itself
    try:
        margs.validate_args(args)
    except (AssertionError, ValueError, RuntimeError) as e:
        print(f"@@ validate_args: {type(e).__name__}: {e}")
        return 1
    bad = []
    for flag, attr, want in expected_values(plan):
        got = getattr(args, attr, getattr(args, DEST_ALIASES.get(attr, attr), "<absent>"))
        if hasattr(got, "name") and not isinstance(got, str):  # enums
            got = got.name
        if type(got).__name__ == "dtype":  # torch dtypes, which map_dtype made of the flags
            got = str(got)
        if got == "<absent>":
            same = False  # this Megatron-LM has no such argument: name it, do not crash
        elif isinstance(want, float) or isinstance(got, float):
            same = got is not None and want is not None and abs(float(got) - float(want)) < 1e-12
        else:
            same = got == want
        if not same:
            bad.append(f"{flag}: Megatron-LM parsed {attr}={got!r}, the plan says {want!r}")
    backend = getattr(args.attention_backend, "name", str(args.attention_backend))
    vocab_checked = False
    # The padded vocabulary Megatron-LM builds its embedding with (vocab_utils.py) against
    # core/model.h PaddedVocab's rule: the next multiple of vocab_divisible_by * tp.
    try:
        from megatron.training.vocab_utils import calculate_padded_vocab_size
        v, mult = plan["model"]["vocab"], plan["model"].get("vocab_divisible_by", 128) * flags_layout(
            plan)["tp"]
        got = calculate_padded_vocab_size(v, args.make_vocab_size_divisible_by,
                                          args.tensor_model_parallel_size, False)
        if got != -(-v // mult) * mult:
            bad.append(f"--make-vocab-size-divisible-by: Megatron-LM pads the vocabulary {v} to "
                       f"{got}, the plan to {-(-v // mult) * mult}")
        vocab_checked = True
    except ImportError as e:  # older checkouts: the parsed divisor above is still compared
        print(f"note: padded vocabulary not compared ({e})")
    # The attention the plan priced (core/parallel.cc: fused_attention, false when absent).
    want_backend = "flash" if flags_layout(plan).get("fused_attention", False) else "unfused"
    if backend != want_backend:
        bad.append(f"--attention-backend: Megatron-LM parsed {backend!r}, the plan says "
                   f"{want_backend!r}")
    if args.virtual_pipeline_model_parallel_size:
        # Megatron-Core's interleaved schedule (pipeline_parallel/schedules.py) refuses a group
        # size outside [pp, m] and a last group of 1 .. pp-1; check the parsed size against it.
        # Not building the TransformerConfig (its __post_init__ asks for Transformer Engine with
        # rope fusion, a GPU install): None here becomes pp there (ModelParallelConfig).
        g = args.microbatch_group_size_per_vp_stage or args.pipeline_model_parallel_size
        mb = args.global_batch_size // (args.micro_batch_size * args.data_parallel_size)
        p = args.pipeline_model_parallel_size
        if g is None or g < p or g > mb or 0 < mb % g < p:
            bad.append(f"--microbatch-group-size-per-virtual-pipeline-stage: {g} with "
                       f"{mb} microbatches and pp {p} is refused by Megatron-Core's schedule")
        # The group the plan's Program is ordered by (core/parallel.cc; pp when unsaid).
        want_g = flags_layout(plan).get("microbatch_group", p)
        if g != want_g:
            bad.append(f"--microbatch-group-size-per-virtual-pipeline-stage: Megatron-LM parsed "
                       f"{g}, the plan's layout says {want_g}")
    if bad:
        print("@@ " + "; ".join(bad))
        return 1
    n = (len(expected_values(plan)) + 1 + vocab_checked +
         bool(args.virtual_pipeline_model_parallel_size))
    print(f"@@ {n} values equal the plan")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--megatron-lm", default=os.environ.get("MEGATRON_LM"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("plans", nargs="*")
    a = ap.parse_args()
    if a.child:
        return child(a.child)
    if not a.megatron_lm:
        print("error: --megatron-lm: no Megatron-LM checkout given (or set MEGATRON_LM)",
              file=sys.stderr)
        return 2
    arguments_py = os.path.join(a.megatron_lm, "megatron", "training", "arguments.py")
    if not os.path.isfile(arguments_py):
        print(f"error: --megatron-lm: {a.megatron_lm} has no megatron/training/arguments.py",
              file=sys.stderr)
        return 2
    if not a.plans:
        print("error: plans: no plan file given", file=sys.stderr)
        return 2
    failed = False
    for path in a.plans:
        name = os.path.splitext(os.path.basename(path))[0]
        try:
            with open(path) as f:
                plan = json.load(f)
            world = plan["cluster"]["gpus"]
            if "megatron_args" not in plan:  # refused: no ranked layout runs on Megatron-Core
                raise KeyError(plan.get("megatron_note", "megatron_args"))
        except (OSError, ValueError, KeyError) as e:
            print(f"FAIL {name}: {path}: not a plan file ({e})")
            failed = True
            continue
        # WORLD_SIZE and RANK as torchrun sets them for the plan's GPUs, and the environment the
        # plan says Megatron-LM needs ("megatron_env": CUDA_DEVICE_MAX_CONNECTIONS=1 with tensor
        # parallelism, which validate_args asserts before Blackwell), nothing inherited: a
        # missing one fails the check.
        env = dict(os.environ, WORLD_SIZE=str(world), RANK="0",
                   PYTHONPATH=os.pathsep.join([a.megatron_lm, os.environ.get("PYTHONPATH", "")]))
        env.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        if plan.get("megatron_env"):
            var, _, value = plan["megatron_env"].partition("=")
            env[var] = value
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", path], env=env,
                           capture_output=True, text=True, cwd=a.megatron_lm)
        lines = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
        # The child's verdict ("@@ ..."), argparse's "error: unrecognized arguments: --x", or the
        # last line of a traceback: each names the flag or the failure.
        why = next((l[3:] for l in lines if l.startswith("@@ ")), None)
        if why is None:
            why = next((l for l in reversed(lines) if "error:" in l), lines[-1] if lines else "")
        if r.returncode == 0:
            print(f"PASS {name} ({world} GPUs): {why}")
        else:
            failed = True
            print(f"FAIL {name} ({world} GPUs): {why}")
            log = os.path.splitext(path)[0] + ".megatron.log"
            with open(log, "w") as f:
                f.write(r.stdout + r.stderr)
            print(f"  full output: {log}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
