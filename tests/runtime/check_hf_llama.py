#!/usr/bin/env python3
"""The Hugging Face Llama folder `ptdp export --to hf-llama` wrote (tests/runtime/checkpoint.sh
reshard_llama), without torch:
  1. `ptdp plan --model <folder>/config.json` read back the plan's model (every field that shapes
     or computes the layers);
  2. model.safetensors holds exactly LlamaForCausalLM's tensors with their shapes;
  3. layer 0's q_proj, k_proj, v_proj, gate_proj and up_proj are the rows of the checkpoint's QKV
     and fc1 that the runtime's layouts say (kernels/reference/qkv_layout.h: [kv][group + 2][D];
     fc1 [f][2]), written out here independently of the C++.
usage: check_hf_llama.py PLAN.json PLANNED.json MODEL.safetensors CHECKPOINT_FOLDER
Prints one line; exit 1 on the first difference.
"""
import json
import os
import struct
import sys


def header(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b, 8 + n


def floats(path, name):
    h, b, start = header(path)
    t = h[name]
    lo, hi = t["data_offsets"]
    assert t["dtype"] == "F32", t
    return list(struct.unpack("<%df" % ((hi - lo) // 4), b[start + lo:start + hi])), t["shape"]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    plan, planned, st, ck = sys.argv[1:5]
    m, back = json.load(open(plan))["model"], json.load(open(planned))["model"]
    defaults = {"kv_heads": 0, "ffn_hidden": 0, "rotary_base": 10000, "linear_bias": True,
                "rope_scaling_factor": 0}
    for key in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len",
                "tied_embeddings", "rmsnorm", "swiglu", "rotary", "linear_bias", "rotary_base",
                "rope_scaling_factor", "rope_low_freq_factor", "rope_high_freq_factor",
                "rope_original_max_positions"):
        a, b = m.get(key, defaults.get(key)), back.get(key, defaults.get(key))
        if a != b:
            fail(f"config.json read back: model.{key} is {b}, the plan's {a}")
    L, h, a, kv, f, V = (m["layers"], m["hidden"], m["heads"], m["kv_heads"], m["ffn_hidden"],
                         m["vocab"])
    d = h // a
    want = {"model.embed_tokens.weight": [V, h], "model.norm.weight": [h], "lm_head.weight": [V, h]}
    for l in range(L):
        p = f"model.layers.{l}."
        want.update({p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
                     p + "self_attn.q_proj.weight": [a * d, h],
                     p + "self_attn.k_proj.weight": [kv * d, h],
                     p + "self_attn.v_proj.weight": [kv * d, h],
                     p + "self_attn.o_proj.weight": [h, a * d],
                     p + "mlp.gate_proj.weight": [f, h], p + "mlp.up_proj.weight": [f, h],
                     p + "mlp.down_proj.weight": [h, f]})
    got = {k: v["shape"] for k, v in header(st)[0].items() if k != "__metadata__"}
    if got != want:
        fail(f"tensors: extra {sorted(set(got) - set(want))}, missing {sorted(set(want) - set(got))}, "
             f"or shapes differ")
    step = sorted(x for x in os.listdir(ck) if x.startswith("step-"))[-1]
    shard = os.path.join(ck, step, "pp0-tp0.safetensors")
    qkv, _ = floats(shard, "layer0.attn.qkv.weight")
    fc1, _ = floats(shard, "layer0.mlp.fc1.weight")
    group = a // kv

    def row(t, r):
        return t[r * h:(r + 1) * h]

    parts = {
        "self_attn.q_proj": [(hh // group) * (group + 2) * d + (hh % group) * d + e
                             for hh in range(a) for e in range(d)],
        "self_attn.k_proj": [(g * (group + 2) + group) * d + e for g in range(kv) for e in range(d)],
        "self_attn.v_proj": [(g * (group + 2) + group + 1) * d + e for g in range(kv) for e in range(d)],
        "mlp.gate_proj": [2 * i for i in range(f)],
        "mlp.up_proj": [2 * i + 1 for i in range(f)],
    }
    for name, rows in parts.items():
        src = fc1 if name.startswith("mlp") else qkv
        hf, _ = floats(st, f"model.layers.0.{name}.weight")
        for i, r in enumerate(rows):
            if row(hf, i) != row(src, r):
                fail(f"model.layers.0.{name}.weight row {i} is not the checkpoint's row {r}")
    print(f"hf-llama folder: {len(want)} tensors as LlamaForCausalLM names them; config.json reads "
          f"back as the plan's model; layer 0's q, k, v, gate and up rows are the checkpoint's")


if __name__ == "__main__":
    main()
