#!/usr/bin/env python3
"""Static checks of the CUDA kernels that need no GPU (ctest label gpu_static).

  check_kernels.py budgets BUDGETS.json LOG...     every kernel in the ptxas -v logs has a budget,
                                                   uses at most its registers and spills nothing
  check_kernels.py write-budgets BUDGETS.json LOG... rewrite the budgets from today's counts
  check_kernels.py tensor-cores FILE --expect absent|present
                                                   FILE is SASS (cuobjdump -sass) or PTX (nvcc -ptx)
  check_kernels.py vector-access PTX              every 2/4/8-wide pack kernel of runtime/cuda
                                                   loads and stores 16 bytes at a time
  check_kernels.py vector-access PTX --loads-only  the same for loads alone: row reductions whose
                                                   outputs are a few scalars per row (the
                                                   cross-entropy's statistics)

A budget is today's register count plus 10%, rounded up to the allocation unit of 8 registers
(at most 255): a kernel may grow a little, but not by a step that costs occupancy unnoticed.
"""
import json
import math
import re
import subprocess
import sys

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
REGS = re.compile(r"Used (\d+) registers")


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                             check=True).stdout.splitlines()
        return dict(zip(names, out))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def parse(logs):
    """ptxas -v output -> {kernel: {"registers", "stack", "spill_stores", "spill_loads", "file"}}."""
    kernels = {}
    for path in logs:
        current = None
        for line in open(path, errors="replace"):
            m = ENTRY.search(line)
            if m:
                current = m.group(1)
                kernels[current] = {"file": path.rsplit("/", 1)[-1].split(".")[0]}
                continue
            if current is None:
                continue
            m = PROPS.search(line)
            if m:
                k = kernels[current]
                k["stack"], k["spill_stores"], k["spill_loads"] = map(int, m.groups())
            m = REGS.search(line)
            if m:
                kernels[current]["registers"] = int(m.group(1))
                current = None
    names = demangle(sorted(kernels))
    return {names[k]: v for k, v in kernels.items()}


def budget(regs):
    return min(255, int(math.ceil(regs * 1.10 / 8.0)) * 8)


def check_budgets(path, logs):
    kernels = parse(logs)
    if not kernels:
        print("no kernels found in the ptxas logs %s" % " ".join(logs))
        return 1
    budgets = json.load(open(path))["registers"]
    bad = 0
    for name, k in sorted(kernels.items()):
        regs, spills = k.get("registers", -1), k.get("spill_stores", 0) + k.get("spill_loads", 0)
        b = budgets.get(name)
        verdict = "ok"
        if b is None:
            verdict = "NO BUDGET (add it to %s: today's count + 10%%, see its note)" % path
        elif regs > b:
            verdict = "OVER BUDGET (%d > %d)" % (regs, b)
        if spills:
            verdict = ("SPILLS %d bytes; " % spills) + verdict
        if verdict != "ok":
            bad += 1
        print("%-4s regs %3d budget %4s stack %4d spills %3d  %s  [%s] %s" % (
            "FAIL" if verdict != "ok" else "ok", regs, b if b is not None else "-", k.get("stack", 0),
            spills, k["file"], name[:120], "" if verdict == "ok" else "<- " + verdict))
    gone = sorted(set(budgets) - set(kernels))
    if gone:
        print("note: %d budgets name no kernel in these logs (removed or renamed?), e.g. %s"
              % (len(gone), gone[0][:100]))
    print("%d kernels, %d over budget or spilling" % (len(kernels), bad))
    return 1 if bad else 0


def write_budgets(path, logs):
    kernels = parse(logs)
    json.dump({"note": "ptxas -v register budgets for sm_90a (tests/gpu_static): today's count + 10%, "
                       "rounded up to 8 (check_kernels.py write-budgets); spills must stay 0",
               "registers": {n: budget(k["registers"]) for n, k in sorted(kernels.items())},
               "today": {n: k["registers"] for n, k in sorted(kernels.items())}},
              open(path, "w"), indent=1, sort_keys=True)
    print("wrote %d budgets to %s" % (len(kernels), path))
    return 0


def tensor_cores(path, expect):
    text = open(path, errors="replace").read()
    sass = "Function :" in text or "/*0000*/" in text
    if sass:  # HMMA (mma.sync), HGMMA (wgmma, bf16/fp16), QGMMA (fp8), IMMA/IGMMA (integer)
        pat = re.compile(r"\b(HMMA|HGMMA|QGMMA|IMMA|IGMMA|BMMA)\b")
    else:     # PTX: mma.sync / wmma / wgmma
        pat = re.compile(r"^\s*(@\S+\s+)?(mma\.sync|wmma\.mma|wgmma\.mma_async)", re.M)
    hits = pat.findall(text)
    kind = "SASS" if sass else "PTX (no cuobjdump here; SASS not read)"
    print("%s: %d tensor-core instructions in %s" % (kind, len(hits), path.rsplit("/", 1)[-1]))
    if expect == "absent" and hits:
        print("KNOWN MISS RESOLVED: the attention kernel now uses tensor cores. Flip this test: "
              "tests/gpu_static/CMakeLists.txt, --expect present, and rename it "
              "cuda_attention_tensor_cores.")
        return 1
    if expect == "present" and not hits:
        print("the attention kernel has no tensor-core instructions")
        return 1
    if expect == "absent":
        print("known miss (not a pass): attention runs on CUDA cores, no tensor-core instruction")
    return 0


def vector_access(path, loads_only=False):
    """Every pack kernel of V > 1 (runtime/cuda/elementwise_packs.h, layernorm_packs.h: a mangled
    name with Packs and a template argument Li2E, Li4E or Li8E) reads and writes its tensors in
    16-byte accesses (a kernel that stores only through atomics: reads). loads_only: reads only
    (a row reduction writes a few scalars per row, never a pack)."""
    text = open(path, errors="replace").read()
    entries = re.split(r"\n(?=\.(?:visible\s+)?\.?entry\s)", text)
    wide_ld = re.compile(r"ld\.global(?:\.nc)?(?:\.L1::\w+)?\.v4\.(?:f32|u32|b32)|ld\.global(?:\.nc)?\.v2\.(?:u64|b64|f64)")
    wide_st = re.compile(r"st\.global\.v4\.(?:f32|u32|b32)|st\.global\.v2\.(?:u64|b64|f64)")
    checked = bad = 0
    for e in entries:
        m = re.match(r"\.(?:visible\s+)?\.?entry\s+(\S+?)\(", e)
        if not m or "Packs" not in m.group(1) or not re.search(r"Li[248]E", m.group(1)):
            continue
        checked += 1
        # A reduction that writes only through atomics (LnBwdParamPacks) has no st.global at all.
        stores_ok = loads_only or bool(wide_st.search(e)) or not re.search(r"\bst\.global", e)
        ok = bool(wide_ld.search(e)) and stores_ok
        bad += not ok
        print("%-4s %s" % ("ok" if ok else "NO 16-BYTE ACCESS", m.group(1)))
    print("%d pack kernels, %d without 16-byte loads%s" % (checked, bad, "" if loads_only else " and stores"))
    return 0 if checked > 0 and bad == 0 else 1


def main(argv):
    if len(argv) >= 3 and argv[0] == "budgets":
        return check_budgets(argv[1], argv[2:])
    if len(argv) >= 3 and argv[0] == "write-budgets":
        return write_budgets(argv[1], argv[2:])
    if len(argv) == 2 and argv[0] == "vector-access":
        return vector_access(argv[1])
    if len(argv) == 3 and argv[0] == "vector-access" and argv[2] == "--loads-only":
        return vector_access(argv[1], loads_only=True)
    if len(argv) == 4 and argv[0] == "tensor-cores" and argv[2] == "--expect" and argv[3] in ("absent", "present"):
        return tensor_cores(argv[1], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
