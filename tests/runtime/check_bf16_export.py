#!/usr/bin/env python3
"""`ptdp export --dtype bf16` against the fp32 export of the same checkpoint (tests/runtime/
checkpoint.sh reshard_llama), without torch: the same tensors, names, shapes and order, BF16,
and each value the fp32 one rounded to nearest even (NaN kept a NaN), written out here
independently of the C++.
usage: check_bf16_export.py FP32.safetensors BF16.safetensors
Prints one line; exit 1 on the first difference.
"""
import json
import struct
import sys


def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return h, b, 8 + n


def bf16_of(bits):
    """The bf16 bits of fp32 `bits`, rounded to nearest even."""
    if (bits & 0x7F800000) == 0x7F800000 and (bits & 0x007FFFFF):
        return (bits >> 16) | 0x0040  # a quiet NaN
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def main():
    (h32, b32, s32), (h16, b16, s16) = read(sys.argv[1]), read(sys.argv[2])
    order = lambda h: sorted(h, key=lambda k: h[k]["data_offsets"][0])
    if order(h32) != order(h16):
        sys.exit("FAIL: the bf16 file's tensors are not the fp32 file's, in its order")
    values = 0
    for name in order(h32):
        a, b = h32[name], h16[name]
        if a["dtype"] != "F32" or b["dtype"] != "BF16" or a["shape"] != b["shape"]:
            sys.exit(f"FAIL: {name}: {a['dtype']} {a['shape']} against {b['dtype']} {b['shape']}")
        lo, hi = a["data_offsets"]
        wide = struct.unpack("<%dI" % ((hi - lo) // 4), b32[s32 + lo:s32 + hi])
        lo, hi = b["data_offsets"]
        narrow = struct.unpack("<%dH" % ((hi - lo) // 2), b16[s16 + lo:s16 + hi])
        for i, (w, n) in enumerate(zip(wide, narrow)):
            if bf16_of(w) != n:
                sys.exit(f"FAIL: {name}[{i}]: fp32 bits {w:#010x} give bf16 {n:#06x}, "
                         f"not {bf16_of(w):#06x}")
        values += len(wide)
    print(f"bf16 export: {len(h32)} tensors, {values} values, each the fp32 export's rounded to "
          "nearest even")


if __name__ == "__main__":
    main()
