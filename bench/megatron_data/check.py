#!/usr/bin/env python3
"""`ptdp tokenize --megatron` against Megatron-Core's own indexed-dataset writer and reader.

  check.py PTDP WORKDIR

Needs torch, numpy and megatron-core (PyPI) in the running interpreter (bench/megatron_data/
check.sh makes a venv). For each dtype Megatron-Core picks (uint16 for a vocabulary under 65,500,
int32 above) and int64, writes a dataset of random documents with
megatron.core.datasets.indexed_dataset.IndexedDatasetBuilder (documents of one and of several
sequences, as preprocess_data.py's sentence splitting makes them), converts it with `ptdp tokenize
--megatron`, and compares the token file with the concatenation of IndexedDataset's sequences, and
its header with the counts. Prints one PASS/FAIL line per dataset; exit 1 on any FAIL.
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


def main():
    ptdp, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = numpy.random.default_rng(0)
    ok = True
    ok &= check(ptdp, work, "gpt2-vocab", numpy.uint16, 50257, rng)
    ok &= check(ptdp, work, "llama3-vocab", numpy.int32, 128256, rng)
    ok &= check(ptdp, work, "int64", numpy.int64, 151936, rng)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
