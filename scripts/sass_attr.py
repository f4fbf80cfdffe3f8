#!/usr/bin/env python3
"""Counts a kernel's machine instructions by the source function they come from, to see where a
kernel's code goes (docs/cuda-persistent.md, session 16). Reads `nvdisasm -g` output of a CUBIN
built with line information:

    LINEINFO=1 PK_TYMASK=8 PK_SHAPE=64,64,9,3 python3 scripts/nvrtc_check.py --cubin /tmp/k.cubin
    nvdisasm -g -c /tmp/k.cubin > /tmp/k.sass     (nvdisasm: PyPI wheel nvidia-cuda-nvdisasm)
    python3 scripts/sass_attr.py /tmp/k.sass [KERNEL] [TOP]

Each instruction counts for the innermost source line nvdisasm names before it (after inlining:
the function whose body holds that line), in the sections of KERNEL (default decode_persistent,
with its called subroutines); functions are found in crates/cuda/kernels/ by their definition
lines. Prints the total and the TOP (default 40) biggest.
"""
import collections
import re
import sys
from pathlib import Path

KERNELS = Path(__file__).resolve().parent.parent / "crates/cuda/kernels"
DEF = re.compile(r'^(?:template <[^>]*>\s*)?(?:extern "C" )?(?:MOLLA_KERNEL|__device__|__global__)[^(]*?(\w+)\s*\(')


def definitions():
    """Per kernel file, the (line, name) of each function definition, in order."""
    out = {}
    for f in KERNELS.iterdir():
        out[f.name] = [(i, m.group(1)) for i, line in enumerate(f.read_text().splitlines(), 1) if (m := DEF.match(line))]
    return out


def owner(defs, file, line):
    """The function (of `definitions()`) whose body holds line `line` of kernel file `file`."""
    name = "?"
    for start, n in defs.get(file, []):
        if start <= line:
            name = n
    return name


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    kernel = sys.argv[2] if len(sys.argv) > 2 else "decode_persistent"
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    defs = definitions()
    counts = collections.Counter()
    where, section = ("?", "?"), ""
    for line in open(sys.argv[1]):
        if line.startswith("\t.section\t.text."):
            section = line.split(".text.", 1)[1].split(",")[0]
        elif m := re.search(r'//## File "[^"]*/([^"/]+)", line (\d+)', line):
            where = (m.group(1), owner(defs, m.group(1), int(m.group(2))))
        elif kernel in section and re.match(r"\s+/\*[0-9a-f]+\*/\s+\S", line):
            counts[where] += 1
    print(f"{sum(counts.values())} instructions in {kernel}")
    for (file, name), n in counts.most_common(top):
        print(f"{n:7d}  {name} ({file})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
