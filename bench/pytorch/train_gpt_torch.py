#!/usr/bin/env python3
"""PyTorch baseline for exactly ptdp's GPT, for side-by-side speed comparisons (bench/gpu/compare.sh).

The model matches ptdp's runtime (runtime/model, kernels/reference/ops.h):
  - pre-LayerNorm decoder blocks (eps 1e-5): x + attn(ln1(x)), then x + mlp(ln2(x));
  - learned position embeddings, added to the word embeddings;
  - causal self-attention through F.scaled_dot_product_attention, QKV weight rows ordered
    (head, {q, k, v}, d) as Megatron-LM (and ptdp) lay them out;
  - MLP h -> ffn (4h) -> h with the tanh approximation of GeLU;
  - final LayerNorm and an output layer tied to the word embedding;
  - the vocabulary padded to a multiple of vocab_divisible_by (128) as Megatron-LM does;
  - init: N(0, 0.02) for weights and embeddings, N(0, 0.02 / sqrt(2 l)) for the attention output
    projection and the second MLP matrix, zero biases, LayerNorm weight 1 (the same distribution as
    ptdp; ptdp draws from a counter-based generator, so the values differ, not the statistics);
  - dropout p on the embedding output, the attention probabilities, and both residual branches.
Training: bf16 autocast (fp32 master weights, fp32 AdamW state), fused AdamW, eager or torch.compile.

Model FLOPs per iteration are the paper's eq. (3) without recomputation (Narayanan et al. SC'21):
  F = 72 B s l h^2 (1 + s / (6 h) + V / (12 l h)),  V the padded vocabulary,
and MFU = F / step_time / peak, with the card's dense bf16 peak given by --peak-tflops.

Prints one JSON line per run: {"impl", "mode", "model", ..., "tokens_per_s", "mfu", ...}.
"""
import argparse
import json
import math
import sys
import time


def padded_vocab(vocab, divisible_by, tp=1):
    multiple = divisible_by * tp
    return (vocab + multiple - 1) // multiple * multiple


def model_flops_per_iteration(batch, seq, layers, hidden, vocab):
    """Eq. (3) of Narayanan et al. without activation recomputation (72 instead of 96)."""
    return 72.0 * batch * seq * layers * hidden ** 2 * (
        1.0 + seq / (6.0 * hidden) + vocab / (12.0 * layers * hidden))


def build_model(torch, args):
    nn = torch.nn
    F = torch.nn.functional
    h, a, l, s = args.hidden, args.heads, args.layers, args.seq_len
    ffn = args.ffn_hidden or 4 * h
    v = padded_vocab(args.vocab, args.vocab_divisible_by)
    p = args.dropout

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(h, 3 * h)
            self.proj = nn.Linear(h, h)

        def forward(self, x):
            b, t, _ = x.shape
            # Rows of the QKV weight are (head, {q,k,v}, d): view as [b, t, a, 3, d].
            qkv = self.qkv(x).view(b, t, a, 3, h // a)
            q, k, vv = qkv.unbind(dim=3)  # each [b, t, a, d]
            y = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), vv.transpose(1, 2), is_causal=True,
                dropout_p=p if self.training else 0.0)
            return self.proj(y.transpose(1, 2).reshape(b, t, h))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(h, eps=1e-5)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(h, eps=1e-5)
            self.fc1 = nn.Linear(h, ffn)
            self.fc2 = nn.Linear(ffn, h)
            self.drop = nn.Dropout(p)

        def forward(self, x):
            x = x + self.drop(self.attn(self.ln1(x)))
            return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh")))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(v, h)
            self.wpe = nn.Embedding(s, h)
            self.drop = nn.Dropout(p)
            self.blocks = nn.ModuleList([Block() for _ in range(l)])
            self.ln_f = nn.LayerNorm(h, eps=1e-5)
            self.register_buffer("padding", torch.arange(v) >= args.vocab, persistent=False)
            self.apply(self._init)
            for blk in self.blocks:
                nn.init.normal_(blk.attn.proj.weight, std=0.02 / math.sqrt(2 * l))
                nn.init.normal_(blk.fc2.weight, std=0.02 / math.sqrt(2 * l))

        @staticmethod
        def _init(m):
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

        def forward(self, tokens, targets):
            t = tokens.shape[1]
            pos = torch.arange(t, device=tokens.device)
            x = self.drop(self.wte(tokens) + self.wpe(pos))
            for blk in self.blocks:
                x = blk(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # tied output layer
            # Padding columns never win: they are excluded as ptdp excludes them (-inf).
            logits = logits.float()
            if v > args.vocab:
                logits = logits.masked_fill(self.padding, float("-inf"))
            return F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1))

    return GPT(), v


def run(args):
    import torch

    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model, v = build_model(torch, args)
    model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    fused = device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, fused=fused)
    step_fn = model
    if args.mode == "compile":
        step_fn = torch.compile(model)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    b, s = args.batch, args.seq_len
    gen = torch.Generator(device="cpu").manual_seed(args.seed)

    def batch():
        t = torch.randint(0, args.vocab, (b, s + 1), generator=gen)
        return t[:, :-1].to(device, non_blocking=True), t[:, 1:].to(device, non_blocking=True)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def step():
        x, y = batch()
        with torch.autocast(device_type=device.type, dtype=dtype, enabled=args.dtype == "bf16"):
            loss = step_fn(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    model.train()
    for _ in range(args.warmup):
        loss = step()
    sync()
    losses = []
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
        losses.append(loss)
    sync()
    elapsed = time.perf_counter() - t0
    step_s = elapsed / max(args.steps, 1)
    tokens_per_s = b * s / step_s
    flops = model_flops_per_iteration(b, s, args.layers, args.hidden, v)
    result = {
        "impl": "pytorch",
        "mode": args.mode,
        "model": args.name,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "params": n_params,
        "layers": args.layers, "hidden": args.hidden, "heads": args.heads, "seq_len": s,
        "vocab_padded": v, "microbatch": b, "dropout": args.dropout,
        "steps": args.steps, "step_ms": step_s * 1e3,
        "tokens_per_s": tokens_per_s,
        "model_tflops_per_s": flops / step_s / 1e12,
        "last_loss": losses[-1].item() if losses else None,
    }
    if device.type == "cuda":
        result["peak_memory_GiB"] = torch.cuda.max_memory_allocated(device) / 2 ** 30
    if args.peak_tflops > 0:
        result["peak_tflops"] = args.peak_tflops
        result["mfu"] = flops / step_s / (args.peak_tflops * 1e12)
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plan", help="a ptdp plan file: the model (and dropout) come from its "
                    "\"model\" object, so both sides train the same shapes")
    ap.add_argument("--name", default="custom", help="model name for the report")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--seq-len", type=int)
    ap.add_argument("--vocab", type=int, help="unpadded vocabulary")
    ap.add_argument("--ffn-hidden", type=int, default=0, help="0: 4 * hidden")
    ap.add_argument("--vocab-divisible-by", type=int, default=128)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--batch", type=int, default=1, help="microbatch (sequences per step)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="the card's dense bf16 peak, for MFU (e.g. 989 for H100 SXM)")
    ap.add_argument("--find-max-batch", action="store_true",
                    help="double --batch until out of memory (or past --max-batch); report the "
                    "largest that ran")
    ap.add_argument("--max-batch", type=int, default=128, help="cap for --find-max-batch")
    args = ap.parse_args(argv)
    if args.plan:
        with open(args.plan) as f:
            m = json.load(f)["model"]
        args.name, args.layers, args.hidden, args.heads = m["name"], m["layers"], m["hidden"], m["heads"]
        args.seq_len, args.vocab = m["seq_len"], m["vocab"]
        args.ffn_hidden = m.get("ffn_hidden", 0)
        args.vocab_divisible_by = m.get("vocab_divisible_by", 128)
        args.dropout = m.get("dropout", 0.0)
        if not m.get("tied_embeddings", True):
            ap.error("--plan: the model has untied embeddings; this script ties them as ptdp's presets do")
    missing = [k for k in ("layers", "hidden", "heads", "seq_len", "vocab") if getattr(args, k) is None]
    if missing:
        ap.error("give --plan or all of --layers --hidden --heads --seq-len --vocab (missing: %s)"
                 % ", ".join(missing))
    if args.hidden % args.heads != 0:
        ap.error("--hidden must be a multiple of --heads")
    if not args.find_max_batch:
        print(json.dumps(run(args)), flush=True)
        return 0
    import torch
    best = None
    while args.batch <= args.max_batch:
        try:
            best = run(args)
        except torch.cuda.OutOfMemoryError:
            break
        finally:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        args.batch *= 2
    if best is None:
        print(json.dumps({"impl": "pytorch", "mode": args.mode, "model": args.name,
                          "error": "microbatch 1 does not fit"}), flush=True)
        return 1
    print(json.dumps(best), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
