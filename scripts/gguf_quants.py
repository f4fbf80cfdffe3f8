#!/usr/bin/env python3
"""Reference (de)quantization through the Python `gguf` package, for molla's tests.

    python3 scripts/gguf_quants.py dequantize TYPE IN.bin OUT.f32   # raw blocks in, little-endian f32 out
    python3 scripts/gguf_quants.py quantize TYPE IN.f32 OUT.bin     # little-endian f32 in, raw blocks out

TYPE is a ggml type name (F32, F16, BF16, Q4_0, Q8_0, Q4_K, ...). Exit codes: 0 ok, 2 bad usage or input,
3 "unsupported" (the package cannot do that operation for TYPE), 4 the gguf package or numpy is missing.
Needs `python3 -m pip install gguf numpy`.
"""

import sys


def main(argv: list[str]) -> int:
    if len(argv) != 5 or argv[1] not in ("dequantize", "quantize"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    op, type_name, src, dst = argv[1:]
    try:
        import numpy as np
        import gguf
        from gguf.quants import quantize, dequantize
    except ImportError as e:
        print(f"missing Python package ({e}): run `python3 -m pip install gguf numpy`", file=sys.stderr)
        return 4
    try:
        qtype = gguf.GGMLQuantizationType[type_name.upper()]
    except KeyError:
        print(f"unsupported: unknown ggml type {type_name!r}", file=sys.stderr)
        return 3
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    with open(src, "rb") as f:
        raw = f.read()
    try:
        if op == "dequantize":
            if len(raw) % type_size != 0:
                print(f"{len(raw)} bytes are not whole {type_size}-byte {qtype.name} blocks", file=sys.stderr)
                return 2
            out = dequantize(np.frombuffer(raw, dtype=np.uint8), qtype)
            out = np.ascontiguousarray(out, dtype="<f4")
        else:
            values = np.frombuffer(raw, dtype="<f4").astype(np.float32)
            if values.size % block_size != 0:
                print(f"{values.size} values are not whole {block_size}-value {qtype.name} blocks", file=sys.stderr)
                return 2
            out = np.ascontiguousarray(quantize(values, qtype)).view(np.uint8)
    except NotImplementedError as e:
        print(f"unsupported: the gguf package cannot {op} {qtype.name} {e}".rstrip(), file=sys.stderr)
        return 3
    with open(dst, "wb") as f:
        f.write(out.tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
