#!/usr/bin/env python3
"""Splits a Hugging Face folder's model.safetensors into N shards as save_pretrained's
max_shard_size does: model-0000k-of-0000N.safetensors (tensors in file order, split evenly) and
model.safetensors.index.json (metadata and weight_map), config.json copied. No torch.
usage: shard_safetensors.py IN_DIR OUT_DIR N [--misplace NAME]  (--misplace: the index names the
wrong shard for tensor NAME, for the refusal test)
"""
import json
import os
import shutil
import struct
import sys


def main():
    src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    misplace = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--misplace" else None
    b = open(os.path.join(src, "model.safetensors"), "rb").read()
    hlen = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + hlen])
    meta = header.pop("__metadata__", {})
    names = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(src, "config.json"), out)
    weight_map, total = {}, 0
    per = -(-len(names) // n)
    for k in range(n):
        file = f"model-{k + 1:05d}-of-{n:05d}.safetensors"
        part, data, off = {}, b"", 0
        for name in names[k * per:(k + 1) * per]:
            lo, hi = header[name]["data_offsets"]
            part[name] = dict(header[name], data_offsets=[off, off + hi - lo])
            data += b[8 + hlen + lo:8 + hlen + hi]
            off += hi - lo
            weight_map[name] = file
        total += off
        part["__metadata__"] = meta
        h = json.dumps(part).encode()
        h += b" " * (-(8 + len(h)) % 8)
        open(os.path.join(out, file), "wb").write(struct.pack("<Q", len(h)) + h + data)
    if misplace:
        weight_map[misplace] = f"model-{n:05d}-of-{n:05d}.safetensors"
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)


if __name__ == "__main__":
    main()
