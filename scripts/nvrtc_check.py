#!/usr/bin/env python3
"""Compiles the CUDA kernels here, with no GPU, as the engine does on the device (one NVRTC
program, crates/cuda/src/compile.rs's file order and options), and prints ptxas's resource
report (registers, stack, spills) for the kernels named on the command line (default: the
persistent kernel). Catches compile errors before a device call.

NVRTC comes from the PyPI wheel nvidia-cuda-nvrtc (a zip): unpack its nvidia/cu13/lib folder and
point NVRTC_LIB at it (default ~/.cache/molla/nvrtc-lib). Extra -D options: MOLLA_KDEFS as the
engine reads it, PK_TYMASK=<decimal mask> for the kernel built for those weight types, and
PK_SHAPE=hd,hdv,n_head,n_head_kv for one built for that head shape (as the engine builds it),
PK_PACKED=1 for the one for packed step lists only (PK_PACKED_ONLY), PK_SHORT=1 for one built
for short caches (PK_SHORT), PK_FOLD=1 for one that folds wo into attention (PK_FOLD_WO),
PK_EMBTY=<type> for one whose embedding lookup decodes that ggml type only, PK_NTHREADS=<n> for
one of n threads a block, PK_TYMASK_PAIR / PK_TYMASK_FOLD=<mask>, PK_PAIR_SAME=1, PK_ROWS1=1
PK_LL_ONLY=1 and PK_PAIR_HALF=1 for the role masks (PkRoles, the default since session 45), PK_NEXT_L2=1 for one asking L2 for the next step's weights, PK_FUSEQKV=1 for the fused q/k/v
build (MOLLA_KDEFS=FUSEQKV; add bit 63 to PK_TYMASK as the engine does),
LEGPAD=1 for either program built for padded legacy blocks (compile.rs `PkBuild::legpad`),
LINEINFO=1 adds line information (nvdisasm -g then names each instruction's source line).
PROGRAM=main compiles the main program (every kernel but the persistent one), else the
persistent kernel's own program (compile.rs `Program`).

    [PROGRAM=main] python3 scripts/nvrtc_check.py [--cubin FILE] [KERNEL ...]

--cubin writes the CUBIN: two builds whose CUBINs are the same bytes have the same machine code
(for checking that an experiment behind MOLLA_KDEFS leaves the default kernels untouched).
"""
import ctypes
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "crates/cuda/src/compile.rs"
KERNELS = ROOT / "crates/cuda/kernels"


def sources(main):
    """The kernel files in compile.rs's order (the main program: without the persistent kernel's)."""
    text = SRC.read_text()
    block = text[text.index("const SOURCES"):text.index("];", text.index("const SOURCES"))]
    names = re.findall(r'include_str!\("\.\./kernels/([^"]+)"\)', block)
    own = re.findall(r'"([^"]+)"', text[text.index("const PERSISTENT_ONLY"):].split(";")[0])
    return [n for n in names if not (main and n in own)]


def main():
    lib_dir = Path(os.environ.get("NVRTC_LIB", Path.home() / ".cache/molla/nvrtc-lib"))
    libs = sorted(lib_dir.glob("libnvrtc.so*"))
    if not libs:
        print(f"no libnvrtc in {lib_dir}: skipped (see this script's doc)")
        return 0
    nv = ctypes.CDLL(str(libs[0]))
    main_prog = os.environ.get("PROGRAM") == "main"
    src = "".join(f'#line 1 "{n}"\n' + (KERNELS / n).read_text() + "\n" for n in sources(main_prog))
    att_tile = os.environ.get("MOLLA_ATT_TILE", "256")
    opts = ["--gpu-architecture=sm_90", "--std=c++17", f"-DATT_TILE={att_tile}", "--ptxas-options=-v"]
    if os.environ.get("LINEINFO"):
        opts.append("--generate-line-info")
    kdefs = re.split(r"[\s,]+", os.environ.get("MOLLA_KDEFS", ""))
    opts += [f"-DMOLLA_X_{d}" for d in kdefs if re.fullmatch(r"\w+(=\w+)?", d)]
    if not main_prog:
        opts.append("-DMOLLA_PK_ONLY")
    if not main_prog and re.fullmatch(r"\d+", os.environ.get("PK_TYMASK", "")):
        # The persistent kernel for those weight types only (the engine: MOLLA_PK_TYMASK=1).
        opts.append(f"-DPK_TYMASK={os.environ['PK_TYMASK']}ull")
    if not main_prog and re.fullmatch(r"\d+,\d+,\d+,\d+", os.environ.get("PK_SHAPE", "")):
        opts += [f"-D{n}={v}" for n, v in zip(["PK_HD", "PK_HDV", "PK_NH", "PK_NKV"], os.environ["PK_SHAPE"].split(","))]
    if os.environ.get("LEGPAD") == "1":
        opts.append("-DMOLLA_LEGPAD")
    if not main_prog and os.environ.get("PK_PACKED") == "1":
        opts.append("-DPK_PACKED_ONLY")
    if not main_prog and os.environ.get("PK_FOLD") == "1":
        opts.append("-DPK_FOLD_WO")
    if not main_prog and os.environ.get("PK_SHORT") == "1":
        opts.append("-DPK_SHORT")
    for name in ("PK_TYMASK_PAIR", "PK_TYMASK_FOLD"):
        if not main_prog and re.fullmatch(r"\d+", os.environ.get(name, "")):
            opts.append(f"-D{name}={os.environ[name]}ull")
    for name in ("PK_PAIR_SAME", "PK_ROWS1", "PK_LL_ONLY", "PK_PAIR_HALF", "PK_FUSEQKV", "PK_NEXT_L2"):
        if not main_prog and os.environ.get(name) == "1":
            opts.append(f"-D{name}")
    for name in ("PK_EMBTY", "PK_NTHREADS"):
        if not main_prog and re.fullmatch(r"\d+", os.environ.get(name, "")):
            opts.append(f"-D{name}={os.environ[name]}")
    prog = ctypes.c_void_p()
    rc = nv.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"molla.cu", 0, None, None)
    assert rc == 0, rc
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    rc = nv.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    nv.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nv.nvrtcGetProgramLog(prog, log)
    text = log.value.decode(errors="replace")
    if rc != 0:
        print(text)
        print(f"compile failed ({rc})")
        return 1
    args = sys.argv[1:]
    if args[:1] == ["--cubin"] and len(args) > 1:
        size = ctypes.c_size_t()
        nv.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        nv.nvrtcGetCUBIN(prog, buf)
        Path(args[1]).write_bytes(buf.raw)
        args = args[2:]
    names = args or (["matvec"] if main_prog else ["decode_persistent"])
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "Compiling entry function" in line and any(f"'{n}'" in line for n in names):
            print("\n".join(lines[i:i + 4]))
    warn = [l for l in lines if "warning" in l.lower()]
    if warn:
        print("\n".join(warn[:20]))
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
