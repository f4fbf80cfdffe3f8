#!/usr/bin/env python3
"""Attributes an Nsight Compute profile's per-instruction page to source functions: where a
kernel's warps spend their time (stall samples) and how many instructions they execute, by the
function each instruction comes from (docs/cuda-persistent.md, session 17).

The engine compiles its kernels without line information, so the profile's SASS names no source.
This script aligns it, by opcode sequence, with a local `nvdisasm -g` of the same build compiled
with line information (the same options otherwise, so nearly the same code), and takes each
instruction's function from there (as scripts/sass_attr.py does). An instruction the alignment
leaves out counts for the last aligned one before it (most are the poll loops, which the two
compiles lay out differently). Build that SASS from the same kernel source as the profiled binary:
the functions are looked up by line in the working tree's kernel files.

    scripts/cuda-tests profile decode_persistent        (on the GPU machine: ncu-sass.csv.gz)
    LINEINFO=1 PK_PACKED=1 PK_TYMASK=8 PK_SHAPE=64,64,9,3 python3 scripts/nvrtc_check.py --cubin /tmp/k.cubin
    nvdisasm -g -c /tmp/k.cubin > /tmp/k.sass           (nvdisasm: PyPI wheel nvidia-cuda-nvdisasm)
    python3 scripts/ncu_attr.py ncu-sass.csv.gz /tmp/k.sass [--per N] [--kernel NAME] [--top N]

--per N divides the executed instructions by N (e.g. warps x steps: 1056 x 151 for one SmolLM2
token on 132 blocks of 8 warps) to print them per warp and step.
"""
import argparse
import collections
import csv
import difflib
import gzip
import re
import sys

import sass_attr

PRED = re.compile(r"^@!?U?P\w+\s+")


def opcode(text):
    return PRED.sub("", text.strip()).split()[0] if text.strip() else ""


def local_sass(path, kernel):
    """(opcode, function) of each instruction of KERNEL's sections in nvdisasm -g output."""
    defs = sass_attr.definitions()
    out, where, section = [], "?", ""
    for line in open(path):
        if line.startswith("\t.section\t.text."):
            section = line.split(".text.", 1)[1].split(",")[0]
        elif m := re.search(r'//## File "[^"]*/([^"/]+)", line (\d+)', line):
            where = sass_attr.owner(defs, m.group(1), int(m.group(2)))
        elif kernel in section and (m := re.match(r"\s+/\*[0-9a-f]+\*/\s+(.*?);", line)):
            out.append((opcode(m.group(1)), where))
    return out


def profile(path):
    """(opcode, samples, executed, stall counts) of each instruction of ncu's source page."""
    opener = gzip.open if path.endswith(".gz") else open
    rows = list(csv.reader(opener(path, "rt")))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    hdr, data = rows[head], rows[head + 1:]
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    num = lambda r, k: int(r[ix[k]] or 0)
    return [(opcode(r[ix["Source"]]), num(r, "# Samples"), num(r, "Instructions Executed"),
             {k[6:]: num(r, k) for k in stalls}) for r in data if len(r) == len(hdr)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("ncu_csv")
    p.add_argument("sass")
    p.add_argument("--kernel", default="decode_persistent")
    p.add_argument("--per", type=float, default=1.0)
    p.add_argument("--top", type=int, default=30)
    a = p.parse_args()
    prof, loc = profile(a.ncu_csv), local_sass(a.sass, a.kernel)
    if not prof or not loc:
        print("nothing to align (empty profile or no such kernel in the SASS)", file=sys.stderr)
        return 1
    sm = difflib.SequenceMatcher(None, [x[0] for x in prof], [x[0] for x in loc], autojunk=False)
    mapping = {}
    for i, j, n in sm.get_matching_blocks():
        for k in range(n):
            mapping[i + k] = j + k
    by = collections.defaultdict(lambda: [0, 0, collections.Counter()])
    last = "?"
    for i, (_, samples, executed, stalls) in enumerate(prof):
        if i in mapping:
            last = loc[mapping[i]][1]
        f = by[last]
        f[0] += samples
        f[1] += executed
        f[2].update(stalls)
    total = sum(f[0] for f in by.values()) or 1
    print(f"{len(mapping)} of {len(prof)} instructions aligned; {total} samples, "
          f"{sum(f[1] for f in by.values()) / a.per:.0f} instructions executed (per {a.per:g})")
    print("| function | samples | executed | top stalls |")
    print("|---|---|---|---|")
    for name, (s, e, st) in sorted(by.items(), key=lambda kv: -kv[1][0])[: a.top]:
        top = ", ".join(f"{k} {100 * v // max(s, 1)}%" for k, v in st.most_common(3) if v)
        print(f"| {name} | {100 * s / total:.1f}% | {e / a.per:.1f} | {top} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
