#!/usr/bin/env python3
"""`ptdp tokenize --megatron` against Megatron-Core's own indexed-dataset writer and reader.

  check.py PTDP WORKDIR

Needs torch, numpy and megatron-core (PyPI) in the running interpreter (bench/megatron_data/
check.sh makes a venv). For each dtype Megatron-Core picks (uint16 for a vocabulary under 65,500,
int32 above) and int64, writes a dataset of random documents with
megatron.core.datasets.indexed_dataset.IndexedDatasetBuilder (documents of one and of several
sequences, as preprocess_data.py's sentence splitting makes them), converts it with `ptdp tokenize
--megatron`, and compares the token file with the concatenation of IndexedDataset's sequences, and
its header with the counts. Then `ptdp train --data W1 F1 W2 F2 ...`'s blend against Megatron-Core's
BlendedDataset order (megatron.core.datasets.helpers.build_blending_indices): token files of
disjoint token ranges blended, `ptdp forward --data (the blend) --step k --batch-out` writes the
batches ptdp train reads, and each sequence's file must be the one Megatron-Core's order gives its
sample. Prints one PASS/FAIL line per check; exit 1 on any FAIL.
"""
import os
import struct
import subprocess
import sys

import numpy
import torch
from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder


def read_token_file(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, width, count = data[:8], *struct.unpack("<IIQ", data[8:24])
    assert magic == b"PTDPTOK\0" and version == 1, (magic, version)
    dtype = {2: "<u2", 4: "<u4"}[width]
    return width, numpy.frombuffer(data[24:], dtype=dtype), count


def check(ptdp, work, name, dtype, vocab, rng):
    prefix = os.path.join(work, name)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
    for _ in range(50):
        parts = int(rng.integers(1, 4))
        lengths = [int(rng.integers(0 if parts > 1 else 1, 40)) for _ in range(parts)]
        tokens = rng.integers(0, vocab, size=sum(lengths))
        builder.add_document(torch.tensor(tokens), lengths)
    builder.finalize(prefix + ".idx")
    ds = IndexedDataset(prefix)
    want = numpy.concatenate([numpy.asarray(ds[i], dtype=numpy.int64) for i in range(len(ds))])
    out = prefix + ".tok"
    run = subprocess.run([ptdp, "tokenize", "--megatron", prefix, "--out", out],
                         capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAIL {name}: ptdp tokenize --megatron exited {run.returncode}: {run.stderr.strip()}")
        return False
    width, got, count = read_token_file(out)
    documents = len(ds.document_indices) - 1
    ok = (count == len(want) and numpy.array_equal(got.astype(numpy.int64), want)
          and f"{documents} documents, {len(ds)} sequences" in run.stdout)
    print(f"{'PASS' if ok else 'FAIL'} {name}: Megatron-Core {numpy.dtype(dtype).name} dataset of "
          f"{documents} documents, {len(ds)} sequences, {len(want)} tokens (vocabulary {vocab}); "
          f"the token file holds {count} tokens of {width} bytes, "
          f"{'equal to' if ok else 'NOT equal to'} IndexedDataset's; ptdp: {run.stdout.strip()}")
    return ok


def write_token_file(path, tokens):
    tokens = numpy.asarray(tokens, dtype="<u2")
    with open(path, "wb") as f:
        f.write(b"PTDPTOK\0" + struct.pack("<IIQ", 1, 2, len(tokens)) + tokens.tobytes())


def check_blend(ptdp, work, weights, rng, steps=6, batch=16):
    """The file of every sequence of ptdp's first `steps` batches against Megatron-Core's order."""
    from megatron.core.datasets import helpers
    name = "blend-" + "-".join(f"{w:g}" for w in weights)
    folder = os.path.join(work, name)
    os.makedirs(folder, exist_ok=True)
    words, span = [], 256 // len(weights)  # file f holds tokens [f span, (f + 1) span)
    for f, w in enumerate(weights):
        path = os.path.join(folder, f"f{f}.tok")
        write_token_file(path, rng.integers(f * span, (f + 1) * span, size=3000))
        words += [f"{w:g}", path]
    plan, ck = os.path.join(folder, "plan.json"), os.path.join(folder, "ck")
    for cmd in ([ptdp, "plan", "--model", "tiny", "--cluster", "cpu", "--gpus", "1", "--global-batch",
                 str(batch), "--fix", f"tp=1,pp=1,dp=1,mbs={batch},schedule=1f1b,recompute=none",
                 "--software", "ptdp", "--out", plan],
                [ptdp, "train", "--plan", plan, "--data", *words, "--steps", "1", "--save", ck]):
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            print(f"FAIL {name}: {' '.join(cmd[:2])} exited {run.returncode}: {run.stderr.strip()}")
            return False
    got = []
    for k in range(1, steps + 1):
        out = os.path.join(folder, f"batch{k}.tok")
        run = subprocess.run([ptdp, "forward", "--checkpoint", ck, "--data", *words, "--step", str(k),
                              "--global-batch", str(batch), "--batch-out", out],
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(f"FAIL {name}: ptdp forward --step {k} exited {run.returncode}: {run.stderr.strip()}")
            return False
        _, tokens, count = read_token_file(out)
        seqs = tokens.reshape(batch, count // batch)
        files = seqs // span
        if not all((row == row[0]).all() for row in files):
            print(f"FAIL {name}: a sequence of batch {k} mixes files")
            return False
        got += [int(row[0]) for row in files]
    size = steps * batch
    w = numpy.asarray(weights, dtype=numpy.float64)
    w = w / w.sum()  # as BlendedMegatronDatasetConfig normalises them
    dataset_index = numpy.zeros(size, dtype=numpy.int16)
    dataset_sample_index = numpy.zeros(size, dtype=numpy.int64)
    helpers.build_blending_indices(dataset_index, dataset_sample_index, w, len(weights), size, False)
    want = [int(i) for i in dataset_index]
    same = sum(g == m for g, m in zip(got, want))
    ok = same == size
    counts = [got.count(f) for f in range(len(weights))]
    print(f"{'PASS' if ok else 'FAIL'} {name}: the files of ptdp's {size} sequences ({steps} batches "
          f"of {batch}; per file {counts}) equal Megatron-Core's build_blending_indices at {same} of "
          f"{size} samples")
    return ok


def main():
    ptdp, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = numpy.random.default_rng(0)
    ok = True
    ok &= check(ptdp, work, "gpt2-vocab", numpy.uint16, 50257, rng)
    ok &= check(ptdp, work, "llama3-vocab", numpy.int32, 128256, rng)
    ok &= check(ptdp, work, "int64", numpy.int64, 151936, rng)
    ok &= check_blend(ptdp, work, [0.3, 0.7], rng)
    ok &= check_blend(ptdp, work, [2, 5, 3], rng)
    ok &= check_blend(ptdp, work, [0.05, 0.15, 0.5, 0.3], rng)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
