#!/usr/bin/env python3
"""transformers' side of bench/hf/hf_check.sh (docs/checkpoints.md "Hugging Face GPT-2").

  hf_check.py random OUT --layers L --hidden H --heads A --positions N --vocab V [--inner F] [--untied]
                     [--llama|--mistral|--qwen2|--qwen3|--nemotron --kv-heads K [--rope-theta T]
                      [--head-dim D]]
                     [--sliding-window W (with --mistral)]
      a GPT2LMHeadModel (or a LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
      Qwen3ForCausalLM or NemotronForCausalLM) with every parameter drawn at random (biases and
      norms included, so that a misplaced bias or a permuted head shows), saved with
      save_pretrained(safe_serialization)
  hf_check.py compare HFDIR BATCH SEQ_LEN LOGITS [--loss NAME=VALUE ...] [--logit-tol T] [--loss-tol R]
      AutoModelForCausalLM.from_pretrained(HFDIR) (GPT2LMHeadModel or LlamaForCausalLM, as its
      config.json says) in fp32, eval mode, on the inputs of BATCH (a ptdp
      token file of sequences of SEQ_LEN + 1 tokens): its logits against ptdp's (LOGITS, float32
      [B][S][V] from `ptdp forward --out`), and its mean next-token loss against each ptdp loss
      given. Prints one PASS/FAIL line per check; exit 1 on any FAIL.
  hf_check.py fp8 SRC OUT DEQUANT [--block R,C]
      SRC's weights in DeepSeek-V3's released form (F8_E4M3 blocks with NAME_scale_inv) into OUT,
      and dequantized in float32 into DEQUANT (transformers' side of the comparison)
"""
import argparse
import struct
import sys

import numpy as np
import torch
from transformers import (AutoModelForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM,
                          GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, MistralConfig, MistralForCausalLM, NemotronConfig,
                          NemotronForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)


def read_tokens(path):
    b = open(path, "rb").read()
    if b[:8] != b"PTDPTOK\0":
        sys.exit(f"{path}: not a ptdp token file")
    _, width, count = struct.unpack("<IIQ", b[8:24])
    dt = np.uint16 if width == 2 else np.uint32
    return np.frombuffer(b[24:24 + count * width], dtype=dt).astype(np.int64)


def random_llama(a):
    kw = dict(num_hidden_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads,
              num_key_value_heads=a.kv_heads, intermediate_size=a.inner,
              max_position_embeddings=a.positions, vocab_size=a.vocab,
              rms_norm_eps=1e-5, rope_theta=a.rope_theta, tie_word_embeddings=not a.untied,
              attention_dropout=0.0, bos_token_id=a.vocab - 1, eos_token_id=a.vocab - 1)
    if a.rope_scaling:  # Llama 3.1's: factor, low and high frequency factors, original length
        factor, low, high, original = a.rope_scaling.split(",")
        kw["rope_scaling"] = {"rope_type": "llama3", "factor": float(factor),
                              "low_freq_factor": float(low), "high_freq_factor": float(high),
                              "original_max_position_embeddings": int(original)}
    if a.yarn:  # YaRN: factor, original length, mscale and mscale_all_dim (0: the key absent)
        factor, original, mscale, all_dim = a.yarn.split(",")
        kw["rope_scaling"] = {"rope_type": "yarn", "factor": float(factor),
                              "original_max_position_embeddings": int(original),
                              "beta_fast": 32.0, "beta_slow": 1.0}
        for key, v in (("mscale", float(mscale)), ("mscale_all_dim", float(all_dim))):
            if v != 0:
                kw["rope_scaling"][key] = v
    if a.nemotron:  # LayerNorm1P with biases, squared ReLU, RoPE on half of each head
        kw["norm_eps"] = kw.pop("rms_norm_eps")
        cfg = NemotronConfig(hidden_act="relu2", partial_rotary_factor=0.5, attention_bias=False,
                             mlp_bias=False, head_dim=a.hidden // a.heads, **kw)
        cls = NemotronForCausalLM
    elif a.mistral:  # Llama's computation, with --sliding-window's window on every layer or none
        cfg, cls = MistralConfig(sliding_window=a.sliding_window, **kw), MistralForCausalLM
    elif a.qwen2:  # biases on q, k and v, rms_norm_eps 1e-6
        kw["rms_norm_eps"] = 1e-6
        cfg, cls = Qwen2Config(use_sliding_window=False, **kw), Qwen2ForCausalLM
    elif a.deepseek:  # DeepSeek-V3's latent attention (rotated rows interleaved) and router
        kw.pop("num_key_value_heads")
        kw["rms_norm_eps"] = 1e-6  # the latents' norms' (DeepseekV3RMSNorm's default) too
        cfg = DeepseekV3Config(
            q_lora_rank=24, kv_lora_rank=20, qk_nope_head_dim=24, qk_rope_head_dim=8,
            v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
            n_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1,
            routed_scaling_factor=2.5, norm_topk_prob=True, rope_interleave=True,
            num_nextn_predict_layers=0,  # transformers makes no depth
            num_key_value_heads=a.heads, attention_bias=False, **kw)
        cls = DeepseekV3ForCausalLM
    elif a.qwen3:  # QK norms, heads of --head-dim, rms_norm_eps 1e-6
        kw["rms_norm_eps"] = 1e-6
        cfg = Qwen3Config(use_sliding_window=False, head_dim=a.head_dim, attention_bias=False, **kw)
        cls = Qwen3ForCausalLM
    else:
        cfg, cls = LlamaConfig(**kw), LlamaForCausalLM
    torch.manual_seed(a.seed)
    model = cls(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    model.save_pretrained(a.out, safe_serialization=True, max_shard_size=a.max_shard_size)
    print(f"random {cls.__name__} ({sum(p.numel() for p in model.parameters())} parameters, "
          f"{a.heads} heads over {a.kv_heads}, rope_theta {a.rope_theta:g}, tied {not a.untied}) "
          f"saved to {a.out}")


def random_model(a):
    if a.llama or a.mistral or a.qwen2 or a.qwen3 or a.nemotron or a.deepseek:
        return random_llama(a)
    cfg = GPT2Config(n_layer=a.layers, n_embd=a.hidden, n_head=a.heads, n_positions=a.positions,
                     vocab_size=a.vocab, n_inner=a.inner, activation_function="gelu_new",
                     layer_norm_epsilon=1e-5, tie_word_embeddings=not a.untied,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     bos_token_id=a.vocab - 1, eos_token_id=a.vocab - 1)
    torch.manual_seed(a.seed)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln_" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    model.save_pretrained(a.out, safe_serialization=True)
    print(f"random GPT2LMHeadModel ({sum(p.numel() for p in model.parameters())} parameters, "
          f"tied {not a.untied}) saved to {a.out}")


def fp8(a):
    """a.src's folder as DeepSeek-V3's released weights are stored: every 2-D Linear weight (not the
    embeddings, the output layer or the router) in float8_e4m3fn, in blocks of a.block with a
    float32 NAME_scale_inv each (amax / 448), into a.out with quantization_config; and the same
    weights dequantized (the values ptdp must read) in float32 into a.dequant."""
    import json
    import os
    import shutil
    from safetensors.torch import load_file, save_file
    br, bc = (int(x) for x in a.block.split(","))
    tensors = load_file(os.path.join(a.src, "model.safetensors"))
    quantized, dequantized, moved = {}, {}, 0.0
    for name, w in tensors.items():
        skip = ("embed_tokens" in name or "lm_head" in name or name.endswith("mlp.gate.weight")
                or w.dim() != 2)
        if skip:
            quantized[name] = dequantized[name] = w.float().contiguous()
            continue
        rows, cols = w.shape
        nr, nc = -(-rows // br), -(-cols // bc)
        scale = torch.zeros(nr, nc)
        for i in range(nr):
            for j in range(nc):
                amax = w[i * br:(i + 1) * br, j * bc:(j + 1) * bc].abs().max().float()
                scale[i, j] = max(amax.item(), 1e-12) / 448.0
        full = scale.repeat_interleave(br, 0)[:rows].repeat_interleave(bc, 1)[:, :cols]
        q = (w.float() / full).to(torch.float8_e4m3fn)
        quantized[name] = q.contiguous()
        quantized[name + "_scale_inv"] = scale.contiguous()
        dequantized[name] = (q.float() * full).contiguous()
        moved = max(moved, (dequantized[name] - w.float()).abs().max().item())
    for out, values in ((a.out, quantized), (a.dequant, dequantized)):
        os.makedirs(out, exist_ok=True)
        for f in os.listdir(a.src):
            if not f.endswith(".safetensors") and not f.endswith(".index.json"):
                shutil.copy(os.path.join(a.src, f), out)
        save_file(values, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    config = json.load(open(os.path.join(a.src, "config.json")))
    config["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                     "quant_method": "fp8", "weight_block_size": [br, bc]}
    json.dump(config, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    print(f"fp8: {sum(1 for n in quantized if n.endswith('_scale_inv'))} weights in blocks of "
          f"{br} x {bc} into {a.out} (rounding moved a weight by up to {moved:.3e}); "
          f"dequantized into {a.dequant}")


def compare(a):
    model = AutoModelForCausalLM.from_pretrained(a.hfdir, torch_dtype=torch.float32)
    model.eval()
    print(f"transformers: {type(model).__name__} from {a.hfdir}")
    S = a.seq_len
    seqs = read_tokens(a.batch).reshape(-1, S + 1)
    B, V = seqs.shape[0], model.config.vocab_size
    inputs = torch.tensor(seqs[:, :S])
    targets = torch.tensor(seqs[:, 1:])
    with torch.no_grad():
        logits = model(inputs).logits.float()
    ours = np.fromfile(a.logits, dtype="<f4")
    ok = True
    if ours.size != B * S * V:
        print(f"FAIL logits: ptdp wrote {ours.size} values, transformers has {B} x {S} x {V}")
        return False
    ours = torch.from_numpy(ours.reshape(B, S, V).copy())
    diff = (logits - ours).abs().max().item()
    scale = logits.abs().max().item()
    good = diff <= a.logit_tol
    ok &= good
    print(f"{'PASS' if good else 'FAIL'} logits: max |transformers - ptdp| = {diff:.3e} over "
          f"{B} x {S} x {V} (max |logit| {scale:.3f}; tolerance {a.logit_tol:g})")
    hf_loss = torch.nn.functional.cross_entropy(logits.double().reshape(-1, V),
                                                targets.reshape(-1)).item()
    for item in a.loss:
        name, value = item.split("=", 1)
        value = float(value)
        rel = abs(value - hf_loss) / abs(hf_loss)
        good = rel <= a.loss_tol
        ok &= good
        print(f"{'PASS' if good else 'FAIL'} loss: transformers {hf_loss:.9f}, {name} {value:.9f} "
              f"(relative difference {rel:.3e}; tolerance {a.loss_tol:g})")
    return ok


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("random")
    r.add_argument("out")
    for k in ("layers", "hidden", "heads", "positions", "vocab"):
        r.add_argument("--" + k, type=int, required=True)
    r.add_argument("--inner", type=int, default=None)
    r.add_argument("--untied", action="store_true")
    r.add_argument("--llama", action="store_true")  # a LlamaForCausalLM (--inner: its MLP)
    r.add_argument("--mistral", action="store_true")  # a MistralForCausalLM
    r.add_argument("--sliding-window", type=int, default=None)  # Mistral's (None: no window)
    r.add_argument("--qwen2", action="store_true")  # a Qwen2ForCausalLM (q, k, v biases)
    r.add_argument("--qwen3", action="store_true")  # a Qwen3ForCausalLM (QK norms)
    r.add_argument("--nemotron", action="store_true")  # a NemotronForCausalLM
    r.add_argument("--deepseek", action="store_true")  # a DeepseekV3ForCausalLM
    r.add_argument("--head-dim", type=int, default=None)  # Qwen3's, any width
    r.add_argument("--kv-heads", type=int, default=0)
    r.add_argument("--rope-theta", type=float, default=10000.0)
    r.add_argument("--rope-scaling", default="")  # FACTOR,LOW,HIGH,ORIGINAL: Llama 3.1's
    r.add_argument("--yarn", default="")  # FACTOR,ORIGINAL,MSCALE,MSCALE_ALL_DIM: YaRN's
    r.add_argument("--max-shard-size", default="5GB")  # small: model.safetensors.index.json
    r.add_argument("--seed", type=int, default=0)
    q = sub.add_parser("fp8")
    q.add_argument("src")
    q.add_argument("out")
    q.add_argument("dequant")
    q.add_argument("--block", default="128,128")
    c = sub.add_parser("compare")
    c.add_argument("hfdir")
    c.add_argument("batch")
    c.add_argument("seq_len", type=int)
    c.add_argument("logits")
    c.add_argument("--loss", action="append", default=[])
    c.add_argument("--logit-tol", type=float, default=1e-4)
    c.add_argument("--loss-tol", type=float, default=1e-5)
    a = ap.parse_args()
    torch.set_num_threads(2)
    if a.cmd == "random":
        random_model(a)
        return 0
    if a.cmd == "fp8":
        fp8(a)
        return 0
    return 0 if compare(a) else 1


if __name__ == "__main__":
    sys.exit(main())
