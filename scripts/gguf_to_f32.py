#!/usr/bin/env python3
"""Write a copy of a GGUF model with every tensor dequantized to F32.

    python3 scripts/gguf_to_f32.py IN.gguf OUT.gguf

Metadata is copied unchanged (but general.file_type = 0, all F32).  The
weights hold exactly the values the quantized file decodes to, so an engine
run on OUT sees the same model with no quantized arithmetic: this is how
oracle.py is checked against llama.cpp (llamacpp_logits.py --f32-kv agrees
with it to ~1e-5 on such a file), and how an engine's float path can be
told apart from its quantized kernels.
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize


def main(src, dst):
    r = GGUFReader(src)
    w = GGUFWriter(dst, r.fields["general.architecture"].contents())
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue  # written by GGUFWriter itself
        vtype = field.types[0]
        value = 0 if key == "general.file_type" else field.contents()
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(key, value, vtype, sub_type=sub)
    for t in r.tensors:
        shape = tuple(int(n) for n in reversed(t.shape))  # ggml -> numpy
        data = t.data.reshape(shape[0], -1) if len(shape) > 1 else t.data
        w.add_tensor(t.name, dequantize(data, t.tensor_type)
                     .astype(np.float32).reshape(shape))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip())
    main(sys.argv[1], sys.argv[2])
