#!/usr/bin/env python3
"""Where the GPU time goes: ncu's CSV (--csv --print-units base, metric gpu__time_duration.sum)
grouped by kernel name, largest total first, with launches, mean and share of all kernel time.

usage: bench/gpu/kernel_table.py KERNELS.csv [--top N]
"""
import csv
import sys


def rows_of(path):
    with open(path, newline="") as f:
        lines = [l for l in f if not l.startswith("==")]  # ncu's own ==PROF== messages
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"kernel_table: no ncu CSV header in {path}")
    return list(csv.DictReader(lines[start:]))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    top = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--top" else 30
    by_name = {}
    for r in rows_of(sys.argv[1]):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}.get(r.get("Metric Unit"), None)
        if scale is None:
            sys.exit(f"kernel_table: unknown unit {r.get('Metric Unit')!r}")
        us = float(r["Metric Value"].replace(",", "")) * scale
        name = r["Kernel Name"].split("(")[0][:90]
        n, t = by_name.get(name, (0, 0.0))
        by_name[name] = (n + 1, t + us)
    total = sum(t for _, t in by_name.values())
    if total <= 0:
        sys.exit("kernel_table: no kernel durations in the CSV")
    print(f"{'kernel':90s} {'launches':>8s} {'total_ms':>10s} {'mean_us':>9s} {'share':>6s}")
    for name, (n, t) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{name:90s} {n:8d} {t / 1e3:10.3f} {t / n:9.1f} {100 * t / total:5.1f}%")
    print(f"{'all kernels':90s} {sum(n for n, _ in by_name.values()):8d} {total / 1e3:10.3f}")


if __name__ == "__main__":
    main()
